"""LKG-RALM's log α gradient from the guided rows, outside FlexAttention
(``flex.LOG_ALPHA_GRADIENT_APART``).

FlexAttention gives a captured tensor that requires grad its gradient by atomic adds, one per
score of every tile it computes (``flex``'s module docstring). With this switch the ``score_mod``
reads log α detached: flex's forward is the same (every guided row's scores carry log α), its
backward gives q, k and v their whole gradients (for them log α is a constant of the scores), and
it makes no atomic adds. log α's gradient is computed here from the guided (QUESTION/TAIL) rows
alone, which are few: for the bias b_j that log α puts on column j of a guided row i,

    ∂L/∂b_j = Σ_i P_ij (dO_i·v_j − Δ_i),   Δ_i = dO_i·O_i,

the scores' gradient of FlashAttention's backward, summed over the guided rows. P is computed
again from q's guided rows, k, the bias and flex's log-sum-exps, in fp32 a chunk of rows at a
time (``rows_apart.row_probabilities``); O is flex's output. Unlike the rows apart
(``ROWS_APART``), nothing runs again in forward and every output is flex's; the backward adds,
per fused head, two products of the guided rows, with the keys (the scores) and the values
(dO·Vᵀ). No captured tensor requires grad, so a recomputation under activation checkpointing,
where eager flex's captured gradient goes wrong, has none to get wrong.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from zoomattn.methods.lkg.kernel import column_log_alpha
from zoomattn.methods.lkg.rows_apart import (
    allowed_rows,
    gather_rows,
    row_chunks,
    row_probabilities,
)


def with_log_alpha_gradient(
    out, lse, q, k, v, mask, scaling, rows, valid, key_segments, log_alpha
) -> torch.Tensor:
    """``out``, flex's output with log α detached in its ``score_mod`` (``lse``: its log-sum-exps
    ``[B, H, L]``), as it is, with log α's gradient from the guided rows ``rows`` ``[B, R]``
    attached (``valid`` ``[B, R]``: which of them are guided; ``rows_apart.guided_rows``). q, k
    and v get their gradients from flex alone."""
    scale = q.shape[-1] ** -0.5 if scaling is None else scaling
    bias = column_log_alpha(key_segments, log_alpha).to(torch.promote_types(q.dtype, torch.float32))
    held = (t.detach() for t in (q, k, v, lse))
    return _LogAlphaGradient.apply(out, bias, *held, mask, rows, valid, scale)


def bias_gradient(d_out, out, bias, q, k, v, lse, mask, rows, valid, scale) -> torch.Tensor:
    """∂L/∂b ``[B, S]`` over the guided rows (module docstring), in the bias's dtype (fp32 at
    least). A row of ``rows`` that ``valid`` marks as not guided (a shorter batch row's rows
    filled in) contributes nothing: it sees no key here, since flex's log-sum-exp of such a row
    (a passage row, without the bias and other passages' keys) would not normalise its scores
    as recomputed, which could overflow to inf, and its output gradient is not read."""
    (b, h, n_q, d), (n_kv, s) = q.shape, k.shape[1:3]
    wide = bias.dtype
    g = torch.where(valid[:, None, :, None], gather_rows(d_out, rows).to(wide), 0.0)
    delta = (g * gather_rows(out, rows).to(wide)).sum(-1)  # FlashAttention's Δ: rowsum(dO ∘ O)
    q_rows, lse_rows = gather_rows(q, rows), gather_rows(lse, rows)
    k_f, v_f = k.to(wide), v.to(wide)
    d_bias = torch.zeros_like(bias)
    for part in row_chunks(b, h, rows.shape[1], s, bias.element_size()):
        allowed = allowed_rows(mask, rows[:, part], n_q, s) & valid[:, None, part, None]
        q_part = q_rows[:, :, part].to(wide)
        probs, _ = row_probabilities(q_part, k_f, bias, allowed, scale, lse_rows[:, :, part])
        g_part = g[:, :, part].reshape(b, n_kv, -1, d)
        d_scores = (g_part @ v_f.transpose(-1, -2)).view(b, h, -1, s)
        d_bias += d_scores.sub_(delta[:, :, part, None]).mul_(probs).sum((1, 2))
        del probs, d_scores  # before the next chunk's
    return d_bias


class _LogAlphaGradient(torch.autograd.Function):
    """The identity on flex's output, whose backward gives the per-column bias its gradient
    (``bias_gradient``) and hands the output's gradient on to flex unchanged. Applied only where
    log α trains (``flex``), so the bias always needs its gradient."""

    @staticmethod
    def forward(ctx, out, bias, q, k, v, lse, mask, rows, valid, scale):
        ctx.save_for_backward(out, bias, q, k, v, lse, mask, rows, valid)
        ctx.scale = scale
        return out.view_as(out)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out):
        return d_out, bias_gradient(d_out, *ctx.saved_tensors, ctx.scale), *[None] * 8
