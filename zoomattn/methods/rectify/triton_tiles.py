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
def _smooth_max_min(a, b, e_b, INTERPRETED: tl.constexpr):
    """f = log(1 + eᵃ + eᵇ) − log(1 + e⁻ᵃ + e⁻ᵇ) with ∂f/∂a and ∂f/∂b, given e_b = e^{−|b|}, from
    one more exponential, A = eᵃ (|a| ≤ ξ ≤ ``config.MAX_XI`` keeps A, 1/A and the sums below
    normal fp32 numbers, and what e_b's flush to 0 past |b| ≈ 87 drops negligible). Taking e^{|b|}
    out of the sum it dominates, f = a + b + log(n/d) with n = 1 + E + E·A, d = 1 + A + E·A for
    b ≥ 0 and n = 1 + A + E, d = A + E + E·A for b < 0 (E = e_b), and ∂f/∂a = c₁/n + c₂/d,
    ∂f/∂b = c₂/n + c₁/d with c₁ = E·A, c₂ = 1 (b ≥ 0) or c₁ = A, c₂ = E (b < 0)."""
    big_a = exp(a, INTERPRETED)
    e_ba = e_b * big_a
    positive = b >= 0.0
    n = tl.where(positive, 1.0 + e_b + e_ba, 1.0 + big_a + e_b)
    d = tl.where(positive, 1.0 + big_a + e_ba, big_a + e_b + e_ba)
    r_n, r_d = reciprocal(n, INTERPRETED), reciprocal(d, INTERPRETED)
    f = a + b + log(n * r_d, INTERPRETED)
    c1 = tl.where(positive, e_ba, big_a)
    c2 = tl.where(positive, 1.0, e_b)
    return f, c1 * r_n + c2 * r_d, c2 * r_n + c1 * r_d


@triton.jit
def rectifier(x, xi, G_KIND: tl.constexpr, INTERPRETED: tl.constexpr):
    """(g(x), g′(x)) for kernel.Rectifier's variants (its docstring has the formulas). One
    exponential, E = e^{−|x|}, gives tanh x = ±(1 − E²)/(1 + E²), σ(x) (1/(1 + E) or E/(1 + E))
    and the smooth max-min's e^{−|x|}."""
    e = exp(-tl.abs(x), INTERPRETED)  # unused, hence dropped, by identity
    e2 = e * e
    t = (1.0 - e2) * reciprocal(1.0 + e2, INTERPRETED)
    t = tl.where(x >= 0.0, t, -t)  # tanh x (unused, hence dropped, by identity and sigmoid)
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
            s = tl.where(x >= 0.0, 1.0, e) * reciprocal(1.0 + e, INTERPRETED)
            a = 2.0 * xi * (s - 0.5)
            da = 2.0 * xi * s * (1.0 - s)
        g, df_da, df_dx = _smooth_max_min(a, x, e, INTERPRETED)
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
