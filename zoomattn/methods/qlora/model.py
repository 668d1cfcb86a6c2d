"""QLoRA baseline: the 4-bit base with LoRA on its linear layers and no change to attention."""

from __future__ import annotations

from zoomattn.methods.qlora.config import QLoRAConfig


def attach(model, cfg: QLoRAConfig) -> None:
    """Nothing to add: the LoRA layers every method shares are applied by the loader."""
