"""LKG-RALM's relevance fusion through FlexAttention: the fused path on CUDA (``kernels.choose``).

The same attention as ``kernel.fusion_bias`` + ``kernel.relevance_attention`` (paper eq. 6) with
no ``[B, 1, L, S]`` float bias: the fused heads' scores are modified inside FlexAttention's kernel
(``torch.nn.attention.flex_attention``) by two functions of a (row, column) pair that read only
per-token tensors:

- ``score_mod`` adds log α_k to the score of a QUESTION/TAIL row meeting a passage-k column (the
  per-column log α ``[B, S]`` is a captured tensor that requires grad: the estimator's α trains
  through the kernel's backward);
- ``mask_mod`` allows what the call's mask allows (its boolean ``[B, 1, L, S]``, or causal with the
  queries aligned to the last keys when there is none, as ``kernel.call_mask``) except a passage
  row meeting another passage's column.

The block mask (which 128×128 tiles hold any allowed pair, and which hold only allowed pairs) is
built here by evaluating ``mask_mod`` on ``ROWS_PER_CHUNK`` (1024) query rows at a time, so its
transient is a ``[B, 1024, S]`` bool, never the whole matrix; its metadata is O(L·S/128²).
Fully masked tiles (most cross-passage tiles, the causal upper triangle) are skipped by the
kernel. It depends only on the segments and the mask, so consecutive layers of one forward
reuse it (``_cached_block_mask``).

A fully masked row (a left-padded query row) gives 0, as today's SDPA path gives on the CPU.
Plain (unfused) heads stay on ``math.sdpa``. On CUDA flex_attention runs compiled (eager it is a
slow materialising reference); the compiled function is made once per process.
"""

from __future__ import annotations

import contextlib
import functools
import os
import weakref
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from zoomattn.methods.lkg.kernel import QUESTION, spliced_by_heads

BLOCK = 128  # FlexAttention's default tile
ROWS_PER_CHUNK = 8 * BLOCK  # query rows whose element mask exists at once while the tiles are built
DYNAMO_SWITCH = "TORCHDYNAMO_DISABLE"
# Compiled graphs of flex_attention kept: one per mask kind (none, shared, per row), grad mode,
# prefill/decoding, head count and dtype met in a job. Past dynamo's default of 8, it would fall
# back to the eager flex_attention, which materialises the scores.
GRAPHS = 64


def fusion_score_mod(query_segments: torch.Tensor, key_segments: torch.Tensor, log_alpha):
    """score + log α_k for a QUESTION/TAIL row and a passage-k column (else + 0). log α ``[B, P]``
    is gathered per column once (``[B, S]``, fp32 at least); its gradient flows back through
    the gather."""
    slot = (key_segments + 1).clamp(min=0)  # slot 0: a zero put in front for non-passage columns
    column_log_alpha = F.pad(log_alpha, (1, 0)).gather(-1, slot)
    column_log_alpha = column_log_alpha.to(torch.promote_types(log_alpha.dtype, torch.float32))
    guided_rows = query_segments <= QUESTION  # QUESTION (-2) or TAIL (-3)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + torch.where(guided_rows[b, q_idx], column_log_alpha[b, kv_idx], 0.0)

    return score_mod


def fusion_mask_mod(query_segments: torch.Tensor, key_segments: torch.Tensor, mask):
    """True where a fused head may attend: the call's mask and not across two passages. Reads
    only captured tensors (no Python numbers that change per call, which a compiled kernel
    would be specialised on)."""
    q_len, k_len = query_segments.shape[-1], key_segments.shape[-1]
    if mask is None:  # causal, queries aligned to the last keys (kernel.call_mask)
        last_key = torch.arange(q_len, device=query_segments.device) + (k_len - q_len)

        def allowed(b, q_idx, kv_idx):
            return kv_idx <= last_key[q_idx]
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


def fusion_block_mask(query_segments, key_segments, mask) -> BlockMask:
    """The ``BlockMask`` of ``fusion_mask_mod`` (one per batch row, shared by the heads), built
    ``ROWS_PER_CHUNK`` query rows at a time by evaluating ``mask_mod`` on broadcast indices."""
    mask_mod = fusion_mask_mod(query_segments, key_segments, mask)
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


_last: dict[str, object] = {}


def _cached_block_mask(query_segments, key_segments, mask, n_slots: int) -> BlockMask:
    """``fusion_block_mask``, reused while the same segment and mask tensors come back (every
    layer of one forward, and the recomputation of gradient checkpointing). Held by weak
    references: the cache never keeps a mask alive. A new one also checks that every passage
    has a log α slot (inside the kernel an index past ``n_slots`` would read out of bounds)."""
    key = (query_segments, key_segments, mask)
    refs = _last.get("refs")
    if refs is not None and all(
        (r is None and t is None) or (r is not None and r() is t)
        for r, t in zip(refs, key, strict=True)
    ):
        return _last["block_mask"]
    if key_segments.numel() and int(key_segments.max()) >= n_slots:
        raise ValueError(f"lkg: passage {int(key_segments.max())} has no log α ({n_slots} slots)")
    block_mask = fusion_block_mask(query_segments, key_segments, mask)
    _last["refs"] = tuple(None if t is None else weakref.ref(t) for t in key)
    _last["block_mask"] = block_mask
    return block_mask


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
def compiled_flex_attention():
    with dynamo_enabled():
        return torch.compile(flex_attention)


def flex_fused_heads(q, k, v, mask, scaling, query_segments, key_segments, log_alpha,
                     compiled: bool | None = None) -> torch.Tensor:  # fmt: skip
    """Every head of q fused: FlexAttention with GQA in the kernel. ``compiled`` defaults to
    q being on CUDA."""
    compiled = q.is_cuda if compiled is None else compiled
    attend = compiled_flex_attention() if compiled else flex_attention
    block_mask = _cached_block_mask(query_segments, key_segments, mask, log_alpha.shape[-1])
    score_mod = fusion_score_mod(query_segments, key_segments, log_alpha)
    with dynamo_enabled(), torch._dynamo.config.patch(recompile_limit=GRAPHS):
        return attend(
            q, k, v, score_mod, block_mask, scale=scaling, enable_gqa=k.shape[1] != q.shape[1]
        )


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
) -> torch.Tensor:
    """``kernel.relevance_attention`` with ``kernel.fusion_bias(query_segments, key_segments,
    log_alpha, call_mask(mask, ...))``, computed without the bias: the heads in ``heads`` through
    FlexAttention, the others ``math.sdpa(q, k, v, mask, scaling)`` (``kernel.spliced_by_heads``).
    Shapes as there; segments ``[B, L]`` / ``[B, S]``, log α ``[B, P]``. Gradients reach q, k, v and
    log α."""
    segments = (query_segments, key_segments, log_alpha)

    def flex(q, k, v):
        return flex_fused_heads(q, k, v, mask, scaling, *segments, compiled=compiled)

    return spliced_by_heads(q, k, v, mask, scaling, heads, flex)
