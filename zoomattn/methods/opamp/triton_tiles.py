"""Device functions of OpAmp's Triton kernel (``triton_kernel.py``): one tile's scores, and a row's
output and log-sum-exp (the functions every kernel shares are in
``zoomattn/attention/triton_tiles.py``). Imports triton: import only where it is installed
(``kernel.py`` imports the Triton path lazily)."""

from __future__ import annotations

import triton
import triton.language as tl

from zoomattn.attention.triton_tiles import dot, log, reciprocal


@triton.jit
def scores(q, k, allowed, scale, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """s·q·kᵀ of a tile, −inf where attention is not allowed."""
    return tl.where(allowed, dot(q, tl.trans(k), PRECISION, UPCAST) * scale, float("-inf"))


@triton.jit
def finish(m_i, l_i, acc, UPCAST: tl.constexpr):
    """(Oᵢ in fp32, log-sum-exp): 0 and +inf for a row with no key."""
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    lse = m_i + log(l_safe, UPCAST)
    return acc * reciprocal(l_safe, UPCAST)[:, None], tl.where(empty, float("inf"), lse)
