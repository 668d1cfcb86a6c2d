"""MuDAF (GRID.md §3): the attention function is the base's; only training changes.

``attach`` adds nothing. ``objective`` hands fine-tuning the contrastive term on the selected heads
(``objective.py``); with ``heads: 0`` there is none, and training is Vanilla-SFT.
"""

from __future__ import annotations

from zoomattn.methods.mudaf.config import MudafConfig
from zoomattn.methods.mudaf.objective import ContrastiveObjective


def attach(model, cfg: MudafConfig) -> None:
    """Nothing to add: MuDAF trains the base's own query and key projections."""


def objective(cfg: MudafConfig) -> ContrastiveObjective | None:
    if cfg.heads == 0 or cfg.alpha == 0:
        return None
    if not cfg.selected:
        raise ValueError(
            f"selected: heads = {cfg.heads} but no heads were chosen (MudafConfig.resolved fills "
            "them in from the retrieval scores)"
        )
    return ContrastiveObjective(cfg.selected, cfg.alpha, cfg.tau, cfg.negatives)
