"""Device functions of OpAmp's Triton kernel (``triton_kernel.py``): one tile's allowed keys and
scores, a step of the online softmax, and a row's output and log-sum-exp. Imports triton: import
only where it is installed (``kernel.py`` imports the Triton path lazily)."""

from __future__ import annotations

import triton
import triton.language as tl

from zoomattn.attention.triton_tiles import dot, dot_split


@triton.jit
def scores(q, k, allowed, scale, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """s·q·kᵀ of a tile, −inf where attention is not allowed."""
    return tl.where(allowed, dot(q, tl.trans(k), PRECISION, UPCAST) * scale, float("-inf"))


@triton.jit
def online_softmax(z, m_i, l_i, acc, v, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """One key tile of the online softmax; a row with no allowed key so far keeps m = −inf and
    l = 0 (its maximum is taken as 0 so that no exponential sees −inf − (−inf))."""
    m_new = tl.maximum(m_i, tl.max(z, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp(m_i - m_safe)
    p = tl.exp(z - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + dot_split(p, v, PRECISION, UPCAST)  # P in two parts
    return m_new, l_i, acc


@triton.jit
def finish(m_i, l_i, acc):
    """(Oᵢ in fp32, log-sum-exp): 0 and +inf for a row with no key."""
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    return acc / l_safe[:, None], tl.where(empty, float("inf"), m_i + tl.log(l_safe))
