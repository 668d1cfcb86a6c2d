"""LKG-RALM's relevance fusion through FlexAttention: the fused path on CUDA (``kernels.choose``).

The same attention as ``kernel.fusion_bias`` + ``kernel.relevance_attention`` (paper eq. 6) with
no ``[B, 1, L, S]`` float bias: the fused heads' scores are modified inside FlexAttention's kernel
(``torch.nn.attention.flex_attention``) by two functions of a (row, column) pair that read only
per-token tensors:

- ``score_mod`` adds log α_k to the score of a QUESTION/TAIL row meeting a passage-k column (the
  per-column log α ``[B, S]`` is a captured tensor that requires grad: the estimator's α trains
  through the kernel's backward);
- ``mask_mod`` allows what the call's mask allows (its boolean ``[B, 1, L, S]``, or causal with the
  queries aligned to the last keys when there is none, as ``kernel.call_mask``; with
  ``PADDING_SPANS`` a causal mask with padding as each batch row's span of real keys) except a
  passage row meeting another passage's column.

The block mask (which 128×128 tiles hold any allowed pair, and which hold only allowed pairs) is
built here by evaluating ``mask_mod`` on ``ROWS_PER_CHUNK`` (1024) query rows at a time, so its
transient is a ``[B, 1024, S]`` bool, never the whole matrix; its metadata is O(L·S/128²).
Fully masked tiles (most cross-passage tiles, the causal upper triangle) are skipped by the
kernel. It depends only on the segments and the mask, so consecutive layers of one forward
reuse it (``attention.reuse.SameTensors``).

A fully masked row (a left-padded query row) gives 0, as today's SDPA path gives on the CPU.
Plain (unfused) heads stay on ``math.sdpa``. On CUDA flex_attention runs compiled (eager it is a
slow materialising reference); the compiled function is made once per process (and per
``AUTOTUNE``).

Guided rows apart (``ROWS_APART``). FlexAttention gives a captured tensor that requires grad its
gradient by atomic adds from every score (PyTorch's lowering, pytorch#137452): L·S adds into S
addresses, the suspect of the fused heads' cost on an H200 (docs/kernels.md). Only the
QUESTION/TAIL rows carry log α, and they are few (the question and the answer, at the end of a
prompt); a query row's output depends on no other row. So with ``ROWS_APART`` flex runs the
structure alone (``mask_mod``, no ``score_mod``: no captured gradient), and the guided rows are
computed again exactly, in fp32 a chunk of rows at a time (``rows_apart.guided_rows_attention``,
whose backward keeps their outputs and log-sum-exps, not their scores), and put in place; log
α's gradient is then an ordinary sum. Only where log α trains (grad enabled, log α requiring
it): evaluation and generation keep the score_mod, which costs no atomics without a gradient.
Padding is no guided row (the model's segments make it OTHER: ``kernel.segment_ids``), so
training's right padding after the answer goes through flex with the other rows. Off: on an
H200 under 25 % right padding (step lkg_spans, 2026-11-27) it was slower than the score_mod at
4096 tokens (1.3× its time with 2 of 32 heads fused, 1.7× with every head) and faster at 8192
(0.87×, 0.36×).

log α's gradient apart (``LOG_ALPHA_GRADIENT_APART``, off until a GPU times it). Only log α's
gradient needs the atomics, not its values: with the switch the score_mod reads log α detached,
flex computes every row as with it, its backward gives q, k and v their whole gradients, and log
α's is computed from the guided rows and flex's log-sum-exps (``log_alpha_gradient.py``): per
fused head two products of the guided rows (with K and V) in backward, nothing again in forward.
No captured tensor then requires grad, so checkpointed calls need no rows apart either.

Under activation checkpointing the guided rows always go apart where log α trains
(``APART_UNDER_CHECKPOINTING``; the model says when: ``LkgState.checkpointed``), unless its gradient
goes apart. A checkpointed layer's call runs again in backward, and PyTorch 2.13's eager flex then
gives a captured tensor that requires grad a wrong gradient, read from uninitialised memory (from
9e-43 to 7e29 where 0.77 was due, in runs of a minimal case): through log α the estimator's gradient
vanishes or explodes, and exploding, shrinks every other gradient under clipping. The rows-apart
path has no captured tensor that requires grad, and gives the gradients of the run without
checkpointing (tests/methods/lkg/test_flex_checkpointing.py). The compiled kernel, CUDA's, passed
the gpu lane's ``test_compiled_flex_fusion_under_activation_checkpointing_gives_every_gradient`` on
an H200, but under the device image's PyTorch 2.11 (2026-11-27), not the 2.13 the project pins and
whose eager flex has the fault; so compiled calls go apart too until a card runs it under 2.13.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Sequence

import torch
from torch.nn.attention.flex_attention import AuxRequest, BlockMask, flex_attention

from zoomattn.attention.reuse import SameTensors
from zoomattn.attention.tile_ranges import padding_spans
from zoomattn.methods.lkg.kernel import QUESTION, column_log_alpha, spliced_by_heads
from zoomattn.methods.lkg.log_alpha_gradient import with_log_alpha_gradient
from zoomattn.methods.lkg.rows_apart import guided_rows, guided_rows_attention, put_rows

BLOCK = 128  # FlexAttention's default tile
ROWS_PER_CHUNK = 8 * BLOCK  # query rows whose element mask exists at once while the tiles are built
DYNAMO_SWITCH = "TORCHDYNAMO_DISABLE"
# Compiled graphs of flex_attention kept: one per mask kind (none, shared, per row), grad mode,
# prefill/decoding, head count and dtype met in a job. Past dynamo's default of 8, it would fall
# back to the eager flex_attention, which materialises the scores.
GRAPHS = 64
ROWS_APART = False  # the guided rows computed apart (module docstring): on an H200 slower at 4096
# log α detached in the score_mod, its gradient computed from the guided rows outside flex
# (log_alpha_gradient.py): flex's outputs and its gradients of q, k and v as with the score_mod, no
# atomic adds, nothing computed again in forward. Off until a GPU times it (benchmarks/
# relevance_fusion_cuda.py, variants *_log_alpha_apart). It makes the rows apart unneeded under
# checkpointing, where no captured tensor then requires grad.
LOG_ALPHA_GRADIENT_APART = False
# Under activation checkpointing (a fine-tune's ``gradient_checkpointing``) the guided rows go apart
# whatever ROWS_APART says, where log α trains: PyTorch 2.13's eager flex gives a captured tensor a
# garbage gradient when the call is recomputed in backward (the module docstring). Apart, no
# captured tensor requires grad. The compiled kernel passed the gpu lane's checkpointing test on
# an H200 under PyTorch 2.11 only; off for compiled calls once it passes under the pinned 2.13.
APART_UNDER_CHECKPOINTING = True
# FlexAttention's kernel options (torch's FlexKernelOptions: tiles, warps and stages, per pass with
# the prefixes fwd_ and bwd_); None: torch's defaults for the card. On sm_90 (torch 2.13) those
# are 128 query rows per forward program: 2 fused heads at 4096 tokens make 64 programs for 132
# SMs. Off until a GPU times candidates (benchmarks/relevance_fusion_cuda.py).
KERNEL_OPTIONS: dict | None = None
# The candidate for few fused heads: twice the programs of torch 2.13's sm_90 defaults for head dim
# 128 in bf16 (forward 128×64 at 8 warps; backward 64, 128, 128, 64 at 8 warps), each among torch's
# own autotuning candidates (the generic forward default; the backward's (32, 64) pairing).
FEW_HEADS_TILES = {
    "fwd_BLOCK_M": 64, "fwd_BLOCK_N": 64, "fwd_num_warps": 4, "fwd_num_stages": 3,
    "bwd_BLOCK_M1": 32, "bwd_BLOCK_N1": 64, "bwd_BLOCK_M2": 64, "bwd_BLOCK_N2": 32,
    "bwd_num_warps": 4, "bwd_num_stages": 3,
}  # fmt: skip
# Padding under causal (right: training's batches; left: generation's prompts) read in
# ``mask_mod`` as each batch row's span of real keys (``tile_ranges.padding_spans``: a host sync
# per mask, once per forward) instead of one byte of the ``[B, 1, L, S]`` mask per score of every
# partial tile, and nearly every tile LKG-RALM computes is partial (passages of ~100 tokens
# against 128-token tiles). Any other mask is read as before. On since the H200 timed it under 25 %
# right padding (2026-11-27, step lkg_spans of benchmarks/gpu_checks.sh, one process): 2 of 32
# heads fused, forward + backward 4 % / 8 % faster at 4096 / 8192 tokens, the two heads' flex call
# alone 16 % / 12 %.
PADDING_SPANS = True
# Compile flex with inductor's max-autotune: the first call of each shape times torch's candidate
# tiles and keeps the fastest (minutes of compiling per shape). Off: a benchmark's question.
AUTOTUNE = False


def fusion_score_mod(query_segments: torch.Tensor, key_segments: torch.Tensor, log_alpha):
    """score + log α_k for a QUESTION/TAIL row and a passage-k column (else + 0), log α gathered
    per column once (``column_log_alpha``)."""
    per_column = column_log_alpha(key_segments, log_alpha)
    guided_rows = query_segments <= QUESTION  # QUESTION (-2) or TAIL (-3)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + torch.where(guided_rows[b, q_idx], per_column[b, kv_idx], 0.0)

    return score_mod


def fusion_mask_mod(query_segments: torch.Tensor, key_segments: torch.Tensor, mask, spans=None):
    """True where a fused head may attend: the call's mask and not across two passages. Reads
    only captured tensors (no Python numbers that change per call, which a compiled kernel
    would be specialised on). ``spans`` ``[B, 2]``: the mask is padding under causal with these
    spans of real keys (``padding_spans``), read as such instead of the mask."""
    q_len, k_len = query_segments.shape[-1], key_segments.shape[-1]
    last_key = torch.arange(q_len, device=query_segments.device) + (k_len - q_len)
    if mask is None:  # causal, queries aligned to the last keys (kernel.call_mask)

        def allowed(b, q_idx, kv_idx):
            return kv_idx <= last_key[q_idx]
    elif spans is not None:
        first_key, end_key = spans.unbind(-1)

        def allowed(b, q_idx, kv_idx):
            real = (kv_idx >= first_key[b]) & (kv_idx < end_key[b])
            return real & (kv_idx <= last_key[q_idx])
    elif mask.shape[0] == 1:

        def allowed(b, q_idx, kv_idx):
            return mask[0, 0, q_idx, kv_idx]
    else:

        def allowed(b, q_idx, kv_idx):
            return mask[b, 0, q_idx, kv_idx]

    def mask_mod(b, h, q_idx, kv_idx):
        row, col = query_segments[b, q_idx], key_segments[b, kv_idx]
        same_passage_or_none = (row == col) | (row < 0) | (col < 0)
        return same_passage_or_none & allowed(b, q_idx, kv_idx)

    return mask_mod


def fusion_block_mask(query_segments, key_segments, mask, spans=None) -> BlockMask:
    """The ``BlockMask`` of ``fusion_mask_mod`` (one per batch row, shared by the heads), built
    ``ROWS_PER_CHUNK`` query rows at a time by evaluating ``mask_mod`` on broadcast indices."""
    mask_mod = fusion_mask_mod(query_segments, key_segments, mask, spans)
    (batch, q_len), k_len = query_segments.shape, key_segments.shape[-1]
    device = query_segments.device
    q_tiles, k_tiles = -(-q_len // BLOCK), -(-k_len // BLOCK)
    b = torch.arange(batch, device=device)[:, None, None]
    kv_idx = torch.arange(k_tiles * BLOCK, device=device)[None, None, :]
    any_allowed, all_allowed = [], []
    for start in range(0, q_tiles * BLOCK, ROWS_PER_CHUNK):
        rows = torch.arange(start, min(start + ROWS_PER_CHUNK, q_tiles * BLOCK), device=device)
        q_idx = rows[None, :, None]
        inside = (q_idx < q_len) & (kv_idx < k_len)  # tiles past the ends count as masked
        chunk = mask_mod(b, 0, q_idx.clamp(max=q_len - 1), kv_idx.clamp(max=k_len - 1)) & inside
        tiles = chunk.view(batch, -1, BLOCK, k_tiles, BLOCK)
        any_allowed.append(tiles.any(dim=4).any(dim=2))
        all_allowed.append(tiles.all(dim=4).all(dim=2))
    full = torch.cat(all_allowed, dim=1)[:, None]  # [B, 1, q_tiles, k_tiles]
    partial = torch.cat(any_allowed, dim=1)[:, None] & ~full
    return BlockMask.from_kv_blocks(
        *_ordered(partial),
        *_ordered(full),
        BLOCK_SIZE=BLOCK,
        mask_mod=mask_mod,
        seq_lengths=(q_len, k_len),
    )


def _ordered(tiles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(number of tiles per tile row, their column indices first, ascending): BlockMask's
    layout, int32."""
    count = tiles.sum(dim=-1, dtype=torch.int32)
    columns = torch.argsort(tiles.to(torch.int8), dim=-1, descending=True, stable=True)
    return count, columns.to(torch.int32)


# what the fused heads derive from the segments and the mask, for every layer of one forward
_layouts = SameTensors()


def _check_slots(query_segments, key_segments, mask, n_slots: int) -> None:
    """Every passage has a log α slot (inside the kernel an index past it would read out of
    bounds); checked once per segments and slot count."""

    def check():
        if key_segments.numel() and int(key_segments.max()) >= n_slots:
            passage = int(key_segments.max())
            raise ValueError(f"lkg: passage {passage} has no log α ({n_slots} slots)")
        return True

    _layouts.get(f"slots {n_slots}", (query_segments, key_segments, mask), check)


def _spans(query_segments, key_segments, mask) -> torch.Tensor | None:
    """Each batch row's span of real keys ``[B, 2]`` where ``PADDING_SPANS`` is on and ``mask`` is
    padding under causal; else None (``mask_mod`` reads the mask)."""
    if not PADDING_SPANS or mask is None:
        return None
    spans = padding_spans(mask)
    return None if spans is None else spans.expand(query_segments.shape[0], 2).contiguous()


@contextlib.contextmanager
def dynamo_enabled():
    """TorchDynamo on for the block, whatever ``TORCHDYNAMO_DISABLE`` says. The CLI and the tests
    turn it off process-wide (zoomattn/__main__.py); FlexAttention needs it even eagerly: without
    it flex_attention calls its operator unwrapped, which silently gives the captured log α no
    gradient, and ``torch.compile`` hands back the function uncompiled. The variable is read each
    time ``torch.compile`` wraps a function, so it is switched on here only around our calls."""
    previous = os.environ.get(DYNAMO_SWITCH)
    os.environ[DYNAMO_SWITCH] = "0"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(DYNAMO_SWITCH)
        else:
            os.environ[DYNAMO_SWITCH] = previous


@functools.cache
def compiled_flex_attention(autotune: bool = False):
    mode = "max-autotune-no-cudagraphs" if autotune else None
    with dynamo_enabled():
        return torch.compile(flex_attention, mode=mode)


def flex_fused_heads(
    q, k, v, mask, scaling, query_segments, key_segments, log_alpha,
    compiled: bool | None = None, checkpointed: bool = False,
) -> torch.Tensor:  # fmt: skip
    """Every head of q fused: FlexAttention with GQA in the kernel. ``compiled`` defaults to
    q being on CUDA; ``checkpointed``: the call runs under activation checkpointing (recomputed in
    backward), where the guided rows go apart (``APART_UNDER_CHECKPOINTING``)."""
    compiled = q.is_cuda if compiled is None else compiled
    attend = compiled_flex_attention(AUTOTUNE) if compiled else flex_attention
    segments = (query_segments, key_segments, mask)
    _check_slots(*segments, log_alpha.shape[-1])
    # log α's gradient apart from flex only where it trains: without it the score_mod costs no
    # atomics; its gradient apart (LOG_ALPHA_GRADIENT_APART) needs no rows apart under checkpointing
    trains = torch.is_grad_enabled() and log_alpha.requires_grad
    gradient_apart = trains and LOG_ALPHA_GRADIENT_APART and not ROWS_APART
    under_checkpointing = checkpointed and APART_UNDER_CHECKPOINTING and not gradient_apart
    apart = trains and (ROWS_APART or under_checkpointing)
    if apart or gradient_apart:
        rows, valid, every_row = _layouts.get("rows", segments, lambda: guided_rows(query_segments))
        if apart and rows.shape[1]:
            rows_out = guided_rows_attention(q, k, v, mask, scaling, rows, key_segments, log_alpha)
            if every_row:  # nothing left for flex
                return rows_out
    block_mask = _layouts.get(
        f"block_mask spans={PADDING_SPANS}",
        segments,
        lambda: fusion_block_mask(*segments, _spans(*segments)),
    )
    alpha = log_alpha.detach() if gradient_apart else log_alpha
    score_mod = None if apart else fusion_score_mod(query_segments, key_segments, alpha)
    request = AuxRequest(lse=True) if gradient_apart else None  # for the guided rows' gradient
    with dynamo_enabled(), torch._dynamo.config.patch(recompile_limit=GRAPHS):
        out = attend(
            q, k, v, score_mod, block_mask, scale=scaling, enable_gqa=k.shape[1] != q.shape[1],
            kernel_options=KERNEL_OPTIONS, return_aux=request,
        )  # fmt: skip
    if apart and rows.shape[1]:
        out = put_rows(out, rows_out, rows, valid)
    if gradient_apart:  # with no guided row, log α's gradient is 0, as through the score_mod
        out, aux = out
        out = with_log_alpha_gradient(
            out, aux.lse, q, k, v, mask, scaling, rows, valid, key_segments, log_alpha
        )
    return out


def flex_relevance_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    scaling: float | None,
    heads: Sequence[int],
    query_segments: torch.Tensor,
    key_segments: torch.Tensor,
    log_alpha: torch.Tensor,
    compiled: bool | None = None,
    checkpointed: bool = False,
) -> torch.Tensor:
    """``kernel.relevance_attention`` with ``kernel.fusion_bias(query_segments, key_segments,
    log_alpha, call_mask(mask, ...))``, computed without the bias: the heads in ``heads`` through
    FlexAttention, the others ``math.sdpa(q, k, v, mask, scaling)`` (``kernel.spliced_by_heads``).
    Shapes as there; segments ``[B, L]`` / ``[B, S]``, log α ``[B, P]``. Gradients reach q, k, v and
    log α. ``checkpointed``: under activation checkpointing (``flex_fused_heads``)."""
    segments = (query_segments, key_segments, log_alpha)

    def flex(q, k, v):
        return flex_fused_heads(
            q, k, v, mask, scaling, *segments, compiled=compiled, checkpointed=checkpointed
        )

    return spliced_by_heads(q, k, v, mask, scaling, heads, flex)
