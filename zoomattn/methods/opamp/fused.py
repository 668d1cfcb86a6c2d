"""OpAmp's fused path (``stacked``): both branches in ONE SDPA call, the adapters batched.

The two adapted query sets are stacked as extra heads, ``[Q₀ | Q₁]`` with 2H heads, against
``[K₀ | K₁]`` with 2·H_kv KV heads and ``[V | V]``: under GQA query head j reads KV head j // G
(G = H / H_kv), so head h of branch 1, j = H + h, reads H_kv + h // G, its own branch's KV head
h // G (a mask ``[B, 1, L, S]`` broadcasts over the heads unchanged). The output's halves are O₀
and O₁, combined as ``combine_modes`` does. The idea is Differential Transformer V2's (two
attention maps in one flash call, the query sets stacked as heads); this is our own code.

Adapters: E(x) = x + GELU(dropout(x) W₁) W₂ of both branches as one batched matmul per layer of the
adapter (``torch.bmm`` over the two branches' stacked inputs and weights): q₁/q₂ one matmul down and
one up, k₁/k₂ likewise. The weights are stacked on the fly (a copy of a few MB), so the modules and
the saved state dict are unchanged. Dropout (training only) is drawn per branch and per block of
``block`` query positions exactly as ``kernel._adapted_queries`` and the adapters draw it (same
shapes, same order: Q₀'s blocks, K₀, Q₁'s blocks, K₁), so the masks are the other paths'.

Gradients go through autograd (SDPA's backward handles both branches in one launch), with the
precision of the ``recompute`` path (``kernel``'s "Precision" paragraph): ``_Join`` hands the
unscaled upstream gradient g to both halves, each branch's parameters get their branch's weight
c ± d applied to their gradient (``_BranchScale``), and q, k and v, which feed both branches, get
w₀·g₀ + w₁·g₁ summed in fp32 (``_Fork``) and rounded once, so in bf16 they round back exactly to g's
gradient where both branches give it (OpAmp's initialisation). Memory: autograd keeps the stacked
Qᵢ, Kᵢ, [V | V], the adapters' inputs, dropout masks and activations, the stacked output and its
log-sum-exp, about what the ``plain`` path keeps. With ``RECOMPUTE_ADAPTERS`` the adapters run
without autograd in forward and again under it in backward, with the forward's random state (the
same dropout masks), once SDPA's backward has given the stacks' gradients (``_ReplayedStacks``): it
keeps q and k instead of the adapters' inputs and activations, at the cost of one more forward of
the adapters, and the adapters' backward no longer holds its memory beside SDPA's.

The ``triton`` path (opt-in, slower on an H200: ``triton_path.py``) runs these batched adapters
(``adapted_stacks``) before its Triton kernel, and again in backward instead of keeping them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from zoomattn.attention.math import sdpa
from zoomattn.methods.opamp.modes import combine_modes
from zoomattn.methods.opamp.rng import rng_restored, rng_states

# The adapters recomputed in backward rather than their activations kept (_ReplayedStacks). Off:
# on an H200 (benchmarks/opamp_stacked.py, 2026-11-27) it took 24 % / 6 % more time at 4096 / 8192
# tokens for 22 % / 21 % less peak memory, a trade a user can make.
RECOMPUTE_ADAPTERS = False


def stacked_two_branch(q, k, v, adapters, gains, mask=None, scaling=None, block=1024):
    """c·(O₀ + O₁) + d·(O₀ − O₁) as ``kernel.two_branch_attention``, in one SDPA call.
    ``adapters``: ((E_q⁺, E_q⁻), (E_k⁺, E_k⁻)), the layer's ``BottleneckAdapter`` modules."""
    common, differential = gains
    weights = (common + differential, common - differential)
    if RECOMPUTE_ADAPTERS and torch.is_grad_enabled():
        spec = (adapters, tuple(gains), block)
        q_stack, k_stack = _ReplayedStacks.apply(q, k, spec, *trainable(adapters))
    else:
        q_stack, k_stack = adapted_stacks(q, k, adapters, gains, block)
    v_stack = torch.cat(_Fork.apply(v, *weights), dim=1)
    out = sdpa(q_stack, k_stack, v_stack, mask, scaling)
    return _Join.apply(out, common, differential)


def adapted_stacks(q, k, adapters, gains, block=1024):
    """[Q₀ | Q₁] ``[B, 2H, L, D]`` and [K₀ | K₁] ``[B, 2H_kv, S, D]``: both branches' adapters
    batched, dropout drawn as the other paths draw it, the branch weights applied to the
    gradients where the branches meet (``_Fork``, ``_BranchScale``)."""
    (q_adapters, k_adapters), (common, differential) = adapters, gains
    weights = (common + differential, common - differential)
    q_pair = _Fork.apply(q, *weights)
    k_pair = _Fork.apply(k, *weights)
    dropped = _dropped_inputs(q_pair, k_pair, q_adapters, k_adapters, block)
    q_stack = _adapted_pair(q_pair, q_adapters, dropped[0], weights)
    return q_stack, _adapted_pair(k_pair, k_adapters, dropped[1], weights)


def trainable(adapters) -> list[torch.Tensor]:
    """The adapters' trainable tensors, each once (a weight two adapters share is one), in one
    order for a function's inputs and its backward."""
    params = [p for pair in adapters for a in pair for p in a.parameters() if p.requires_grad]
    return list({id(p): p for p in params}.values())


def replayed_stacks(rng, q, k, adapters, gains, block):
    """``adapted_stacks`` again under autograd with the forward's random state ``rng`` (the same
    dropout masks), on fresh leaves of q and k: (leaves, (q_stack, k_stack))."""
    with torch.enable_grad(), rng_restored(rng, q.device):
        leaves = [x.detach().requires_grad_(x.requires_grad) for x in (q, k)]
        return leaves, adapted_stacks(*leaves, adapters, gains, block)


def adapter_gradients(leaves, stacks, stack_grads, params) -> list:
    """The gradients of q, k and ``params`` (the forward's ``trainable``; None where not
    required) from those of the replayed stacks. A stack that nothing trainable feeds (its
    adapters frozen, its input without gradient) has no graph and contributes nothing."""
    inputs = [*leaves, *params]
    wanted = [t for t in inputs if t.requires_grad]
    pairs = [(s, g) for s, g in zip(stacks, stack_grads, strict=True) if s.requires_grad]
    if not wanted or not pairs:
        return [None] * len(inputs)
    outputs, grads = zip(*pairs, strict=True)
    found = iter(torch.autograd.grad(outputs, wanted, grads, allow_unused=True))
    return [next(found) if t.requires_grad else None for t in inputs]


def first_derivatives_only(name: str) -> None:
    """Refuse a backward asked for a graph (``create_graph=True``): a path whose backward runs
    without one would return gradients that higher derivatives silently miss."""
    if torch.is_grad_enabled():
        raise RuntimeError(
            f"{name} gives first derivatives only (its backward recomputes without a graph): "
            "no create_graph=True through it"
        )


class _ReplayedStacks(torch.autograd.Function):
    """[Q₀ | Q₁] and [K₀ | K₁] computed without autograd; backward replays the adapters, for
    first derivatives only. The adapters' weights are saved with q and k, so an in-place update
    before backward is an error, not a replay with other weights."""

    @staticmethod
    def forward(ctx, q, k, spec, *params):
        adapters, gains, block = spec
        ctx.rng, ctx.spec = rng_states(q.device), spec
        ctx.save_for_backward(q, k, *params)
        with torch.no_grad():
            return adapted_stacks(q, k, adapters, gains, block)

    @staticmethod
    def backward(ctx, dq_stack, dk_stack):
        first_derivatives_only("OpAmp's stacked path with RECOMPUTE_ADAPTERS")
        adapters, gains, block = ctx.spec
        q, k, *params = ctx.saved_tensors
        leaves, stacks = replayed_stacks(ctx.rng, q, k, adapters, gains, block)
        dq, dk, *dparams = adapter_gradients(leaves, stacks, (dq_stack, dk_stack), params)
        return dq, dk, None, *dparams


def _flat(x, dtype):
    """[B, H, L, D] -> [B, L, H·D] in ``dtype``, as ``model._adapt`` flattens it (same strides)."""
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d).to(dtype)


def _dropped_inputs(q_pair, k_pair, q_adapters, k_adapters, block):
    """Each branch's dropout(flat input) for its adapters, drawn as the other paths draw it; None
    where no adapter drops anything (eval mode, or p = 0)."""
    adapters = (*q_adapters, *k_adapters)
    if not any(a.dropout.training and a.dropout.p > 0 for a in adapters):
        return None, None
    q_parts, k_parts = [], []
    for i in (0, 1):
        qa, ka = q_adapters[i], k_adapters[i]
        q_i, n = q_pair[i], q_pair[i].shape[2]
        blocks = [(s, min(s + block, n)) for s in range(0, n, block)]
        dtype = qa.down.weight.dtype
        q_parts.append(torch.cat([qa.dropout(_flat(q_i[:, :, s:e], dtype)) for s, e in blocks], 1))
        k_parts.append(ka.dropout(_flat(k_pair[i], ka.down.weight.dtype)))
    return q_parts, k_parts


def _adapted_pair(pair, adapters, dropped, weights):
    """[E⁺(x₀) heads | E⁻(x₁) heads]: ``[B, 2·H, L, D]`` in the inputs' dtype; each matmul of the
    two adapters is one ``bmm`` over the stacked branches."""
    b, h, n, d = pair[0].shape
    dtype = adapters[0].down.weight.dtype
    x = torch.stack([_flat(x_i, dtype) for x_i in pair]).view(2, b * n, h * d)
    x_in = x if dropped is None else torch.stack(dropped).view(2, b * n, h * d)
    down = _BranchScale.apply(torch.stack([a.down.weight for a in adapters]), weights)
    up = _BranchScale.apply(torch.stack([a.up.weight for a in adapters]), weights)
    hidden = F.gelu(torch.bmm(x_in, down.transpose(1, 2)))
    y = (x + torch.bmm(hidden, up.transpose(1, 2))).to(pair[0].dtype)
    return y.view(2, b, n, h, d).permute(1, 0, 3, 2, 4).reshape(b, 2 * h, n, d)


def _weighted_sum(g0, g1, w0: float, w1: float, dtype) -> torch.Tensor:
    """w₀·g₀ + w₁·g₁ computed in fp32 at least, rounded once to ``dtype``."""
    wide = torch.promote_types(dtype, torch.float32)
    if g0 is None or g1 is None:
        g, w = (g1, w1) if g0 is None else (g0, w0)
        return None if g is None else (g.to(wide) * w).to(dtype)
    return (g0.to(wide) * w0).add_(g1.to(wide), alpha=w1).to(dtype)


class _Fork(torch.autograd.Function):
    """x for each branch; backward: the branches' gradients weighted (w₀, w₁), summed in fp32."""

    @staticmethod
    def forward(ctx, x, w0, w1):
        ctx.weights = (w0, w1)
        return x.view_as(x), x.view_as(x)

    @staticmethod
    def backward(ctx, g0, g1):
        dtype = (g0 if g0 is not None else g1).dtype
        return _weighted_sum(g0, g1, *ctx.weights, dtype), None, None


class _BranchScale(torch.autograd.Function):
    """Identity on weights stacked per branch; backward: branch i's gradient times wᵢ (fp32)."""

    @staticmethod
    def forward(ctx, stacked, weights):
        ctx.weights = weights
        return stacked.view_as(stacked)

    @staticmethod
    def backward(ctx, grad):
        w = torch.tensor(ctx.weights, dtype=torch.promote_types(grad.dtype, torch.float32))
        return (grad.to(w.dtype) * w.to(grad.device).view(2, 1, 1)).to(grad.dtype), None


class _Join(torch.autograd.Function):
    """[O₀ | O₁] -> combine_modes(O₀, O₁, c, d); backward: g, unscaled, to both halves (the
    weights c ± d are applied where the branches meet: ``_Fork``, ``_BranchScale``)."""

    @staticmethod
    def forward(ctx, stacked, common, differential):
        o0, o1 = stacked.chunk(2, dim=1)
        return combine_modes(o0, o1, common, differential)

    @staticmethod
    def backward(ctx, grad):
        return torch.cat([grad, grad], dim=1), None, None
