"""Rectified attention as one fused Triton kernel, flash-attention style (forward and backward):
softmax(q·kᵀ·s + g(u·kᵀ·s) + mask)·v without the ``[L, S]`` matrix, for CUDA. The block-wise torch
``kernel.rectified_attention`` stays the CPU and reference path; ``kernel.py`` dispatches here when
``attention.kernels.choose`` says "fused". Written after FlashAttention-2 (Dao, 2023) and Triton's
fused-attention tutorial; the score and its derivatives are ours.

Forward, per query tile (online softmax over key tiles of ``BLOCK_N``): both dot products
q·kᵀ and u·kᵀ, x = s·u·kᵀ, z = s·q·kᵀ + g(x), −inf where disallowed (the reference's finfo.min
gives the same probabilities, and a row the mask leaves no key gives 0 in both), running row max
m and sum l, acc = Σ exp(z − m)·v. It keeps O and, per row, m and l: O(N) memory. Each program
visits only the tiles that can hold an allowed score: causal without a mask, those up to the
diagonal; with a mask, the span ``tile_ranges`` finds in it (causal masks with padding skip the
upper triangle as plain causal prefill does, and the padding's keys; left padding, generation's,
its rows too).

Backward. With P = softmax(z) row-wise, O = P·V and dO given:

    dV = Pᵀ·dO
    dP = dO·Vᵀ,   Δ_i = Σ_j P_ij dP_ij = dO_i·O_i,   dZ = P ∘ (dP − Δ)      (softmax backward)
    z_ij = s·q_i·k_j + g(x_ij),  x_ij = s·u_i·k_j, hence
    ∂z_ij/∂q_i = s·k_j,   ∂z_ij/∂u_i = g′(x_ij)·s·k_j,   ∂z_ij/∂k_j = s·(q_i + g′(x_ij)·u_i)
    dQ = s·dZ·K,   dU = s·(dZ ∘ g′(X))·K,   dK = s·(dZᵀ·Q + (dZ ∘ g′(X))ᵀ·U)

A masked score is a constant, so dZ is zeroed there. Two kernels recompute P from
m and l (``triton_backward.py``): one per key tile (dK, dV, summed over the query heads of its GQA
group and their query tiles: no atomics), one per query tile (dQ, dU). g′ of the smooth max/min
comes in registers from the same two exponentials as g (``triton_tiles``).

Shapes and conventions as ``kernel.py``: q, u ``[B, H, L, D]``, k, v ``[B, H_kv, S, D]`` (query
head h reads KV head h // (H / H_kv)); mask None (causal prefill when L = S, with the causal
offset S − L otherwise; one decoding step L = 1 sees every key) or boolean ``[B, 1, L, S]`` (with
``PADDING_SPANS`` padding under causal reaches the kernels as each row's span of real keys).
fp16/bf16/fp32 inputs; scores, g, softmax and every accumulation in fp32 (fp32 dot products in
IEEE precision, not TF32). P and dZ enter their dot products with V, dO, Q, U, K in the input
dtype. P is rounded to it once, as FlashAttention (and so plain SDPA) rounds it, in P·V and
Pᵀ·dO. Δ is taken from the output as computed in fp32: in training the forward also stores the
output's rounding error (``RESIDUAL``, |O| more memory until the backward). Δ from the rounded
output had an error that g′ (up to ~ξ) amplified in dU and dK: at ξ = 10 up to 1.7× plain bf16
SDPA's gradient error (tests/methods/rectify/test_triton_kernel_bf16.py, bound 1.5×), and
rising with ξ at every size tried. dZ and dZ ∘ g′ enter their products with Q, U and K split in
two bf16 parts, hi + lo (``dot_split``: twice those four tensor-core products); with
``SPLIT_SCORE_GRADIENTS`` off, rounded once as FlashAttention rounds dS: on that test up to 1.16×
SDPA's error against 1.02× split (at 128 tokens, head dim 64, ξ 3 and 10, the largest gradient
error: 0.60–0.64× against 0.44–0.45×, where Δ from the rounded output gave 0.54–0.87× split).
Tiles: a fixed table for Hopper (``_tiles``); its speed on an H200, and the sweep that tunes the
table, in docs/kernels.md.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from zoomattn.attention.math import causal_flag, row_dot
from zoomattn.attention.reuse import SameTensors
from zoomattn.attention.tile_ranges import (
    check_mask,
    launch_arg,
    mask_arg,
    padding_spans,
    tile_ranges,
    tiles_for,
)
from zoomattn.attention.triton_tiles import (
    cast,
    key_range,
    online_softmax,
    reciprocal,
    tile,
)
from zoomattn.methods.rectify.config import MAX_XI, beyond_fused_kernel
from zoomattn.methods.rectify.triton_backward import _backward_kv, _backward_q
from zoomattn.methods.rectify.triton_tiles import G_KINDS, tile_scores

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# A causal mask with padding (right: training's batches; left: generation's prompts) passed as
# each batch row's span of real keys (tile_ranges.padding_spans), not as bytes the kernels load
# per tile. On since the H200 timed it (2026-11-27, docs/kernels.md): forward + backward at 25 %
# padding, by the time's ratio to each process's SDPA, 8 % / 22 % faster at 4096 / 8192 tokens
# right-padded, 8 % / 19 % left-padded.
PADDING_SPANS = True
# With PADDING_SPANS, right padding's padded query rows (training's batches) attend to nothing,
# as left padding's already do: output 0 and no gradient, where they would see every real key.
# A fine-tune's loss never reads them and real rows never see their keys, so its loss and every
# gradient are unchanged, while the kernels skip their scores: at 25 % right padding, 40 % of
# those the mask allows (56 % of causal's left, as under left padding, against 94 %; docs/
# kernels.md). Off on CUDA until a GPU times it.
SKIP_PADDED_ROWS = False
# what the kernels derive from a mask (its key spans, the tile ranges), for every layer of one
# forward: the model passes each layer the same mask tensor
_from_mask = SameTensors()
# dK/dV's tiles computed as [keys, queries], k·qᵀ, as Triton's fused-attention tutorial and
# FlashAttention-2 compute them: P and dZ then enter Pᵀ·dO and dZᵀ·Q as they are, where the
# [queries, keys] tile is transposed in registers (through shared memory) three times per tile.
# On since the H200 timed it (2026-11-27) at 25 % left padding, by the time's ratio to each
# process's SDPA: with the mask's bytes 3 % / 12 % faster at 4096 / 8192 tokens at 128 keys per
# tile, 5 % / 16 % at 64; with PADDING_SPANS, at 128 keys only, 2 % / 10 % (across the session's
# two calls). Causal and right padding were not timed with it (docs/kernels.md).
KV_KEYS_AS_ROWS = True
# dZ and dZ ∘ g′ in two parts, hi + lo, in their products with Q, U and K (on), or rounded once as
# FlashAttention rounds dS (off: those products halved, the backward loops 9-15 % shorter at sm_90,
# the gradients' bf16 error ~1.4× this setting's at 128 tokens; module docstring). Stays on: on the
# H200 (2026-11-27), by the time's ratio to each process's SDPA, rounding once was 5 % slower at
# 4096 tokens under 25 % left padding and 7 % (that padding) to 12 % (causal) faster at 8192, too
# little for that error.
SPLIT_SCORE_GRADIENTS = True


@triton.jit
def _forward(
    Q, U, K, V, OUT, OUT_LO, M, L, MASK, RANGES,
    sq_b, sq_h, sq_l, sq_d, sk_b, sk_h, sk_l, sk_d, sm_b, sm_l,
    n_heads, group, n_q, n_k, head_dim, offset, scale, xi,
    G_KIND: tl.constexpr, CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr, RESIDUAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """O of one query tile of one head, its rows' m and l; RESIDUAL: also O's rounding error
    (fp32 O − O in the output dtype, in that dtype) in OUT_LO, for the backward's Δ."""
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // n_heads, bh % n_heads
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    rows, rows_ok = tile(b, h, offs_m, offs_d, sq_b, sq_h, sq_l, sq_d, n_q, head_dim)
    q = tl.load(Q + rows, mask=rows_ok, other=0.0)
    u = tl.load(U + rows, mask=rows_ok, other=0.0)
    mask_rows = MASK + b * sm_b + offs_m[:, None] * sm_l

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    start, end = key_range(RANGES, b, pid_m, n_k, offset, CAUSAL, HAS_MASK, BLOCK_M)
    for start_n in range(start, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        cols, cols_ok = tile(b, h // group, offs_n, offs_d, sk_b, sk_h, sk_l, sk_d, n_k, head_dim)
        k = tl.load(K + cols, mask=cols_ok, other=0.0)
        v = tl.load(V + cols, mask=cols_ok, other=0.0)
        z, _, _ = tile_scores(
            q, u, k, offs_m, offs_n, mask_rows, n_q, n_k, offset, scale, xi,
            G_KIND, CAUSAL, HAS_MASK, PRECISION, UPCAST, False,
        )  # fmt: skip
        m_i, l_i, acc = online_softmax(z, m_i, l_i, acc, v, False, PRECISION, UPCAST)
    empty = l_i == 0.0  # a row the mask leaves no key: output 0, and p = 0 in backward
    l_i = tl.where(empty, 1.0, l_i)
    m_i = tl.where(empty, 0.0, m_i)
    acc = acc * reciprocal(l_i, UPCAST)[:, None]
    out = cast(acc, OUT.dtype.element_ty, UPCAST)
    tl.store(OUT + rows, out, mask=rows_ok)
    if RESIDUAL:
        lo = cast(acc - out.to(tl.float32), OUT.dtype.element_ty, UPCAST)
        tl.store(OUT_LO + rows, lo, mask=rows_ok)
    stats = bh * n_q + offs_m
    tl.store(M + stats, m_i, mask=offs_m < n_q)
    tl.store(L + stats, l_i, mask=offs_m < n_q)


# --- host side -----------------------------------------------------------------------------------


def _tiles(head_dim: int, device: torch.device) -> dict[str, tuple[int, int, int, int]]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of each kernel, and ``decode``: the forward's
    for a call of at most 16 queries (a decoding step), whose 64-row tile would be mostly empty.
    On CUDA the fastest of the H200 sweep (``benchmarks/rectified_triton.py --sweep``, 4096
    tokens under a left-padding mask; docs/kernels.md): 9.2 ms forward + backward against 15.5 ms
    for the table before it, which an offline sm_90 compile had chosen. Four warps won at every
    kernel; the dQ/dU tile then spilled 96 bytes under a mask and was still the fastest (8 since
    its products accumulate in place). With ``KV_KEYS_AS_ROWS`` dK/dV takes 128 keys at 8 warps,
    rows a warpgroup MMA takes: the one tile the H200 timed with PADDING_SPANS. With the mask's
    bytes 64 keys at 4 warps was faster there (16.3 against 17.4 ms at 8192); with key spans it
    is untimed, and compiled for sm_90 it spills 32 bytes where 128 keys spills 16
    (benchmarks/results/triton_static.md). Elsewhere (Triton's interpreter) 16×16, so short test
    sequences span several tiles."""
    if device.type != "cuda":
        return dict.fromkeys(("forward", "kv", "q", "decode"), (16, 16, 1, 1))
    kv = (16, 128, 8, 2) if KV_KEYS_AS_ROWS else (16, 32, 4, 2)
    return {"forward": (64, 32, 4, 3), "kv": kv, "q": (64, 16, 4, 2),
            "decode": (16, 64, 4, 2)}  # fmt: skip


def _dense_pair(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """a and b with one set of strides, dense in the model's [B, L, H, D] or in [B, H, L, D] order
    (so empty_like gives their gradients the same strides): the kernels index all four with it."""

    def dense(t):
        return t.is_contiguous() or t.transpose(1, 2).is_contiguous()

    if a.stride() != b.stride() or not dense(a):
        return a.contiguous(), b.contiguous()
    return a, b


def _check_inputs(q, u, k, v) -> None:
    if not (q.dtype == u.dtype == k.dtype == v.dtype) or q.dtype not in DTYPES:
        dtypes = sorted({str(t.dtype) for t in (q, u, k, v)})
        raise ValueError(
            f"fused rectified attention: q, u, k, v of one dtype among fp16/bf16/fp32, got "
            f"{', '.join(dtypes)} (attention_kernels: reference runs any dtype)"
        )
    if q.device.type != "cuda" and not triton.knobs.runtime.interpret:
        raise ValueError(
            f"fused rectified attention runs on CUDA (or on the CPU in Triton's interpreter, "
            f"TRITON_INTERPRET=1, set before import), got tensors on {q.device}"
        )
    if q.shape != u.shape or k.shape != v.shape or q.dim() != 4:
        raise ValueError(f"q, u [B, H, L, D] and k, v [B, H_kv, S, D], got {q.shape}, {u.shape}, "
                         f"{k.shape}, {v.shape}")  # fmt: skip
    if k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3] or q.shape[1] % k.shape[1]:
        raise ValueError(f"k, v {tuple(k.shape)} do not fit q {tuple(q.shape)} (GQA: H % H_kv)")
    if q.shape[3] > 128:
        raise ValueError(
            f"fused rectified attention: head dim ≤ 128 (its tiles are sized for it), got "
            f"{q.shape[3]} (attention_kernels: reference runs any head dim)"
        )


def _common(q, k, mask, spec: dict) -> tuple[list, list, dict]:
    """Arguments every kernel shares after its tensors: strides and sizes, then constexprs."""
    b, n_heads, n_q, d = q.shape
    n_kv, n_k = k.shape[1], k.shape[2]
    if mask is None:
        mask_strides, mask_kind = (0, 0), 0
    elif mask.dim() == 2:  # padding_spans: two numbers per batch row
        mask_strides, mask_kind = (mask.stride(0), 0), 3 if spec.get("padded_rows_empty") else 2
    else:
        mask_strides, mask_kind = (mask.stride(0), mask.stride(2)), 1
    args = [*q.stride(), *k.stride(), *mask_strides]
    sizes = [n_heads // n_kv, n_q, n_k, d, n_k - n_q, spec["scale"], spec["xi"]]
    constexprs = {
        "G_KIND": spec["g_kind"],
        "CAUSAL": spec["causal"],
        "HAS_MASK": mask_kind,
        "PRECISION": "ieee" if q.dtype == torch.float32 else "tf32",
        "UPCAST": bool(triton.knobs.runtime.interpret),
        "BLOCK_D": max(16, triton.next_power_of_2(d)),
    }
    return args, sizes, constexprs


def _launch_options(tile) -> dict:
    block_m, block_n, warps, stages = tile
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}


class _FusedRectified(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, u, k, v, mask, spec):
        b, n_heads, n_q, _ = q.shape
        o = torch.empty_like(q)
        residual = spec["residual"]
        o_lo = torch.empty_like(q) if residual else o
        m = torch.empty(b, n_heads, n_q, device=q.device, dtype=torch.float32)
        l_sum = torch.empty_like(m)
        spans = spec.get("padding_spans")
        mask_bytes = mask_arg(mask) if spans is None else spans
        ranges = spec.get("ranges", {})  # the tiles a mask leaves work in (tile_ranges)
        strides, sizes, constexprs = _common(q, k, mask_bytes, spec)
        tile = spec["tiles"]["forward"]
        grid = (triton.cdiv(n_q, tile[0]), b * n_heads)
        _forward[grid](
            q, u, k, v, o, o_lo, m, l_sum, launch_arg(mask_bytes, q),
            launch_arg(ranges.get("forward"), q),
            *strides, n_heads, *sizes, **constexprs, RESIDUAL=residual, **_launch_options(tile),
        )  # fmt: skip
        ctx.save_for_backward(q, u, k, v, o, o_lo if residual else None, m, l_sum, mask_bytes)
        ctx.ranges = ranges
        ctx.spec = spec
        return o

    @staticmethod
    @once_differentiable
    def backward(ctx, do):
        q, u, k, v, o, o_lo, m, l_sum, mask = ctx.saved_tensors
        spec = ctx.spec
        b, n_heads, n_q, _ = q.shape
        n_kv, n_k = k.shape[1], k.shape[2]
        delta = row_dot(do, o, b_lo=o_lo)  # Δ_i = dO_i·O_i, O as the forward computed it in fp32
        dq, du, dk, dv = (torch.empty_like(t) for t in (q, u, k, v))
        strides, sizes, constexprs = _common(q, k, mask, spec)
        strides[8:8] = do.stride()  # after q's and k's strides, before the mask's
        mask_bytes, ranges = launch_arg(mask, q), ctx.ranges
        tile = spec["tiles"]["kv"]
        _backward_kv[(triton.cdiv(n_k, tile[1]), b * n_kv)](
            q, u, k, v, do, m, l_sum, delta, dk, dv, mask_bytes, launch_arg(ranges.get("kv"), q),
            *strides, n_kv, *sizes, **constexprs, KEYS_AS_ROWS=KV_KEYS_AS_ROWS,
            SPLIT=SPLIT_SCORE_GRADIENTS, **_launch_options(tile),
        )  # fmt: skip
        tile = spec["tiles"]["q"]
        _backward_q[(triton.cdiv(n_q, tile[0]), b * n_heads)](
            q, u, k, v, do, m, l_sum, delta, dq, du, mask_bytes, launch_arg(ranges.get("q"), q),
            *strides, n_heads, *sizes, **constexprs, SPLIT=SPLIT_SCORE_GRADIENTS,
            **_launch_options(tile),
        )  # fmt: skip
        return dq, du, dk, dv, None, None


def fused_rectified_attention(
    q, u, k, v, g, mask=None, scaling=None, causal: bool | None = None, tiles=None
) -> torch.Tensor:
    """softmax(q·kᵀ·s + g(u·kᵀ·s) + mask)·v by the fused kernel, g a ``kernel.Rectifier``; shapes as
    ``kernel.py``.
    ``causal`` None follows ``rectified_attention`` (no mask: causal prefill, or one decoding step
    over every key); True makes L < S queries causal with the offset S − L (chunked prefill over
    a cache). ``tiles`` overrides ``_tiles`` (benchmarks, tests)."""
    _check_inputs(q, u, k, v)
    if beyond_fused_kernel(g.name, g.xi):
        raise ValueError(f"fused rectified attention: xi ≤ {MAX_XI:g} for g {g.name}, got {g.xi} "
                         "(attention_kernels: reference runs any xi)")  # fmt: skip
    q, u = _dense_pair(q, u)
    k, v = _dense_pair(k, v)
    n_q, n_k = q.shape[2], k.shape[2]
    if causal is None:
        causal = causal_flag(mask, n_q, n_k)
    elif causal and (mask is not None or n_q > n_k):
        raise ValueError("causal=True takes no mask and at most as many queries as keys")
    tiles = tiles_for(tiles or _tiles(q.shape[-1], q.device), n_q)
    spec = {
        "g_kind": G_KINDS["identity" if g.is_identity else g.name],
        "xi": float(g.xi),
        "scale": q.shape[-1] ** -0.5 if scaling is None else float(scaling),
        "causal": bool(causal),
        "tiles": tiles,
        # the output's rounding error, where a backward will take Δ from the fp32 output
        "residual": q.dtype != torch.float32
        and torch.is_grad_enabled()
        and any(t.requires_grad for t in (q, u, k, v)),
    }
    checked = check_mask(mask, q.shape[0], n_q, n_k)
    if checked is None:
        return _FusedRectified.apply(q, u, k, v, checked, spec)
    spans = None
    if PADDING_SPANS:  # one comparison (a host sync) per mask
        spans = _from_mask.get("spans", (mask,), lambda: padding_spans(mask))
    if spans is not None:  # a mask of one batch row broadcast over the batch
        spec["padding_spans"] = spans.expand(q.shape[0], 2).contiguous()
        spec["padded_rows_empty"] = SKIP_PADDED_ROWS
    empty = spec.get("padded_rows_empty", False)

    def ranges():
        allowed = without_padded_rows(checked, spec["padding_spans"]) if empty else checked
        return tile_ranges(allowed, tiles)

    ranges_of = f"ranges, batch {q.shape[0]}, tiles {sorted(tiles.items())}, empty rows {empty}"
    spec["ranges"] = _from_mask.get(ranges_of, (mask,), ranges)
    return _FusedRectified.apply(q, u, k, v, checked, spec)


def without_padded_rows(mask: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
    """``mask`` ``[B, 1, L, S]`` with the query rows past each batch row's last real key (``spans``
    ``[B, 2]``; queries aligned to the last keys) allowing nothing: what the kernels compute
    under ``SKIP_PADDED_ROWS``, and the formula they are tested against."""
    n_q, n_k = mask.shape[2:]
    position = torch.arange(n_q, device=mask.device) + (n_k - n_q)
    real_rows = position < spans[:, 1:].to(position.dtype)
    return mask & real_rows[:, None, :, None]
