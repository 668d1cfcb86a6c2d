"""The fused rectified attention's backward kernels (``triton_kernel.py`` launches them; its
docstring has the derivatives): dK and dV per key tile, dQ and dU per query tile, each recomputing
the tile's scores and P from the forward's row maxima m and sums l.

Δ_i = dO_i·O_i enters every dZ = P ∘ (dP − Δ), and g′ (up to ~ξ) multiplies dZ in dU and in dK's
u-term. So the host computes Δ from the output as the forward computed it in fp32, not from the
output rounded to bf16, whose rounding error g′ would amplify (the forward's ``RESIDUAL``; figures
in ``triton_kernel``'s docstring). SPLIT (``SPLIT_SCORE_GRADIENTS``): dZ and dZ ∘ g′ enter their
products with Q, U and K in two parts, hi + lo (``dot_split``), or rounded once to the input dtype
as FlashAttention rounds dS (``dot_rounded``: half those products).
"""

from __future__ import annotations

import triton
import triton.language as tl

from zoomattn.attention.triton_tiles import (
    cast,
    dot,
    dot_rounded,
    dot_split_or_rounded,
    exp,
    key_range,
    query_range,
    reciprocal,
    tile,
)
from zoomattn.methods.rectify.triton_tiles import tile_scores


@triton.jit
def _backward_kv(
    Q, U, K, V, DO, M, L, DELTA, DK, DV, MASK, RANGES,
    sq_b, sq_h, sq_l, sq_d, sk_b, sk_h, sk_l, sk_d, so_b, so_h, so_l, so_d, sm_b, sm_l,
    n_kv, group, n_q, n_k, head_dim, offset, scale, xi,
    G_KIND: tl.constexpr, CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr, KEYS_AS_ROWS: tl.constexpr,
    SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """dK and dV of one key tile of one KV head: over its group's query heads and query tiles."""
    pid_n, bk = tl.program_id(0), tl.program_id(1)
    b, hk = bk // n_kv, bk % n_kv
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    cols, cols_ok = tile(b, hk, offs_n, offs_d, sk_b, sk_h, sk_l, sk_d, n_k, head_dim)
    k = tl.load(K + cols, mask=cols_ok, other=0.0)
    v = tl.load(V + cols, mask=cols_ok, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    first, last = query_range(RANGES, b, pid_n, n_q, offset, CAUSAL, HAS_MASK, BLOCK_N, BLOCK_M)
    for j in range(0, group):
        h = hk * group + j
        for start_m in range(first, last, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            rows, rows_ok = tile(b, h, offs_m, offs_d, sq_b, sq_h, sq_l, sq_d, n_q, head_dim)
            q = tl.load(Q + rows, mask=rows_ok, other=0.0)
            u = tl.load(U + rows, mask=rows_ok, other=0.0)
            do_rows, _do_ok = tile(b, h, offs_m, offs_d, so_b, so_h, so_l, so_d, n_q, head_dim)
            do = tl.load(DO + do_rows, mask=rows_ok, other=0.0)
            stats = (b * n_kv * group + h) * n_q + offs_m
            m = tl.load(M + stats, mask=offs_m < n_q, other=0.0)
            inv_l = reciprocal(tl.load(L + stats, mask=offs_m < n_q, other=1.0), UPCAST)
            delta = tl.load(DELTA + stats, mask=offs_m < n_q, other=0.0)
            if KEYS_AS_ROWS:  # [BLOCK_N, BLOCK_M] tiles: Pᵀ and dZᵀ as dV and dK take them
                mask_rows = MASK + b * sm_b + offs_m[None, :] * sm_l
                zt, dgt, allowed_t = tile_scores(
                    q, u, k, offs_m, offs_n, mask_rows, n_q, n_k, offset, scale, xi,
                    G_KIND, CAUSAL, HAS_MASK, PRECISION, UPCAST, True,
                )  # fmt: skip
                pt = exp(zt - m[None, :], UPCAST) * inv_l[None, :]
                dv = dot_rounded(pt, do, PRECISION, UPCAST, dv)
                dpt = dot(v, tl.trans(do), PRECISION, UPCAST)
                dzt = tl.where(allowed_t, pt * (dpt - delta[None, :]), 0.0)
                dk = dot_split_or_rounded(dzt, q, SPLIT, PRECISION, UPCAST, dk)
                dk = dot_split_or_rounded(dzt * dgt, u, SPLIT, PRECISION, UPCAST, dk)
            else:
                mask_rows = MASK + b * sm_b + offs_m[:, None] * sm_l
                z, dg, allowed = tile_scores(
                    q, u, k, offs_m, offs_n, mask_rows, n_q, n_k, offset, scale, xi,
                    G_KIND, CAUSAL, HAS_MASK, PRECISION, UPCAST, False,
                )  # fmt: skip
                p = exp(z - m[:, None], UPCAST) * inv_l[:, None]
                dv = dot_rounded(tl.trans(p), do, PRECISION, UPCAST, dv)
                dp = dot(do, tl.trans(v), PRECISION, UPCAST)
                dz = tl.where(allowed, p * (dp - delta[:, None]), 0.0)
                dk = dot_split_or_rounded(tl.trans(dz), q, SPLIT, PRECISION, UPCAST, dk)
                dk = dot_split_or_rounded(tl.trans(dz * dg), u, SPLIT, PRECISION, UPCAST, dk)
    tl.store(DK + cols, cast(dk * scale, DK.dtype.element_ty, UPCAST), mask=cols_ok)
    tl.store(DV + cols, cast(dv, DV.dtype.element_ty, UPCAST), mask=cols_ok)


@triton.jit
def _backward_q(
    Q, U, K, V, DO, M, L, DELTA, DQ, DU, MASK, RANGES,
    sq_b, sq_h, sq_l, sq_d, sk_b, sk_h, sk_l, sk_d, so_b, so_h, so_l, so_d, sm_b, sm_l,
    n_heads, group, n_q, n_k, head_dim, offset, scale, xi,
    G_KIND: tl.constexpr, CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr, SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """dQ and dU of one query tile of one query head: over the key tiles it sees."""
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // n_heads, bh % n_heads
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    rows, rows_ok = tile(b, h, offs_m, offs_d, sq_b, sq_h, sq_l, sq_d, n_q, head_dim)
    q = tl.load(Q + rows, mask=rows_ok, other=0.0)
    u = tl.load(U + rows, mask=rows_ok, other=0.0)
    do_rows, _do_ok = tile(b, h, offs_m, offs_d, so_b, so_h, so_l, so_d, n_q, head_dim)
    do = tl.load(DO + do_rows, mask=rows_ok, other=0.0)
    stats = bh * n_q + offs_m
    m = tl.load(M + stats, mask=offs_m < n_q, other=0.0)
    inv_l = reciprocal(tl.load(L + stats, mask=offs_m < n_q, other=1.0), UPCAST)
    delta = tl.load(DELTA + stats, mask=offs_m < n_q, other=0.0)
    mask_rows = MASK + b * sm_b + offs_m[:, None] * sm_l
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    du = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    start, end = key_range(RANGES, b, pid_m, n_k, offset, CAUSAL, HAS_MASK, BLOCK_M)
    for start_n in range(start, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        cols, cols_ok = tile(b, h // group, offs_n, offs_d, sk_b, sk_h, sk_l, sk_d, n_k, head_dim)
        k = tl.load(K + cols, mask=cols_ok, other=0.0)
        v = tl.load(V + cols, mask=cols_ok, other=0.0)
        z, dg, allowed = tile_scores(
            q, u, k, offs_m, offs_n, mask_rows, n_q, n_k, offset, scale, xi,
            G_KIND, CAUSAL, HAS_MASK, PRECISION, UPCAST, False,
        )  # fmt: skip
        p = exp(z - m[:, None], UPCAST) * inv_l[:, None]
        dp = dot(do, tl.trans(v), PRECISION, UPCAST)
        dz = tl.where(allowed, p * (dp - delta[:, None]), 0.0)
        dq = dot_split_or_rounded(dz, k, SPLIT, PRECISION, UPCAST, dq)
        du = dot_split_or_rounded(dz * dg, k, SPLIT, PRECISION, UPCAST, du)
    tl.store(DQ + rows, cast(dq * scale, DQ.dtype.element_ty, UPCAST), mask=rows_ok)
    tl.store(DU + rows, cast(du * scale, DU.dtype.element_ty, UPCAST), mask=rows_ok)
