from __future__ import annotations

from dataclasses import dataclass

G_VARIANTS = ("max", "tanh", "tanh_plus_x", "sigmoid")  # kernel.py: their formulas
# The fused kernel's smooth max-min (g max and sigmoid) takes e^a for |a| ≤ ξ beside e^{−|x|}
# (triton_tiles._smooth_max_min). Its terms in e^{ξ−|x|} are lost where e^{−|x|} flushes to 0
# (|x| > 87.3, a subnormal): an error of e^{ξ−87.3} relative, 1e-10 at ξ = 64, 7e-4 at 80.
MAX_XI = 64.0


def beyond_fused_kernel(g: str, xi: float) -> bool:
    """Whether the fused kernel declines g at ξ: the smooth max-min's past ``MAX_XI``."""
    return g in ("max", "sigmoid") and xi > MAX_XI


@dataclass(frozen=True)
class RectifyConfig:
    """Attention rectification (docs/papers.md §2): g(ξ) on a rank-r update of the attention scores.

    ``xi`` is a number ≥ 0 or ``"auto"`` (half the base model's p90 − p10 score margin, measured
    by the workflow and fixed before training). ``rank``, ``alpha`` and ``dropout`` default to
    the shared LoRA's (``finetune.lora``): the update replaces LoRA on ``q_proj`` with the same
    parameters, so at ξ = 0 the method is that LoRA exactly. ``block``: query rows per block of
    the block-wise attention (memory O(N·block)).
    """

    xi: float | str = 3.0
    g: str = "max"
    rank: int | None = None
    alpha: float | None = None
    dropout: float | None = None
    block: int = 128

    def __post_init__(self):
        if self.g not in G_VARIANTS:
            raise ValueError(f"g: unknown variant {self.g!r} (known: {', '.join(G_VARIANTS)})")
        if self.xi != "auto" and not (isinstance(self.xi, int | float) and self.xi >= 0):
            raise ValueError(f"xi: a number ≥ 0 or 'auto', got {self.xi!r}")
        if self.block < 1:
            raise ValueError(f"block: must be ≥ 1, got {self.block}")

    def resolved(self, lora: dict, xi_auto: float | None = None) -> dict:
        """The values a model is built and saved with: LoRA's rank/alpha/dropout, ξ a number."""
        if self.xi == "auto" and xi_auto is None:
            raise ValueError("xi: 'auto' needs the base model's score margin (analysis/margin)")
        return {
            "xi": float(xi_auto if self.xi == "auto" else self.xi),
            "g": self.g,
            "rank": self.rank if self.rank is not None else lora["r"],
            "alpha": self.alpha if self.alpha is not None else lora["alpha"],
            "dropout": self.dropout if self.dropout is not None else lora["dropout"],
            "block": self.block,
        }
