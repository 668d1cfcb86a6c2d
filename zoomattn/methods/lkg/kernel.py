"""LKG-RALM's attention kernel (docs/papers.md §4): segments, the estimator's blocked mask, fusion.

Segments. Every token gets a code from the four boundary markers (``Boundary``): passage index
k ≥ 0 from the k-th ``[d]`` through its ``[e_i]``; ``QUESTION`` from ``[q]`` through ``[e_q]``;
``TAIL`` for everything after ``[e_q]`` (answer cue, answer, generated tokens); ``OTHER`` for the
rest (bos, instruction, "document :" words) and for every token the call's attention mask hides
(padding, on either side).

Estimator mask (``estimator_mask``): the blocked bidirectional mask of the estimator's extra
forward. A passage's tokens see their whole passage, question tokens the whole question,
OTHER/TAIL tokens attend causally, padding keys are never seen and the diagonal always is.

Fusion (paper eq. 6, ``fusion_bias`` + ``relevance_attention``): on a layer's fused heads the
scores get the additive bias log M: QUESTION/TAIL rows attending passage k get log α_k, a passage
row attending another passage −inf (M = 0), everything else 0, on top of the call's own
causal/padding mask (``call_mask``). The other heads run plain causal SDPA.

Memory. Per layer with fused heads, one float ``[B, 1, L, S]`` bias (dtype of log α; shared by
the layer's fused heads, transient: built, used, freed) plus about one more of the same while it
is built (the log α part and the 0/−inf part are added): 64 MiB each in fp32 at B = 1,
L = S = 4096, 1 MiB at the tiny scale (L = S = 512). On top comes SDPA's own memory, which
depends on whether the bias needs a gradient. With a constant bias (α frozen, evaluation) the
fused CPU kernel runs and keeps no score matrix. When the bias requires grad (training: α comes
from the estimator), PyTorch's CPU dispatcher falls back to its math backend for the fused
heads (torch 2.13; the fused CPU kernel gives no gradient for a mask): that materialises the
scores and keeps the probabilities ``[B, |heads|, L, S]`` for backward, 64 MiB per fused head
in fp32 at L = S = 4096 (0.25 MiB per head at the tiny scale). Only the fused heads pay it,
since the other heads are a separate SDPA call (``benchmarks/relevance_fusion.py`` measures
both; CUDA's memory-efficient kernel may keep the bias gradient fused: not measured here).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from zoomattn.attention.math import additive_mask, gqa_for_kernel, last_row_scores, sdpa

OTHER, QUESTION, TAIL = -1, -2, -3


@dataclass(frozen=True)
class Boundary:
    """Token ids of the four markers: ``[d]``, ``[e_i]``, ``[q]``, ``[e_q]``."""

    d: int
    e: int
    q: int
    eq: int


def segment_ids(
    input_ids: torch.Tensor, boundary: Boundary, attention_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Segment code of every token ``[B, L]`` (module docstring), from the last opening marker
    (``[d]`` or ``[q]``) at or before each position and the last ``[e_i]`` before it: running maxima
    over marker positions, no loop over positions. ``attention_mask``: the call's 2-D mask
    (``[B, L]``, 1 or True for a real token); every token it hides is then OTHER.

    Edge cases, chosen so a truncated prompt still gets usable segments: a ``[d]`` without its
    ``[e_i]`` (cut off) opens passage k up to the next ``[d]`` or ``[q]``, or to the end of the
    row; ``[d]`` and ``[q]`` always open their segment; a closing marker with nothing open to
    close (``[e_i]`` after its passage closed, ``[e_q]`` outside the question) is OTHER, one inside
    the open question is a question token; after the ``[e_q]`` that closes the question every
    token is TAIL, markers included. Passage indices count the row's ``[d]`` markers from 0.
    Padding's id must not be a marker id. Without ``attention_mask``, left padding (before the
    first marker) is OTHER and right padding after ``[e_q]`` TAIL; with it, both are OTHER. The
    call's mask hides padding as keys either way, but as query rows TAIL would be guided rows: no
    real token reads them, and the fused path's rows apart (``flex.ROWS_APART``, and every
    checkpointed fine-tune) would compute each of them as a question or answer row. A mask that
    hides tokens inside a passage or the question (the project's batches hide only padding at an
    end) takes them out of it: out of its entropy's token count and its rankers' terms, and a
    hidden ``[e_i]`` or ``[e_q]`` is not found (that passage keeps α = 1).
    """
    b = boundary
    is_d, is_e, is_q, is_eq = (input_ids == t for t in (b.d, b.e, b.q, b.eq))
    pos = torch.arange(input_ids.shape[-1], device=input_ids.device).expand_as(input_ids)

    def last_at_or_before(where):  # position of the last True at or before each position, or -1
        return torch.where(where, pos, -1).cummax(dim=-1).values

    last_open = last_at_or_before(is_d | is_q).clamp(min=0)  # none yet: position 0, no opener
    opened_by_d, opened_by_q = is_d.gather(-1, last_open), is_q.gather(-1, last_open)
    last_close = F.pad(last_at_or_before(is_e)[..., :-1], (1, 0), value=-1)  # strictly before
    in_passage = opened_by_d & (last_close < last_open) & ~is_eq
    closes_question = (is_eq & opened_by_q).long()
    after_question = (closes_question.cumsum(dim=-1) - closes_question) > 0
    passage = is_d.long().cumsum(dim=-1) - 1
    codes = torch.where(in_passage, passage, OTHER)
    codes = codes.masked_fill(opened_by_q, QUESTION).masked_fill(after_question, TAIL)
    return codes if attention_mask is None else codes.masked_fill(attention_mask == 0, OTHER)


def column_log_alpha(key_segments: torch.Tensor, log_alpha: torch.Tensor) -> torch.Tensor:
    """log α of each key column's passage, 0 for a non-passage column: ``[B, S]``, fp32 at least;
    log α ``[B, P]`` gets its gradient back through the gather."""
    slot = (key_segments + 1).clamp(min=0)  # slot 0: a zero put in front for non-passage columns
    column = F.pad(log_alpha, (1, 0)).gather(-1, slot)
    return column.to(torch.promote_types(log_alpha.dtype, torch.float32))


def n_passages(segments: torch.Tensor) -> int:
    """Number of passage slots over the batch: the largest passage index + 1 (0 if none)."""
    return 0 if segments.numel() == 0 else max(int(segments.max()) + 1, 0)


def estimator_mask(segments: torch.Tensor, key_padding: torch.Tensor | None = None) -> torch.Tensor:
    """Blocked bidirectional mask ``[B, 1, L, L]`` (True = allowed) for the estimator pass.

    Passage k rows see passage k's columns, QUESTION rows QUESTION columns (both directions),
    OTHER/TAIL rows every earlier column (causal). ``key_padding`` ``[B, L]`` (True = real token)
    removes padding columns; the diagonal is always allowed so no row is empty.
    """
    n = segments.shape[-1]
    row, col = segments[:, None, :, None], segments[:, None, None, :]
    blocks = (row == col) & ((row >= 0) | (row == QUESTION))
    causal = torch.ones(n, n, dtype=torch.bool, device=segments.device).tril()
    allowed = blocks | (((row == OTHER) | (row == TAIL)) & causal)
    if key_padding is not None:
        allowed = allowed & key_padding[:, None, None, :].bool()
    return allowed | torch.eye(n, dtype=torch.bool, device=segments.device)


def call_mask(mask: torch.Tensor | None, q_len: int, k_len: int, device) -> torch.Tensor:
    """The boolean mask ``[B or 1, 1, q_len, k_len]`` an attention call implies: ``mask`` itself
    when given, else causal with the queries aligned to the last keys (one decoding query sees
    every key), as ``math.sdpa`` reads a missing mask."""
    if mask is not None:
        return mask
    rows = torch.arange(q_len, device=device)[:, None] + (k_len - q_len)
    return (torch.arange(k_len, device=device)[None, :] <= rows)[None, None]


def fusion_bias(
    query_segments: torch.Tensor,
    key_segments: torch.Tensor,
    log_alpha: torch.Tensor,
    allowed: torch.Tensor,
) -> torch.Tensor:
    """Additive bias log M ``[B, 1, L, S]`` of the fused heads, in log α's dtype.

    ``query_segments`` ``[B, L]`` are the codes of the query rows (while decoding, the last L
    codes of ``key_segments`` ``[B, S]``); ``log_alpha`` ``[B, P]`` holds log α_k per passage,
    P ≥ n_passages (a passage index beyond P raises); ``allowed`` is the call's boolean mask
    (``call_mask``). Entries: −inf where ``allowed`` is False or a passage row meets another
    passage's column; log α_k where a QUESTION/TAIL row meets a passage-k column; else 0. A
    position always shares its own code, so an allowed diagonal stays finite whatever α is.
    Differentiable w.r.t. ``log_alpha``; the 0/−inf part is built without grad, so autograd
    keeps no ``[L, S]`` tensor for this function.
    """
    row, col = query_segments[:, None, :, None], key_segments[:, None, None, :]
    column_alpha = column_log_alpha(key_segments, log_alpha).to(log_alpha.dtype)[:, None, None, :]
    guided_rows = (row == QUESTION) | (row == TAIL)
    cross = (row >= 0) & (col >= 0) & (row != col)
    blocked = cross | ~allowed.bool()
    structure = torch.zeros(blocked.shape, dtype=log_alpha.dtype, device=log_alpha.device)
    structure.masked_fill_(blocked, float("-inf"))
    return structure.add_(torch.where(guided_rows, column_alpha, 0.0))


def _heads(heads: Sequence[int], n_heads: int) -> list[int]:
    fused = sorted({int(h) for h in heads})
    if fused and not (0 <= fused[0] and fused[-1] < n_heads):
        raise ValueError(f"fused heads {fused} out of range for {n_heads} heads")
    return fused


def _select(q, k, v, heads: list[int]):
    """q of ``heads`` and the KV head each of them reads (GQA: query head h reads h // group)."""
    group = q.shape[1] // k.shape[1]
    idx = torch.tensor(heads, device=q.device)
    kv = idx // group
    return q.index_select(1, idx), k.index_select(1, kv), v.index_select(1, kv)


def by_heads(q, k, v, mask, scaling, heads: Sequence[int], attend) -> torch.Tensor:
    """``attend(q, k, v)`` on the heads in ``heads`` and ``math.sdpa(q, k, v, mask, scaling)`` on
    the others, in head order. With every head fused ``attend`` gets q, k, v as they are (GQA
    left to its kernel); otherwise the selected query heads and the KV head each reads."""
    n_heads = q.shape[1]
    fused = _heads(heads, n_heads)
    if not fused:
        return sdpa(q, k, v, mask, scaling)
    if len(fused) == n_heads:
        return attend(q, k, v)
    others = [h for h in range(n_heads) if h not in set(fused)]
    out_fused = attend(*_select(q, k, v, fused))
    out_plain = sdpa(*_select(q, k, v, others), mask, scaling)
    order = torch.tensor(others + fused, device=q.device).argsort()
    return torch.cat([out_plain, out_fused], dim=1).index_select(1, order)


def spliced_by_heads(q, k, v, mask, scaling, heads: Sequence[int], attend) -> torch.Tensor:
    """``by_heads`` without copying the plain heads: ``math.sdpa`` on every head, then the fused
    heads' outputs put in their places (their SDPA output is dropped and gets a gradient of 0).
    The same values and gradients, the K/V gradients summed in another order. With 2 of 32 heads
    through FlexAttention on an H200 (no mask: SDPA kept GQA in its kernel) it took 0.79× and
    0.90× by_heads' time at 4096 and 8192 tokens and 1.02× plain SDPA's memory against 1.27×
    (docs/kernels.md), so the flex path splits its heads so; the bias path, the CPU's, keeps
    by_heads."""
    fused = _heads(heads, q.shape[1])
    if not fused or len(fused) == q.shape[1]:
        return by_heads(q, k, v, mask, scaling, heads, attend)
    index = torch.tensor(fused, device=q.device)
    return sdpa(q, k, v, mask, scaling).index_copy(1, index, attend(*_select(q, k, v, fused)))


def relevance_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    scaling: float | None,
    heads: Sequence[int],
    bias: torch.Tensor,
) -> torch.Tensor:
    """Attention output ``[B, H, L, D]``: the heads in ``heads`` run SDPA with the float ``bias``
    (``fusion_bias``, which already holds the call's mask; broadcast over those heads), the
    others run ``math.sdpa(q, k, v, mask, scaling)`` unchanged. q ``[B, H, L, D]``, k/v
    ``[B, KV, S, D]`` (GQA not repeated). Gradients reach q, k, v and ``bias``.
    """

    def biased(q, k, v):
        # CUDA's kernels want the bias in q's dtype (memory-efficient rejects fp32, cuDNN
        # misreads it), so in bf16 log α is rounded to 8 bits: ~2⁻⁹·|log α| on the scores.
        k, v, grouped = gqa_for_kernel(q, k, v, bias)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias.to(q.dtype), scale=scaling, enable_gqa=grouped
        )

    return by_heads(q, k, v, mask, scaling, heads, biased)


def relevance_last_row(
    q: torch.Tensor,
    k: torch.Tensor,
    mask: torch.Tensor | None,
    scaling: float | None,
    heads: Sequence[int],
    bias: torch.Tensor,
) -> torch.Tensor:
    """Attention probabilities of the last query position ``[B, H, S]`` as ``relevance_attention``
    weighs the keys (the fused heads with ``bias``), for ``recording_last_row``, in fp32 at least
    (``math.probe_dtype``). One row, never the matrix; masked scores are clamped to finfo.min, as
    in ``math.attention_probs``, so even a fully masked row stays finite."""
    n_heads, n_keys = q.shape[1], k.shape[2]
    scores = last_row_scores(q, k, None, scaling)  # unmasked: the masks are added below
    row_mask = None if mask is None else mask[:, :, -1:, :]
    plain = scores + additive_mask(row_mask, 1, n_keys, scores.dtype, scores.device)[:, :, 0]
    fused = _heads(heads, n_heads)
    if fused:
        is_fused = torch.zeros(n_heads, dtype=torch.bool, device=q.device)
        is_fused[fused] = True
        biased = (scores + bias[:, :, -1].to(scores.dtype)).clamp(min=torch.finfo(scores.dtype).min)
        plain = torch.where(is_fused[None, :, None], biased, plain)
    return plain.softmax(dim=-1)
