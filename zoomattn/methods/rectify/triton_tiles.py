"""The Triton device functions of the fused rectified attention (``triton_kernel.py``): g and g′
in registers, and one tile's scores with its mask (the functions every kernel shares are in
``zoomattn/attention/triton_tiles.py``). Imports triton: import only where it is
installed (``kernel.py`` imports the fused path lazily, on CUDA only)."""

from __future__ import annotations

import triton
import triton.language as tl

from zoomattn.attention.triton_tiles import allowed_keys, dot, exp, log, reciprocal

IDENTITY = tl.constexpr(0)
MAX = tl.constexpr(1)
TANH = tl.constexpr(2)
TANH_PLUS_X = tl.constexpr(3)
SIGMOID = tl.constexpr(4)
G_KINDS = {"identity": 0, "max": 1, "tanh": 2, "tanh_plus_x": 3, "sigmoid": 4}


@triton.jit
def _smooth_max_min(a, b, INTERPRETED: tl.constexpr):
    """f = log(1 + eᵃ + eᵇ) − log(1 + e⁻ᵃ + e⁻ᵇ) with ∂f/∂a and ∂f/∂b, from two exponentials:
    with hi ≥ mid ≥ lo the sorted (0, a, b), every term is exp(v − hi) or exp(lo − v) of one of
    them, i.e. 1, e^{mid−hi}, e^{lo−mid} or their product e^{lo−hi} (all ≤ 1: no overflow)."""
    hi = tl.maximum(tl.maximum(a, b), 0.0)
    lo = tl.minimum(tl.minimum(a, b), 0.0)
    mid = tl.maximum(tl.minimum(a, b), tl.minimum(tl.maximum(a, b), 0.0))
    e_mh = exp(mid - hi, INTERPRETED)
    e_lm = exp(lo - mid, INTERPRETED)
    e_lh = e_mh * e_lm
    s_pos = 1.0 + e_mh + e_lh  # Σ_v exp(v − hi): log(1 + eᵃ + eᵇ) = hi + log s_pos
    s_neg = 1.0 + e_lm + e_lh  # Σ_v exp(lo − v): log(1 + e⁻ᵃ + e⁻ᵇ) = −lo + log s_neg
    # both in [1/3, 1]: one log of their ratio
    r_pos, r_neg = reciprocal(s_pos, INTERPRETED), reciprocal(s_neg, INTERPRETED)
    f = hi + lo + log(s_pos * r_neg, INTERPRETED)
    # ∂f/∂v = exp(v − hi)/s_pos + exp(lo − v)/s_neg for v = a, b: each exponential is the one of
    # v's place in the triple (where v ties two places, both give the same value)
    a_pos = tl.where(a == hi, 1.0, tl.where(a == lo, e_lh, e_mh))
    a_neg = tl.where(a == lo, 1.0, tl.where(a == hi, e_lh, e_lm))
    b_pos = tl.where(b == hi, 1.0, tl.where(b == lo, e_lh, e_mh))
    b_neg = tl.where(b == lo, 1.0, tl.where(b == hi, e_lh, e_lm))
    return f, a_pos * r_pos + a_neg * r_neg, b_pos * r_pos + b_neg * r_neg


@triton.jit
def _sigmoid(x, INTERPRETED: tl.constexpr):
    """σ(x) = 1/(1 + e⁻ˣ) from one exponential and one reciprocal (tl.sigmoid divides with
    div.full and exponentiates without .ftz; ``attention/triton_tiles.exp``): 0 where e⁻ˣ
    overflows, as it should."""
    if INTERPRETED:
        return tl.sigmoid(x)
    return reciprocal(1.0 + exp(-x, INTERPRETED), INTERPRETED)


@triton.jit
def rectifier(x, xi, G_KIND: tl.constexpr, INTERPRETED: tl.constexpr):
    """(g(x), g′(x)) for kernel.Rectifier's variants (its docstring has the formulas)."""
    # tanh x (unused, hence dropped, by identity and sigmoid)
    t = 2.0 * _sigmoid(2.0 * x, INTERPRETED) - 1.0
    if G_KIND == IDENTITY:
        g = x
        dg = tl.full(x.shape, 1.0, tl.float32)
    elif G_KIND == TANH:
        g = xi * t
        dg = xi * (1.0 - t * t)
    elif G_KIND == TANH_PLUS_X:
        g = xi * t + x
        dg = xi * (1.0 - t * t) + 1.0
    else:  # MAX: smooth(ξ·tanh x, x); SIGMOID: smooth(2ξ·(σ(x) − ½), x)
        if G_KIND == MAX:
            a = xi * t
            da = xi * (1.0 - t * t)
        else:
            s = _sigmoid(x, INTERPRETED)
            a = 2.0 * xi * (s - 0.5)
            da = 2.0 * xi * s * (1.0 - s)
        g, df_da, df_dx = _smooth_max_min(a, x, INTERPRETED)
        dg = df_da * da + df_dx
    return g, dg


@triton.jit
def tile_scores(
    q, u, k, offs_m, offs_n, mask_rows, n_q, n_k, offset, scale, xi,
    G_KIND: tl.constexpr, CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr, KEYS_AS_ROWS: tl.constexpr,
):  # fmt: skip
    """Scores z = q·kᵀ·s + g(u·kᵀ·s) of a [BLOCK_M, BLOCK_N] tile, masked, with g′ and where
    attention is allowed; KEYS_AS_ROWS: the transposed [BLOCK_N, BLOCK_M] tile, k·qᵀ, in the
    orientation of dK and dV (their products then take it as it is, with no transposition of a
    tile in registers). Disallowed keys, and keys past the end, score −inf: a row that allows
    some key gets the reference's probabilities (its masked_fill with finfo.min underflows to the
    same 0), and a row that allows none stays empty (output 0, as the reference gives it).
    ``mask_rows``: pointers to the mask's rows of this tile, shaped as its rows (HAS_MASK)."""
    if KEYS_AS_ROWS:
        x = dot(k, tl.trans(u), PRECISION, UPCAST) * scale
        g, dg = rectifier(x, xi, G_KIND, UPCAST)  # UPCAST: run by Triton's interpreter
        z = dot(k, tl.trans(q), PRECISION, UPCAST) * scale + g
        rows, keys = offs_m[None, :], offs_n[:, None]
    else:
        kt = tl.trans(k)
        x = dot(u, kt, PRECISION, UPCAST) * scale
        g, dg = rectifier(x, xi, G_KIND, UPCAST)
        z = dot(q, kt, PRECISION, UPCAST) * scale + g
        rows, keys = offs_m[:, None], offs_n[None, :]
    allowed = allowed_keys(rows, keys, mask_rows, n_q, n_k, offset, CAUSAL, HAS_MASK)
    return tl.where(allowed, z, float("-inf")), dg, allowed
