"""LKG-RALM's guided rows apart (``flex.ROWS_APART``, and every checkpointed fine-tune): the
QUESTION/TAIL query rows' attention computed outside FlexAttention, exactly, with log α an
ordinary input whose gradient is a sum (why: ``flex``'s module docstring).

``guided_rows_attention`` computes softmax(q·kᵀ·s + log α of each passage column + the call's
mask)·v for R query rows of each batch row, in fp32 at least, ``CHUNK_BYTES`` of scores at a
time, and keeps for backward what FlashAttention keeps: the rows' output (fp32) and their
log-sum-exps, beside q's rows and the tensors the layer holds anyway (k, v, the mask). Backward
computes each chunk's probabilities again from them. Through autograd, the materialised softmax
kept ``[B, H, R, S]`` fp32 probabilities per layer, and fp32 copies of K and V for bf16 inputs
(~100 MiB + 32 MiB with every head fused at R = 200, S = 4096); this keeps ``[B, H, R, D + 1]``
fp32 (``benchmarks/lkg_rows_apart.py``).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from zoomattn.methods.lkg.kernel import QUESTION, column_log_alpha

# one chunk's scores [B, H, rows, S] in the computation's dtype (computed in place): forward and
# backward each hold about two such at once (logsumexp's exponentials; the scores' gradient)
CHUNK_BYTES = 64 * 2**20


def guided_rows(query_segments: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """The QUESTION/TAIL query rows of each batch row: their positions first, ascending (``[B, R]``,
    R the most any batch row has, distinct within a row), which of the R are guided (``[B, R]``:
    a row with fewer is filled with other positions), and whether every query row is guided."""
    guided = query_segments <= QUESTION
    count = guided.sum(-1)
    most, least = torch.stack([count.max(), count.min()]).tolist() if count.numel() else (0, 0)
    order = torch.argsort(guided.to(torch.int8), dim=-1, descending=True, stable=True)[:, :most]
    valid = torch.arange(most, device=count.device)[None] < count[:, None]
    return order, valid, least == query_segments.shape[-1]


def gather_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The rows ``rows`` ``[B, R]`` of ``x`` ``[B, H, L, ...]`` (its dim 2): ``[B, H, R, ...]``."""
    index = rows.view(rows.shape[0], 1, rows.shape[1], *[1] * (x.dim() - 3))
    return x.gather(2, index.expand(*x.shape[:2], rows.shape[1], *x.shape[3:]))


def allowed_rows(mask, rows: torch.Tensor, n_q: int, n_k: int) -> torch.Tensor:
    """``kernel.call_mask``'s rows ``rows`` ``[B, R]``: ``[B, 1, R, S]`` bool."""
    if mask is None:  # causal, queries aligned to the last keys
        last_key = rows + (n_k - n_q)
        return torch.arange(n_k, device=rows.device) <= last_key[:, None, :, None]
    return gather_rows(mask.expand(rows.shape[0], 1, n_q, n_k), rows)


def put_rows(out: torch.Tensor, rows_out: torch.Tensor, rows, valid) -> torch.Tensor:
    """``out`` with its rows ``rows`` replaced by ``rows_out`` where ``valid`` (elsewhere kept):
    a scatter of distinct positions, so each output row has one source and one gradient."""
    index = rows[:, None, :, None].expand(-1, out.shape[1], -1, out.shape[3])
    kept = torch.where(valid[:, None, :, None], rows_out, out.gather(2, index))
    return out.scatter(2, index, kept)


def guided_rows_attention(q, k, v, mask, scaling, rows, key_segments, log_alpha) -> torch.Tensor:
    """softmax(q·kᵀ·s + log α of each passage column + the call's mask)·v of the query rows ``rows``
    ``[B, R]`` (QUESTION/TAIL rows: no cross-passage zeros): ``[B, H, R, D]`` in q's dtype,
    computed in fp32 at least. GQA through a view of q (K and V are not repeated). A row the mask
    leaves no key gives 0, as FlexAttention does. Gradients reach q, k, v and log α."""
    n_q, d = q.shape[2:]
    scale = d**-0.5 if scaling is None else scaling
    q_rows = gather_rows(q, rows)
    bias = column_log_alpha(key_segments, log_alpha).to(torch.promote_types(q.dtype, torch.float32))
    return _GuidedRows.apply(q_rows, k, v, bias, mask, rows, n_q, scale).to(q.dtype)


def row_chunks(b: int, h: int, r: int, s: int, itemsize: int = 4):
    """Slices of the R rows whose scores ``[B, H, rows, S]`` take ``CHUNK_BYTES`` at most (one
    row at least)."""
    step = max(1, CHUNK_BYTES // (itemsize * b * h * s))
    return [slice(start, start + step) for start in range(0, r, step)]


def row_probabilities(q_rows, k, bias, allowed, scale, lse=None):
    """One chunk's probabilities ``[B, H, rows, S]`` in k's dtype, and the rows' log-sum-exps
    (those given, else computed). A row with no allowed key has every probability 0."""
    (b, h, rc, d), n_kv = q_rows.shape, k.shape[1]
    scores = (q_rows.to(k.dtype).reshape(b, n_kv, -1, d) @ k.transpose(-1, -2)).view(b, h, rc, -1)
    scores.mul_(scale).add_(bias[:, None, None]).masked_fill_(~allowed, float("-inf"))
    if lse is None:
        lse = torch.logsumexp(scores, dim=-1)
    finite = torch.where(lse.isfinite(), lse, 0.0)  # no key: exp(−inf) = 0 everywhere
    return scores.sub_(finite[..., None]).exp_(), lse


class _GuidedRows(torch.autograd.Function):
    """``guided_rows_attention`` with its gathered q rows ``[B, H, R, D]``, k and v
    ``[B, H_kv, S, D]``, the per-column bias ``[B, S]`` (its dtype is the computation's), the
    call's mask, the rows ``[B, R]`` and the query count; FlashAttention's backward chunk by
    chunk (module docstring)."""

    @staticmethod
    def forward(ctx, q_rows, k, v, bias, mask, rows, n_q, scale):
        (b, h, r, d), (n_kv, s) = q_rows.shape, k.shape[1:3]
        k_f, v_f = k.to(bias.dtype), v.to(bias.dtype)
        out = torch.empty(b, h, r, d, dtype=bias.dtype, device=q_rows.device)
        lse = torch.empty(b, h, r, dtype=bias.dtype, device=q_rows.device)
        for part in row_chunks(b, h, r, s, bias.element_size()):
            allowed = allowed_rows(mask, rows[:, part], n_q, s)
            probs, lse_part = row_probabilities(q_rows[:, :, part], k_f, bias, allowed, scale)
            out[:, :, part] = (probs.view(b, n_kv, -1, s) @ v_f).view(b, h, -1, d)
            lse[:, :, part] = lse_part
            del probs  # before the next chunk's scores
        ctx.save_for_backward(q_rows, k, v, bias, mask, rows, out, lse)
        ctx.n_q, ctx.scale = n_q, scale
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out):
        q_rows, k, v, bias, mask, rows, out, lse = ctx.saved_tensors
        (b, h, r, d), (n_kv, s), scale = q_rows.shape, k.shape[1:3], ctx.scale
        k_f, v_f, d_out = k.to(bias.dtype), v.to(bias.dtype), d_out.to(bias.dtype)
        delta = (d_out * out).sum(-1)  # FlashAttention's Δ: rowsum(dO ∘ O)
        d_q = torch.empty(b, h, r, d, dtype=bias.dtype, device=q_rows.device)
        d_k, d_v, d_bias = torch.zeros_like(k_f), torch.zeros_like(v_f), torch.zeros_like(bias)
        bias_needs_grad = ctx.needs_input_grad[3]  # log α: the estimator's, when it trains
        for part in row_chunks(b, h, r, s, bias.element_size()):
            allowed = allowed_rows(mask, rows[:, part], ctx.n_q, s)
            q_part = q_rows[:, :, part].to(bias.dtype)  # once: scores and dK both read it
            g_part, lse_part = d_out[:, :, part], lse[:, :, part]
            probs, _ = row_probabilities(q_part, k_f, bias, allowed, scale, lse_part)
            probs, g_part = probs.view(b, n_kv, -1, s), g_part.reshape(b, n_kv, -1, d)
            q_part = q_part.reshape(b, n_kv, -1, d)
            d_v += probs.transpose(-1, -2) @ g_part
            d_scores = (g_part @ v_f.transpose(-1, -2)).view(b, h, -1, s)
            d_scores.sub_(delta[:, :, part, None]).mul_(probs.view_as(d_scores))
            del probs
            if bias_needs_grad:
                d_bias += d_scores.sum((1, 2))
            d_scores = d_scores.view(b, n_kv, -1, s)
            d_q[:, :, part] = (d_scores @ k_f).view(b, h, -1, d) * scale
            d_k += d_scores.transpose(-1, -2) @ q_part * scale
            del d_scores
        grads = (d_q.to(q_rows.dtype), d_k.to(k.dtype), d_v.to(v.dtype))
        return (*grads, d_bias if bias_needs_grad else None, None, None, None, None)
