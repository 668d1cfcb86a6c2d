"""OpAmp's common- and differential-mode combination of its two branches, shared by every path
(``kernel.py``'s plain, lean and recompute paths, ``fused.py``'s stacked one)."""

import torch


def combine_modes(a, b, common: float, differential: float) -> torch.Tensor:
    """common·(a + b) + differential·(a − b): exactly ``a`` when a = b and common = 1/2."""
    return (a + b).mul_(common).add_(a - b, alpha=differential)
