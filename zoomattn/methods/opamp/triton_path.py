"""OpAmp's ``triton`` path (opt-in; slower than the stacked path on an H200, docs/kernels.md): the
stacked path's batched adapters, both branches' attention in the Triton kernel
(``triton_kernel.py``), and the adapters recomputed in backward instead of kept.

Autograd keeps, from forward to backward, only q, k, v (the layer's own inputs, which plain SDPA
keeps too), the adapters' weights, the kernel's O₀ and O₁ and its per-row log-sum-exps: about
2·|q| beyond q, k and v, where the stacked path keeps [Q₀ | Q₁], [K₀ | K₁], [V | V], the
adapters' inputs and activations, its output and SDPA's state (13.4·|q| in
``benchmarks/opamp_kept_memory.py``; both counted by ``tests/methods/opamp/test_triton_path.py``).
Backward runs the adapters again under autograd with the forward's random state (the same dropout
masks), the kernel's backward on their outputs, then autograd through the adapters: one more
forward of the adapters (matrix products of the model's width by the adapter's), no more
attention; first derivatives only. The gradients meet with the stacked path's precision
(``fused._Fork``, ``fused._BranchScale``).
"""

from __future__ import annotations

import torch

from zoomattn.methods.opamp.fused import (
    adapted_stacks,
    adapter_gradients,
    first_derivatives_only,
    replayed_stacks,
    trainable,
)
from zoomattn.methods.opamp.rng import rng_states
from zoomattn.methods.opamp.triton_kernel import flash_backward, flash_forward, prepared


def triton_two_branch(q, k, v, adapters, gains, mask=None, scaling=None, block=1024):
    """c·(O₀ + O₁) + d·(O₀ − O₁) as ``kernel.two_branch_attention``; ``adapters`` as
    ``fused.stacked_two_branch``."""
    spec = (adapters, tuple(gains), mask, scaling, block)
    return _AdaptedFlash.apply(q, k, v, spec, *trainable(adapters))


class _AdaptedFlash(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, spec, *params):
        adapters, gains, mask, scaling, block = spec
        ctx.rng = rng_states(q.device)
        with torch.no_grad():
            q_stack, k_stack = adapted_stacks(q, k, adapters, gains, block)
        q_stack, k_stack, v, mask, kernel_spec = prepared(q_stack, k_stack, v, gains, mask, scaling)
        # the mask as the kernels read it: its bytes, or its rows' key spans (PADDING_SPANS)
        out, (o_branch, lse, kernel_mask, ranges) = flash_forward(
            q_stack, k_stack, v, mask, kernel_spec
        )
        ctx.save_for_backward(q, k, v, o_branch, lse, kernel_mask, *params)
        ctx.spec, ctx.kernel_spec, ctx.ranges = spec, kernel_spec, ranges
        return out

    @staticmethod
    def backward(ctx, grad):
        first_derivatives_only("OpAmp's triton path")
        q, k, v, o_branch, lse, kernel_mask, *params = ctx.saved_tensors
        adapters, gains, _, _, block = ctx.spec
        leaves, stacks = replayed_stacks(ctx.rng, q, k, adapters, gains, block)
        detached = [t.detach().contiguous() for t in stacks]
        state = (o_branch, lse, kernel_mask, ctx.ranges)
        dq_stack, dk_stack, dv = flash_backward(grad, *detached, v, state, ctx.kernel_spec)
        dq, dk, *dparams = adapter_gradients(leaves, stacks, (dq_stack, dk_stack), params)
        return dq, dk, dv if ctx.needs_input_grad[2] else None, None, *dparams
