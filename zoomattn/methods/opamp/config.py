from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class OpAmpConfig:
    """OpAmp adaptation (docs/papers.md §1). K is the CMRR A_d/A_c; math.inf is the differential
    limit."""

    K: float
    adapter_dim: int = 64
    every: int = 2
    dropout: float = 0.1

    def gains(self) -> tuple[float, float]:
        """(A_c, A_d): A_c = 1, A_d = K; for K = inf, A_c = 0 and A_d = 1."""
        return (0.0, 1.0) if math.isinf(self.K) else (1.0, float(self.K))

    def mode_gains(self) -> tuple[float, float]:
        """(A_c/2, A_d): the weights of the common mode M⁺V + M⁻V and of the differential mode
        M⁺V − M⁻V in M̄V (Eq. 14's form, exact in any dtype when M⁺ = M⁻)."""
        a_c, a_d = self.gains()
        return a_c / 2, a_d
