"""The backward kernels of OpAmp's two-branch Triton kernel (``triton_kernel.py`` launches them;
its docstring has the gradients): dK₀, dK₁ and dV per key tile, over its GQA group's query heads
and query tiles (no atomics), and dQ₀, dQ₁ per query tile, each recomputing both branches' P from
the forward's log-sum-exps, with dP = g·Vᵀ once per tile for both.

KEYS_AS_ROWS (``triton_kernel.KV_KEYS_AS_ROWS``): the dK/dV kernel computes its tiles as
[keys, queries], k·qᵀ, as Triton's fused-attention tutorial and FlashAttention-2 do, so that Pᵢᵀ,
w₀P₀ + w₁P₁ and dSᵢᵀ enter their products with g and Qᵢ as they are; as [queries, keys] each of
those three is transposed in registers (through shared memory) on every tile, and the products'
rows are the tile's few queries (16), too few for Hopper's warpgroup MMA, where 64 or 128 keys
are not. Rectification's kernel gained 3–16 % from the same change on an H200 (docs/kernels.md).
"""

from __future__ import annotations

import triton
import triton.language as tl

from zoomattn.attention.triton_tiles import (
    allowed_keys,
    cast,
    dot,
    dot_rounded,
    exp,
    key_range,
    query_range,
    tile,
)
from zoomattn.methods.opamp.triton_tiles import scores


@triton.jit
def _backward_kv(
    Q, K, V, DO, LSE, DELTA, DK, DV, MASK, RANGES,
    sq_b, sq_h, sq_l, sq_d, sk_b, sk_h, sk_l, sk_d, sv_b, sv_h, sv_l, sv_d,
    so_b, so_h, so_l, so_d, sm_b, sm_l,
    n_heads, n_kv, group, n_q, n_k, head_dim, offset, scale, w0, w1,
    CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    KEYS_AS_ROWS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):  # fmt: skip
    """dK₀, dK₁ and dV of one key tile of one KV head: over its group's query heads and tiles.
    KEYS_AS_ROWS: its tiles as [BLOCK_N, BLOCK_M], k·qᵀ (module docstring)."""
    pid_n, bk = tl.program_id(0), tl.program_id(1)
    b, hk = bk // n_kv, bk % n_kv
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    k_cols0, cols_ok = tile(b, hk, offs_n, offs_d, sk_b, sk_h, sk_l, sk_d, n_k, head_dim)
    k_cols1 = k_cols0 + n_kv * sk_h
    # each tile's unused validity has a name of its own: Triton types a name that a loop reassigns
    # once, so one `_` for a key tile and a query tile failed to compile unless BLOCK_M = BLOCK_N
    v_cols, _v_ok = tile(b, hk, offs_n, offs_d, sv_b, sv_h, sv_l, sv_d, n_k, head_dim)
    k0 = tl.load(K + k_cols0, mask=cols_ok, other=0.0)
    k1 = tl.load(K + k_cols1, mask=cols_ok, other=0.0)
    v = tl.load(V + v_cols, mask=cols_ok, other=0.0)
    dk0 = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dk1 = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    first, last = query_range(RANGES, b, pid_n, n_q, offset, CAUSAL, HAS_MASK, BLOCK_N, BLOCK_M)
    for j in range(0, group):
        h = hk * group + j
        for start_m in range(first, last, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            rows0, rows_ok = tile(b, h, offs_m, offs_d, sq_b, sq_h, sq_l, sq_d, n_q, head_dim)
            q0 = tl.load(Q + rows0, mask=rows_ok, other=0.0)
            q1 = tl.load(Q + rows0 + n_heads * sq_h, mask=rows_ok, other=0.0)
            do_rows, _do_ok = tile(b, h, offs_m, offs_d, so_b, so_h, so_l, so_d, n_q, head_dim)
            do = tl.load(DO + do_rows, mask=rows_ok, other=0.0)
            stats0 = (b * 2 * n_heads + h) * n_q + offs_m
            ok = offs_m < n_q
            lse0 = tl.load(LSE + stats0, mask=ok, other=float("inf"))
            lse1 = tl.load(LSE + stats0 + n_heads * n_q, mask=ok, other=float("inf"))
            delta0 = tl.load(DELTA + stats0, mask=ok, other=0.0)
            delta1 = tl.load(DELTA + stats0 + n_heads * n_q, mask=ok, other=0.0)
            if KEYS_AS_ROWS:  # [BLOCK_N, BLOCK_M] tiles: Pᵢᵀ and dSᵢᵀ as dV and dKᵢ take them
                allowed_t = allowed_keys(
                    offs_m[None, :], offs_n[:, None], MASK + b * sm_b + offs_m[None, :] * sm_l,
                    n_q, n_k, offset, CAUSAL, HAS_MASK,
                )  # fmt: skip
                zt0 = scores(k0, q0, allowed_t, scale, PRECISION, UPCAST)
                zt1 = scores(k1, q1, allowed_t, scale, PRECISION, UPCAST)
                pt0 = exp(zt0 - lse0[None, :], UPCAST)
                pt1 = exp(zt1 - lse1[None, :], UPCAST)
                dv = dot_rounded(pt0 * w0 + pt1 * w1, do, PRECISION, UPCAST, dv)
                dpt = dot(v, tl.trans(do), PRECISION, UPCAST)  # shared by the branches
                dk0 = dot_rounded(pt0 * (dpt - delta0[None, :]), q0, PRECISION, UPCAST, dk0)
                dk1 = dot_rounded(pt1 * (dpt - delta1[None, :]), q1, PRECISION, UPCAST, dk1)
            else:
                allowed = allowed_keys(
                    offs_m[:, None], offs_n[None, :], MASK + b * sm_b + offs_m[:, None] * sm_l,
                    n_q, n_k, offset, CAUSAL, HAS_MASK,
                )  # fmt: skip
                p0 = exp(scores(q0, k0, allowed, scale, PRECISION, UPCAST) - lse0[:, None], UPCAST)
                p1 = exp(scores(q1, k1, allowed, scale, PRECISION, UPCAST) - lse1[:, None], UPCAST)
                dv = dot_rounded(tl.trans(p0 * w0 + p1 * w1), do, PRECISION, UPCAST, dv)
                dp = dot(do, tl.trans(v), PRECISION, UPCAST)  # shared by the branches
                dk0 = dot_rounded(tl.trans(p0 * (dp - delta0[:, None])), q0, PRECISION, UPCAST, dk0)
                dk1 = dot_rounded(tl.trans(p1 * (dp - delta1[:, None])), q1, PRECISION, UPCAST, dk1)
    tl.store(DK + k_cols0, cast(dk0 * scale, DK.dtype.element_ty, UPCAST), mask=cols_ok)
    tl.store(DK + k_cols1, cast(dk1 * scale, DK.dtype.element_ty, UPCAST), mask=cols_ok)
    tl.store(DV + v_cols, cast(dv, DV.dtype.element_ty, UPCAST), mask=cols_ok)


@triton.jit
def _backward_q(
    Q, K, V, DO, LSE, DELTA, DQ, MASK, RANGES,
    sq_b, sq_h, sq_l, sq_d, sk_b, sk_h, sk_l, sk_d, sv_b, sv_h, sv_l, sv_d,
    so_b, so_h, so_l, so_d, sm_b, sm_l,
    n_heads, n_kv, group, n_q, n_k, head_dim, offset, scale,
    CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """dQ₀ and dQ₁ of one query tile of one query head: over the key tiles it sees."""
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // n_heads, bh % n_heads
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    rows0, rows_ok = tile(b, h, offs_m, offs_d, sq_b, sq_h, sq_l, sq_d, n_q, head_dim)
    rows1 = rows0 + n_heads * sq_h
    q0 = tl.load(Q + rows0, mask=rows_ok, other=0.0)
    q1 = tl.load(Q + rows1, mask=rows_ok, other=0.0)
    do_rows, _do_ok = tile(b, h, offs_m, offs_d, so_b, so_h, so_l, so_d, n_q, head_dim)
    do = tl.load(DO + do_rows, mask=rows_ok, other=0.0)
    stats0 = (b * 2 * n_heads + h) * n_q + offs_m
    ok = offs_m < n_q
    lse0 = tl.load(LSE + stats0, mask=ok, other=float("inf"))
    lse1 = tl.load(LSE + stats0 + n_heads * n_q, mask=ok, other=float("inf"))
    delta0 = tl.load(DELTA + stats0, mask=ok, other=0.0)
    delta1 = tl.load(DELTA + stats0 + n_heads * n_q, mask=ok, other=0.0)
    mask_rows = MASK + b * sm_b + offs_m[:, None] * sm_l
    dq0 = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    dq1 = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    start, end = key_range(RANGES, b, pid_m, n_k, offset, CAUSAL, HAS_MASK, BLOCK_M)
    for start_n in range(start, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k_cols, cols_ok = tile(b, h // group, offs_n, offs_d, sk_b, sk_h, sk_l, sk_d, n_k, head_dim)
        k0 = tl.load(K + k_cols, mask=cols_ok, other=0.0)
        k1 = tl.load(K + k_cols + n_kv * sk_h, mask=cols_ok, other=0.0)
        v_cols, _v_ok = tile(b, h // group, offs_n, offs_d, sv_b, sv_h, sv_l, sv_d, n_k, head_dim)
        v = tl.load(V + v_cols, mask=cols_ok, other=0.0)
        allowed = allowed_keys(
            offs_m[:, None], offs_n[None, :], mask_rows, n_q, n_k, offset, CAUSAL, HAS_MASK
        )
        p0 = exp(scores(q0, k0, allowed, scale, PRECISION, UPCAST) - lse0[:, None], UPCAST)
        p1 = exp(scores(q1, k1, allowed, scale, PRECISION, UPCAST) - lse1[:, None], UPCAST)
        dp = dot(do, tl.trans(v), PRECISION, UPCAST)  # shared by the branches
        dq0 = dot_rounded(p0 * (dp - delta0[:, None]), k0, PRECISION, UPCAST, dq0)
        dq1 = dot_rounded(p1 * (dp - delta1[:, None]), k1, PRECISION, UPCAST, dq1)
    tl.store(DQ + rows0, cast(dq0 * scale, DQ.dtype.element_ty, UPCAST), mask=rows_ok)
    tl.store(DQ + rows1, cast(dq1 * scale, DQ.dtype.element_ty, UPCAST), mask=rows_ok)
