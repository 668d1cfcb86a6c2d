from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QLoRAConfig:
    """QLoRA baseline: no settings of its own (LoRA and quantisation are shared, see the preset)."""
