from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class OpAmpConfig:
    """OpAmp adaptation (GRID.md §1). K is the CMRR A_d/A_c; math.inf is the differential limit."""

    K: float
    adapter_dim: int = 64
    every: int = 2
    dropout: float = 0.1

    def gains(self) -> tuple[float, float]:
        """(A_c, A_d): A_c = 1, A_d = K; for K = inf, A_c = 0 and A_d = 1."""
        return (0.0, 1.0) if math.isinf(self.K) else (1.0, float(self.K))

    def branch_weights(self) -> tuple[float, float]:
        """Weights of M⁺V and M⁻V in M̄V: (A_d + A_c/2, A_c/2 − A_d)."""
        a_c, a_d = self.gains()
        return a_d + a_c / 2, a_c / 2 - a_d
