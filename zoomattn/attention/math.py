"""Attention math shared by every method: fused SDPA, the materialised reference, last-row probes.

Shapes follow transformers' attention interface: q ``[B, H, L, D]``, k/v ``[B, H_kv, S, D]``
(post-RoPE, KV heads not yet repeated for GQA), mask ``None`` or boolean ``[B, 1, L, S]`` with
True where attention is allowed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def repeat_kv(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Expand KV heads to the query heads of their group (GQA)."""
    n_rep = n_heads // x.shape[1]
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


def _causal_flag(mask: torch.Tensor | None, q_len: int, k_len: int) -> bool:
    """With no mask, prefill is causal; a single decoding step sees every cached key."""
    if mask is not None or q_len == 1:
        return False
    if q_len != k_len:
        raise ValueError(f"unmasked attention with {q_len} queries over {k_len} keys is ambiguous")
    return True


def sdpa(q, k, v, mask=None, scaling=None) -> torch.Tensor:
    """Fused attention (no N×N matrix is kept): softmax(q kᵀ·scale + mask) v, GQA-aware."""
    return F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=mask,
        is_causal=_causal_flag(mask, q.shape[2], k.shape[2]),
        scale=scaling,
        enable_gqa=k.shape[1] != q.shape[1],
    )


def additive_mask(mask, q_len: int, k_len: int, dtype, device) -> torch.Tensor:
    """Boolean/absent mask as an additive one; finfo.min (not -inf) keeps padded rows finite."""
    if mask is None:
        allowed = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
        if q_len > 1:
            allowed = allowed.tril()
        mask = allowed[None, None]
    neg = torch.finfo(dtype).min
    return torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill(~mask, neg)


def attention_probs(q, k, mask=None, scaling=None) -> torch.Tensor:
    """Materialised softmax(q kᵀ·scale + mask): ``[B, H, L, S]``. Reference and probes only."""
    scaling = q.shape[-1] ** -0.5 if scaling is None else scaling
    k = repeat_kv(k, q.shape[1])
    scores = q @ k.transpose(-1, -2) * scaling
    scores = scores + additive_mask(mask, q.shape[2], k.shape[2], scores.dtype, scores.device)
    return scores.softmax(dim=-1)


def last_row_probs(q, k, mask=None, scaling=None) -> torch.Tensor:
    """Attention of the last query position only: ``[B, H, S]`` (one row, never the matrix)."""
    row_mask = None if mask is None else mask[:, :, -1:, :]
    return attention_probs(q[:, :, -1:], k, row_mask, scaling)[:, :, 0]


def _flash_cpu_forward(q, k, v, mask, causal, scale):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, causal, attn_mask=mask, scale=scale
    )


def _flash_cpu_backward(grad, q, k, v, out, lse, mask, causal, scale):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad, q, k, v, out, lse, 0.0, causal, attn_mask=mask, scale=scale
    )


class _TwoBranchAttention(torch.autograd.Function):
    """Σᵢ wᵢ·softmax(QᵢKᵢᵀ·scale + mask)V with (Qᵢ, Kᵢ) = project(i, q, k), memory-lean.

    Autograd through two SDPA calls keeps both branches' Qᵢ, Kᵢ, projection activations and
    outputs until backward. Here backward keeps only q, k, v and each branch's output and
    log-sum-exp (what the flash backward kernel needs) and, one branch at a time, recomputes the
    projection (with the forward's RNG state, so dropout masks match): once without autograd for
    the kernel, once with it, after the kernel, for the projection's own backward.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, weights, project, *params):
        causal = _causal_flag(mask, q.shape[2], k.shape[2])
        ctx.rng_states, ctx.branch_outputs, out = [], [], None
        for i, w in enumerate(weights):
            ctx.rng_states.append(torch.get_rng_state())
            qi, ki = project(i, q, k)
            o, lse = _flash_cpu_forward(qi, ki, v, mask, causal, scale)
            out = o * w if out is None else out.add_(o, alpha=w)
            ctx.branch_outputs.append((o, lse))
        ctx.save_for_backward(q, k, v, *params)
        ctx.args = (mask, scale, weights, project, causal)
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, *params = ctx.saved_tensors
        mask, scale, weights, project, causal = ctx.args
        total = [None] * (3 + len(params))
        for i in reversed(range(len(weights))):
            o, lse = ctx.branch_outputs[i]
            ctx.branch_outputs[i] = None
            with torch.no_grad():  # the kernel needs Qᵢ, Kᵢ but not the projection's activations
                qi, ki = _replay(ctx.rng_states[i], project, i, q, k)
            gq, gk, gv = _flash_cpu_backward(grad, qi, ki, v, o, lse, mask, causal, scale)
            del o, lse, qi, ki
            for g in (gq, gk, gv):  # the kernel is linear in grad: scale after, not a copy before
                g.mul_(weights[i])
            with torch.enable_grad():
                qd, kd = q.detach().requires_grad_(), k.detach().requires_grad_()
                qi, ki = _replay(ctx.rng_states[i], project, i, qd, kd)
                dq, dk, *dparams = torch.autograd.grad(
                    (qi, ki), (qd, kd, *params), (gq, gk), allow_unused=True
                )
            del qi, ki, gq, gk
            for j, g in enumerate((dq, dk, gv, *dparams)):
                if g is not None:
                    total[j] = g if total[j] is None else total[j].add_(g)
        return (*total[:3], None, None, None, None, *total[3:])


def _replay(rng_state, project, i, q, k):
    """project(i, q, k) with the RNG as the forward had it (same dropout masks), RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.set_rng_state(rng_state)
        return project(i, q, k)


def two_branch_attention(q, k, v, project, weights, params, mask=None, scaling=None, lean=None):
    """Σᵢ wᵢ·softmax(QᵢKᵢᵀ·scale + mask)V, (Qᵢ, Kᵢ) = project(i, q, k): fused, no N×N matrix.

    ``params`` are the projection's trainable tensors. By default (``lean=None``) training on CPU
    runs the memory-lean autograd function above; inference, and devices without a wired
    log-sum-exp kernel (CUDA: not yet), run one SDPA call per branch under plain autograd.
    """
    if lean is None:
        training = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, *params))
        lean = training and q.device.type == "cpu" and q.shape[2] > 1
    if lean:
        float_mask = None if mask is None else _float_mask(mask, q.dtype)
        return _TwoBranchAttention.apply(
            q, k, v, float_mask, scaling, tuple(weights), project, *params
        )
    out = None
    for i, w in enumerate(weights):
        qi, ki = project(i, q, k)
        o = sdpa(qi, ki, v, mask, scaling) * w
        out = o if out is None else out + o
    return out


def _float_mask(mask: torch.Tensor, dtype) -> torch.Tensor:
    """Boolean mask as the additive one SDPA builds from it (−inf where not allowed)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, -torch.inf)
