"""Triton device functions every fused attention kernel shares (rectification's, OpAmp's): fp32
dot products and bf16 rounding that Triton's interpreter reproduces, eˣ, 1/x and ln x as one
special-function instruction each, a tile's offsets, its allowed keys, a step of the online
softmax, and the span of tiles a program visits. Imports triton:
import only where it is installed (the kernels are imported lazily, on CUDA or in the
interpreter)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def dot(a, b, PRECISION: tl.constexpr, UPCAST: tl.constexpr, acc=None):
    """a @ b accumulated in fp32, added to ``acc`` where given: the product accumulates into it
    in place (``acc += dot(...)`` would hold the product in a second fp32 tile of registers).
    UPCAST (Triton's interpreter only, whose dot multiplies bf16 bit patterns as integers)
    computes it in fp32: bf16 products are exact in fp32, so the result is the GPU's up to the
    order of the sums."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc, input_precision=PRECISION)


@triton.jit
def cast(x, dtype: tl.constexpr, UPCAST: tl.constexpr):
    """fp32 x in dtype, rounded to nearest even as the GPU does. Triton's interpreter (UPCAST)
    truncates fp32 → bf16 instead: there x is first rounded on its bits, which makes the
    truncation exact."""
    if UPCAST and dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


@triton.jit
def dot_split(a, b, PRECISION: tl.constexpr, UPCAST: tl.constexpr, acc=None):
    """(acc +) a @ b for fp32 a (probabilities, score gradients) and b in the input dtype: a is
    rounded to b's dtype in two parts, hi + lo, so the product keeps ~16 bits of a, not bf16's 8."""
    hi = cast(a, b.dtype, UPCAST)
    if b.dtype == tl.float32:
        return dot(hi, b, PRECISION, UPCAST, acc)
    lo = cast(a - hi.to(tl.float32), b.dtype, UPCAST)
    return dot(lo, b, PRECISION, UPCAST, dot(hi, b, PRECISION, UPCAST, acc))


@triton.jit
def dot_rounded(a, b, PRECISION: tl.constexpr, UPCAST: tl.constexpr, acc=None):
    """(acc +) a @ b for fp32 a (probabilities, score gradients) rounded once to b's dtype, as
    FlashAttention does (``dot_split`` keeps twice the bits, at twice the products)."""
    return dot(cast(a, b.dtype, UPCAST), b, PRECISION, UPCAST, acc)


@triton.jit
def dot_split_or_rounded(a, b, SPLIT: tl.constexpr, PRECISION: tl.constexpr,
                         UPCAST: tl.constexpr, acc=None):  # fmt: skip
    """``dot_split`` where SPLIT, else ``dot_rounded``."""
    if SPLIT:
        return dot_split(a, b, PRECISION, UPCAST, acc)
    return dot_rounded(a, b, PRECISION, UPCAST, acc)


# eˣ, 1/x and ln x in fp32 as one special-function (MUFU) instruction each, flushing subnormals to
# zero (.ftz). Triton compiles tl.exp and 1/x to the same instructions without .ftz: ptxas then
# wraps each in a subnormal range check (a compare and two or three predicated instructions),
# which was a third of rectification's forward loop (1270 → 851 instructions per tile at sm_90).
# Only results or arguments below 2⁻¹²⁶ differ: flushed to 0. tl.log compiles to libdevice's
# logf, ~20 instructions. Triton's interpreter runs no PTX: INTERPRETED (the kernels' UPCAST)
# takes tl.exp, 1/x and tl.log, with subnormals flushed to 0 as .ftz flushes them, so that the
# suite's tests see what the GPU computes where a value leaves fp32's normal range.
LOG2_E = tl.constexpr(1.4426950408889634)
LN_2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _special(x, instruction: tl.constexpr):
    return tl.inline_asm_elementwise(
        instruction, "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1
    )


@triton.jit
def _flushed(x):
    """x, or 0 where x is subnormal (|x| < 2⁻¹²⁶), as .ftz instructions read and write it."""
    return tl.where(tl.abs(x) < 1.1754943508222875e-38, 0.0, x)


@triton.jit
def exp(x, INTERPRETED: tl.constexpr):
    """eˣ: ex2.approx.ftz of x·log₂e (relative error ~2⁻²², as tl.exp's ex2.approx)."""
    if INTERPRETED:
        return _flushed(tl.exp(x))
    return _special(x * LOG2_E, "ex2.approx.ftz.f32 $0, $1;")


@triton.jit
def reciprocal(x, INTERPRETED: tl.constexpr):
    """1/x: rcp.approx.ftz (≤ 1 ulp; ``1.0 / x`` compiles to div.full, the same rcp.approx with a
    range check)."""
    if INTERPRETED:
        return _flushed(1.0 / x)
    return _special(x, "rcp.approx.ftz.f32 $0, $1;")


@triton.jit
def log(x, INTERPRETED: tl.constexpr):
    """ln x for x > 0: lg2.approx.ftz (absolute error ~2⁻²²) times ln 2."""
    if INTERPRETED:
        return tl.log(_flushed(x))
    return _special(x, "lg2.approx.ftz.f32 $0, $1;") * LN_2


@triton.jit
def tile(b, h, offs, offs_d, s_b, s_h, s_l, s_d, n, head_dim):
    """Offsets of positions ``offs`` × features ``offs_d`` of head h of batch b, in a tensor with
    the strides s_b, s_h, s_l, s_d, and where they exist (position < n, feature < head_dim)."""
    offsets = b * s_b + h * s_h + offs[:, None] * s_l + offs_d[None, :] * s_d
    return offsets, (offs[:, None] < n) & (offs_d[None, :] < head_dim)


@triton.jit
def online_softmax(
    z, m_i, l_i, acc, v, SPLIT: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr
):  # fmt: skip
    """One key tile of the online softmax (running max m, sum l, acc = Σ exp(z − m)·v). A row with
    no allowed key so far keeps m = −inf and l = 0: its maximum is taken as 0 only inside the
    exponentials, so that none sees −inf − (−inf) and a later tile still sets its true maximum.
    P meets v in two bf16 parts (SPLIT, ``dot_split``) or rounded once (``dot_rounded``)."""
    m_new = tl.maximum(m_i, tl.max(z, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = exp(m_i - m_safe, UPCAST)
    p = exp(z - m_safe[:, None], UPCAST)
    acc = dot_split_or_rounded(p, v, SPLIT, PRECISION, UPCAST, acc * alpha[:, None])
    return m_new, l_i * alpha + tl.sum(p, 1), acc


@triton.jit
def allowed_keys(rows, keys, mask_rows, n_q, n_k, offset, CAUSAL: tl.constexpr,
             HAS_MASK: tl.constexpr):  # fmt: skip
    """Where query rows may attend to keys (both branches: one mask), in the orientation of the
    2-D index tensors ``rows`` and ``keys``: ``offs_m[:, None]`` and ``offs_n[None, :]`` give a
    [BLOCK_M, BLOCK_N] tile, ``offs_m[None, :]`` and ``offs_n[:, None]`` its transpose. HAS_MASK 1:
    the mask's bytes (``mask_rows``: pointers to its rows, shaped as ``rows``); 2: padding under
    causal, given by the batch row's first real key and one past its last (``mask_rows``: those
    two numbers, once per row; ``tile_ranges.padding_spans``), no mask bytes loaded: each row's
    bounds are found per row (end ≤ S, causal and a row past the queries in the last), so each
    score takes two comparisons; 3: as 2, and a row past the last real key (right padding's
    padded rows, which would see every real key) sees none."""
    if HAS_MASK >= 2:  # (Triton compiles no return inside a branch; the interpreter would)
        first_key = tl.load(mask_rows)  # shaped as rows, the same number in every row
        end = tl.load(mask_rows + 1)
        last_key = tl.minimum(rows + offset, end - 1)
        real_row = rows < n_q
        if HAS_MASK == 3:
            real_row = real_row & (rows + offset < end)
        last_key = tl.where(real_row, last_key, -1)
        allowed = (keys >= first_key) & (keys <= last_key)
    else:
        key_exists = keys < n_k
        allowed = key_exists
        if CAUSAL:
            allowed = allowed & (keys <= rows + offset)
        if HAS_MASK == 1:
            in_bounds = (rows < n_q) & key_exists
            allowed = allowed & (tl.load(mask_rows + keys, mask=in_bounds, other=0) != 0)
    return allowed


@triton.jit
def key_range(
    RANGES, b, pid_m, n_k, offset,
    CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """[start, end) of the keys query tile ``pid_m`` reads: with a mask, the key tiles that hold
    a key some row of it allows (the host's table, ``tile_ranges.tile_ranges``); causal, up to
    its last row's diagonal; otherwise every key."""
    start = 0
    end = n_k
    if CAUSAL:
        end = tl.minimum(n_k, (pid_m + 1) * BLOCK_M + offset)
    if HAS_MASK:
        bounds = RANGES + (b * tl.num_programs(0) + pid_m) * 2
        start = tl.load(bounds)
        end = tl.load(bounds + 1)
    return start, end


@triton.jit
def query_range(
    RANGES, b, pid_n, n_q, offset,
    CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    """[first, last) of the query rows that read key tile ``pid_n``, as ``key_range``: with a
    mask the host's table; causal, from the first row at or past its first key's diagonal."""
    first = 0
    last = n_q
    if CAUSAL:
        first = (tl.maximum(pid_n * BLOCK_N - offset, 0) // BLOCK_M) * BLOCK_M
    if HAS_MASK:
        bounds = RANGES + (b * tl.num_programs(0) + pid_n) * 2
        first = tl.load(bounds)
        last = tl.load(bounds + 1)
    return first, last
