"""OpAmp's two branches of attention as one Triton kernel, flash-attention style (forward and
backward), for CUDA: the ``triton`` path of ``kernel.two_branch_attention``. Opt-in only (no setting
selects it; ``attention_kernels: fused`` runs the ``stacked`` path): on an H200 at 8192 tokens it
took 4.11× causal SDPA's time under 25 % left padding, at 1.09× its memory, where the stacked path
took 4.00× the time at 3.68× the memory, causal (2026-11-27, docs/kernels.md). Written after
FlashAttention-2 (Dao, 2023) and Triton's fused-attention tutorial, with the rectified kernel's
conventions (``rectify/triton_kernel.py``); the sharing between the branches follows the idea of
``aharbi/triton-diff-attn`` (our own code).

    out = c·(O₀ + O₁) + d·(O₀ − O₁) = w₀·O₀ + w₁·O₁,  Oᵢ = softmax(QᵢKᵢᵀ·s + mask)·V,  wᵢ = c ± d

The inputs are the stacked path's (``fused.py``): ``q_stack`` = [Q₀ | Q₁] ``[B, 2H, L, D]``,
``k_stack`` = [K₀ | K₁] ``[B, 2H_kv, S, D]``, and V ``[B, H_kv, S, D]`` once (query head h of
either branch reads KV head h // (H / H_kv) of its branch).

Forward, per query tile: one pass over the key tiles, each tile's K₀, K₁ and V loaded once, two
online softmaxes (m, l and acc per branch); the output combined in fp32 from the accumulators and
rounded once. Kept for backward: O₀, O₁ (input dtype) and each row's log-sum-exp per branch.

Backward, with g the upstream gradient, Pᵢ recomputed from the log-sum-exp:

    dP = g·Vᵀ                        (once per tile: the same for both branches)
    dSᵢ = Pᵢ ∘ (dP − Δᵢ),  Δᵢ = rowsum(g ∘ Oᵢ)
    dQᵢ = s·dSᵢ·Kᵢ,  dKᵢ = s·dSᵢᵀ·Qᵢ,  dV = (w₀P₀ + w₁P₁)ᵀ·g

dQᵢ and dKᵢ are taken at the unscaled g, each branch as if its Oᵢ were the output: the contract of
``fused._Join``, whose weights are applied where the branches meet (``_Fork`` sums w₀·dx₀ + w₁·dx₁
in fp32 and rounds once; ``_BranchScale`` scales the adapters' weights), so in bf16 they round back
exactly where the branches agree. V is not behind a ``_Fork`` here: its gradient carries the
weights itself, w₀P₀ + w₁P₁ formed in fp32 and ONE dot with g, rounded once. (Two unscaled dV₀,
dV₁ rounded to bf16 and summed by ``_Fork`` would carry each rounding times |wᵢ| ≈ K.) Two kernels,
as the rectified one (``triton_backward.py``): one per key tile (dK₀, dK₁, dV over its GQA group's
query heads and query tiles: no atomics; with ``KV_KEYS_AS_ROWS`` its tiles are [keys, queries]),
one per query tile (dQ₀, dQ₁); causal tiles are skipped.

A mask reaches the kernels as its bytes, or with ``PADDING_SPANS``, where it is padding under
causal, as each batch row's span of real keys (``tile_ranges.padding_spans``); either way only the
tiles it leaves work in are visited (``tile_ranges``), found once per mask tensor.

A row the mask leaves no key gives 0 and no gradient, as ``math.sdpa`` (and so the stacked path)
gives it: its log-sum-exp is +inf, so its P is 0 in backward.

Precision as the rectified kernel: scores, softmax and accumulation in fp32 (IEEE fp32 dot products
for fp32 inputs). In backward, P, w₀P₀ + w₁P₁ and dS enter their dot products with g, K, Q rounded
once to the input dtype, as FlashAttention does; in the forward P meets V in two bf16 parts
(``rectify``'s ``dot_split``). Measured in bf16 against plain bf16 SDPA's error
(tests/methods/opamp/test_triton_kernel.py): output 0.97× with the split, 1.36× rounded once
(close to the 1.5× bound: the output is two branches weighted ±K); gradients 1.13× rounded once,
0.95× with the split, so the backward keeps the cheaper dot products.
Memory beyond the inputs: the output, O₀ and O₁ (2·|q|) and 2·B·H·L log-sum-exps.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

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
    allowed_keys,
    cast,
    key_range,
    online_softmax,
    tile,
)
from zoomattn.methods.opamp.triton_backward import _backward_kv, _backward_q
from zoomattn.methods.opamp.triton_tiles import finish, scores

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# A causal mask with padding (right: training's batches; left: generation's prompts) passed as
# each batch row's span of real keys (tile_ranges.padding_spans), not as bytes every tile loads:
# rectification's kernel, whose mask handling this shares (triton_tiles.allowed_keys), was 8-22 %
# faster with it on an H200 (docs/kernels.md). Off until a card times it here (step
# opamp_switches_ab of benchmarks/gpu_checks.sh).
PADDING_SPANS = False
# dK/dV's tiles computed as [keys, queries] (triton_backward.py), as rectification's
# KV_KEYS_AS_ROWS (3-16 % faster there on an H200). Off until a card times it here.
KV_KEYS_AS_ROWS = False
# a mask's key spans and tile ranges, built by a forward's first layer for the others (every
# layer gets the same mask tensor) and for the backward
_from_mask = SameTensors()


@triton.jit
def _forward(
    Q, K, V, OUT, O_BRANCH, LSE, MASK, RANGES,
    sq_b, sq_h, sq_l, sq_d, sk_b, sk_h, sk_l, sk_d, sv_b, sv_h, sv_l, sv_d,
    so_b, so_h, so_l, so_d, sm_b, sm_l,
    n_heads, n_kv, group, n_q, n_k, head_dim, offset, scale, common, differential,
    CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    pid_m, bh = tl.program_id(0), tl.program_id(1)
    b, h = bh // n_heads, bh % n_heads
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    rows0, rows_ok = tile(b, h, offs_m, offs_d, sq_b, sq_h, sq_l, sq_d, n_q, head_dim)
    rows1 = rows0 + n_heads * sq_h  # the same head of branch 1
    q0 = tl.load(Q + rows0, mask=rows_ok, other=0.0)
    q1 = tl.load(Q + rows1, mask=rows_ok, other=0.0)
    mask_rows = MASK + b * sm_b + offs_m[:, None] * sm_l

    m0 = tl.full([BLOCK_M], float("-inf"), tl.float32)
    m1 = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l0 = tl.zeros([BLOCK_M], tl.float32)
    l1 = tl.zeros([BLOCK_M], tl.float32)
    acc0 = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    acc1 = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
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
        z0 = scores(q0, k0, allowed, scale, PRECISION, UPCAST)
        z1 = scores(q1, k1, allowed, scale, PRECISION, UPCAST)
        m0, l0, acc0 = online_softmax(z0, m0, l0, acc0, v, True, PRECISION, UPCAST)
        m1, l1, acc1 = online_softmax(z1, m1, l1, acc1, v, True, PRECISION, UPCAST)
    o0, lse0 = finish(m0, l0, acc0, UPCAST)
    o1, lse1 = finish(m1, l1, acc1, UPCAST)
    out = (o0 + o1) * common + (o0 - o1) * differential  # combine_modes, in fp32, rounded once
    out_rows, _out_ok = tile(b, h, offs_m, offs_d, so_b, so_h, so_l, so_d, n_q, head_dim)
    tl.store(OUT + out_rows, cast(out, OUT.dtype.element_ty, UPCAST), mask=rows_ok)
    tl.store(O_BRANCH + rows0, cast(o0, O_BRANCH.dtype.element_ty, UPCAST), mask=rows_ok)
    tl.store(O_BRANCH + rows1, cast(o1, O_BRANCH.dtype.element_ty, UPCAST), mask=rows_ok)
    stats0 = (b * 2 * n_heads + h) * n_q + offs_m
    tl.store(LSE + stats0, lse0, mask=offs_m < n_q)
    tl.store(LSE + stats0 + n_heads * n_q, lse1, mask=offs_m < n_q)


# --- host side -----------------------------------------------------------------------------------


def _tiles(device: torch.device, dtype=torch.bfloat16) -> dict[str, tuple[int, int, int, int]]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of each kernel, and ``decode``: the forward's for
    a call of a few queries (``tile_ranges.tiles_for``). On CUDA a table chosen without a GPU, from
    the kernels as Triton's JIT compiles them for sm_90 at head dim 128 in bf16
    (``benchmarks/triton_static.py``): the tiles, spill-free and pipelined in causal prefill and
    under a padding mask, whose inner loop takes the fewest instructions per score (for
    ``decode``, per key of a one-query step). The table before (32×32 at 8 warps for all three)
    computed each score's exponentials 2–2.7 times over (6 MUFU per score in the forward against
    2.25) and ran at 11–17× SDPA's time on the H200; this one ran at 4.11× causal SDPA's time
    there at 8192 tokens under 25 % left padding (2026-11-27), and was never swept
    (``benchmarks/opamp_triton.py --sweep``). fp32 inputs, whose products are FMAs, keep that
    first table: at this one they spill 6–12 KiB per thread. With ``KV_KEYS_AS_ROWS`` dK/dV keeps
    its 16×64 tile at 8 warps: compiled for sm_90 the one keys-first candidate without spills,
    every product a warpgroup MMA, though its two warpgroups each compute every score's
    exponentials and its loop issues 1.76× the instructions per score; 128 keys at 8 warps, or
    64 at 4, spill 152 or 192 bytes (benchmarks/results/triton_static.md). Elsewhere (Triton's
    interpreter) 16×16, so short test sequences span several tiles."""
    if device.type != "cuda":
        return dict.fromkeys(("forward", "kv", "q", "decode"), (16, 16, 1, 1))
    if dtype == torch.float32:
        return dict.fromkeys(("forward", "kv", "q", "decode"), (32, 32, 8, 2))
    return {"forward": (128, 32, 8, 2), "kv": (16, 64, 8, 2), "q": (64, 16, 4, 2),
            "decode": (16, 128, 8, 2)}  # fmt: skip


def _check_inputs(q_stack, k_stack, v) -> None:
    if not (q_stack.dtype == k_stack.dtype == v.dtype) or q_stack.dtype not in DTYPES:
        dtypes = sorted({str(t.dtype) for t in (q_stack, k_stack, v)})
        raise ValueError(
            f"OpAmp's Triton kernel: q_stack, k_stack, v of one dtype among fp16/bf16/fp32, got "
            f"{', '.join(dtypes)}"
        )
    if q_stack.device.type != "cuda" and not triton.knobs.runtime.interpret:
        raise ValueError(
            f"OpAmp's Triton kernel runs on CUDA (or on the CPU in Triton's interpreter, "
            f"TRITON_INTERPRET=1, set before import), got tensors on {q_stack.device}"
        )
    if q_stack.dim() != 4 or k_stack.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q_stack, k_stack, v: 4-d, got {q_stack.shape}, {k_stack.shape}, "
                         f"{v.shape}")  # fmt: skip
    (b, h2, _, d), (n_kv, n_k) = q_stack.shape, v.shape[1:3]
    if tuple(k_stack.shape) != (b, 2 * n_kv, n_k, d) or v.shape[0] != b or v.shape[3] != d:
        raise ValueError(
            f"k_stack [B, 2·H_kv, S, D] and v [B, H_kv, S, D] with q_stack's B and D, got "
            f"{tuple(k_stack.shape)}, {tuple(v.shape)} for q_stack {tuple(q_stack.shape)}"
        )
    if h2 % 2 or (h2 // 2) % n_kv:
        raise ValueError(f"q_stack: [B, 2·H, L, D], H a multiple of H_kv={n_kv}; got {h2} heads")
    if d > 128:
        raise ValueError(f"OpAmp's Triton kernel: head dim ≤ 128, got {d}")


def _sizes(q, v, mask, spec: dict) -> tuple[list, dict]:
    """Every kernel's strides of the mask and sizes after the tensors' strides, and constexprs."""
    b, h2, n_q, d = q.shape
    n_kv, n_k = v.shape[1], v.shape[2]
    if mask is None:
        mask_strides, mask_kind = (0, 0), 0
    elif mask.dim() == 2:  # padding_spans: two numbers per batch row
        mask_strides, mask_kind = (mask.stride(0), 0), 2
    else:
        mask_strides, mask_kind = (mask.stride(0), mask.stride(2)), 1
    sizes = [*mask_strides, h2 // 2, n_kv, h2 // 2 // n_kv, n_q, n_k, d, n_k - n_q, spec["scale"]]
    constexprs = {
        "CAUSAL": spec["causal"],
        "HAS_MASK": mask_kind,
        "PRECISION": "ieee" if q.dtype == torch.float32 else "tf32",
        "UPCAST": bool(triton.knobs.runtime.interpret),
        "BLOCK_D": max(16, triton.next_power_of_2(d)),
    }
    return sizes, constexprs


def _launch(kernel, grid, tensors, strided, sizes, constexprs, tile, **switches):
    block_m, block_n, warps, stages = tile
    strides = [s for t in strided for s in t.stride()]
    kernel[grid](
        *tensors, *strides, *sizes, **constexprs, **switches,
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages,
    )  # fmt: skip


def flash_forward(q, k, v, mask, spec) -> tuple[torch.Tensor, tuple]:
    """The forward kernel on ``prepared`` inputs: (output, what ``flash_backward`` needs). The
    mask reaches the kernels as its bytes, or as key spans where ``prepared`` found them."""
    b, h2, n_q, d = q.shape
    ranges = spec.get("ranges", {})
    mask = spec["padding_spans"] if "padding_spans" in spec else mask_arg(mask)
    out = q.new_empty(b, h2 // 2, n_q, d)
    o_branch = torch.empty_like(q)  # O₀ | O₁, strided as q
    lse = torch.empty(b, h2, n_q, device=q.device, dtype=torch.float32)
    sizes, constexprs = _sizes(q, v, mask, spec)
    tile = spec["tiles"]["forward"]
    _launch(
        _forward, (triton.cdiv(n_q, tile[0]), b * h2 // 2),
        (q, k, v, out, o_branch, lse, launch_arg(mask, q), launch_arg(ranges.get("forward"), q)),
        (q, k, v, out), [*sizes, spec["common"], spec["differential"]], constexprs, tile,
    )  # fmt: skip
    return out, (o_branch, lse, mask, ranges)


def flash_backward(grad, q, k, v, state, spec) -> tuple[torch.Tensor, ...]:
    """dq_stack, dk_stack (at the unscaled ``grad``) and dv, from ``flash_forward``'s state."""
    o_branch, lse, mask, ranges = state
    b, h2, n_q, _ = q.shape
    n_kv, n_k = v.shape[1], v.shape[2]
    delta = torch.cat([row_dot(o, grad) for o in o_branch.chunk(2, dim=1)], 1)
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    sizes, constexprs = _sizes(q, v, mask, spec)
    mask = launch_arg(mask, q)
    strided = (q, k, v, grad)
    tile = spec["tiles"]["kv"]
    _launch(
        _backward_kv, (triton.cdiv(n_k, tile[1]), b * n_kv),
        (q, k, v, grad, lse, delta, dk, dv, mask, launch_arg(ranges.get("kv"), q)), strided,
        [*sizes, *spec["weights"]], constexprs, tile, KEYS_AS_ROWS=spec["keys_as_rows"],
    )  # fmt: skip
    tile = spec["tiles"]["q"]
    _launch(
        _backward_q, (triton.cdiv(n_q, tile[0]), b * h2 // 2),
        (q, k, v, grad, lse, delta, dq, mask, launch_arg(ranges.get("q"), q)), strided, sizes,
        constexprs, tile,
    )  # fmt: skip
    return dq, dk, dv


class _TwoBranchFlash(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, spec):
        out, (o_branch, lse, mask, ranges) = flash_forward(q, k, v, mask, spec)
        ctx.save_for_backward(q, k, v, o_branch, lse, mask)
        ctx.spec, ctx.ranges = spec, ranges
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, o_branch, lse, mask = ctx.saved_tensors
        state = (o_branch, lse, mask, ctx.ranges)
        return (*flash_backward(grad, q, k, v, state, ctx.spec), None, None)


def prepared(q_stack, k_stack, v, gains, mask=None, scaling=None, tiles=None) -> tuple:
    """(q_stack, k_stack, v, mask, spec) as the kernels take them, checked; arguments as
    ``two_branch_flash``."""
    _check_inputs(q_stack, k_stack, v)
    q_stack, k_stack = q_stack.contiguous(), k_stack.contiguous()
    if not (v.is_contiguous() or v.transpose(1, 2).is_contiguous()):
        v = v.contiguous()  # dense, so that empty_like gives its gradient the same strides
    n_q, n_k = q_stack.shape[2], k_stack.shape[2]
    common, differential = (float(x) for x in gains)
    tiles = tiles_for(tiles or _tiles(q_stack.device, q_stack.dtype), n_q)
    spec = {
        "scale": q_stack.shape[-1] ** -0.5 if scaling is None else float(scaling),
        "causal": causal_flag(mask, n_q, n_k),
        "common": common,
        "differential": differential,
        "weights": (common + differential, common - differential),
        "tiles": tiles,
        "keys_as_rows": KV_KEYS_AS_ROWS,
    }
    checked = check_mask(mask, q_stack.shape[0], n_q, n_k)
    if checked is not None:
        _mask_spec(mask, checked, spec)
    return q_stack, k_stack, v, checked, spec


def _mask_spec(mask, checked, spec: dict) -> None:
    """The tiles ``checked`` leaves work in (``tile_ranges``) and, with ``PADDING_SPANS``, its key
    spans where it is padding under causal, into ``spec``: built once per mask tensor."""
    tiles = spec["tiles"]
    ranges_of = f"ranges, batch {checked.shape[0]}, tiles {sorted(tiles.items())}"
    spec["ranges"] = _from_mask.get(ranges_of, (mask,), lambda: tile_ranges(checked, tiles))
    if PADDING_SPANS:  # one comparison (a host sync) per mask, over its own batch rows
        spans = _from_mask.get("spans", (mask,), lambda: padding_spans(mask))
        if spans is not None:  # a mask of one batch row broadcast over the batch
            spec["padding_spans"] = spans.expand(checked.shape[0], 2).contiguous()


def two_branch_flash(q_stack, k_stack, v, gains, mask=None, scaling=None, tiles=None):
    """c·(O₀ + O₁) + d·(O₀ − O₁), Oᵢ = softmax(QᵢKᵢᵀ·s + mask)·V, by the Triton kernel, with
    q_stack = [Q₀ | Q₁] ``[B, 2H, L, D]``, k_stack = [K₀ | K₁] ``[B, 2H_kv, S, D]``, v
    ``[B, H_kv, S, D]``, (c, d) = ``gains``; mask as ``math.sdpa`` (None: causal prefill, or one
    decoding step over every key). Gradients: v's of the output; q_stack's and k_stack's at the
    UNSCALED upstream gradient, per branch (``fused._Join``'s contract: see the module
    docstring). ``tiles`` overrides ``_tiles`` (benchmarks, tests)."""
    return _TwoBranchFlash.apply(*prepared(q_stack, k_stack, v, gains, mask, scaling, tiles))
