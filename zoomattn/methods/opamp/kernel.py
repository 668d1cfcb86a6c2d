"""OpAmp's attention kernel: two adapted attentions in one fused call, combined in common and
differential mode:

    c·(O₀ + O₁) + d·(O₀ − O₁),  Oᵢ = softmax(QᵢKᵢᵀ·scale + mask)V,  (c, d) = gains

Qᵢ = adapt_q(i, q) and Kᵢ = adapt_k(i, k) are learned per-branch transforms of the post-RoPE
queries and keys (OpAmp's adapters); V is shared. No N×N matrix is formed. Queries are adapted in
blocks of ``block`` positions in every path, so a dropout inside ``adapt_q`` draws the same masks
whichever path runs.

Five paths, chosen by ``path`` (default: ``stacked`` on CUDA when the job's ``attention_kernels`` is
``fused``, see ``zoomattn.attention.kernels``; else ``lean`` for training on the CPU, ``recompute``
for training elsewhere, ``plain`` without gradients). Stacked (the fused path): both branches in one
SDPA call, stacked as heads, the adapters batched, gradients through autograd at the recompute
path's precision (``fused.py``). Triton: the stacked path's batched adapters, and both branches'
attention as one Triton kernel that loads V once per tile for both and shares dP = g·Vᵀ in backward
(``triton_kernel.py``; CUDA, or Triton's interpreter). It is never chosen by default
(``attention_kernels: fused`` runs ``stacked``): on an H200 it was 1.4–5.5× slower. Plain: one SDPA
call per branch under autograd, which keeps both branches' Qᵢ, Kᵢ, adapter activations and outputs
until backward. Recompute (training on CUDA): an autograd function that keeps only q, k, v and, in
backward, runs each branch again under autograd (the device's fused SDPA, the forward's dropout
masks replayed) with the unscaled upstream gradient, adding the branches' gradients with weights
c ± d in fp32; it costs one more forward of both branches. Lean (training on the CPU): an autograd
function that keeps only q, k, v and each branch's output and log-sum-exp, and in backward runs the
flash kernel's backward tile by tile (query block × key block, causal tiles only). The kernel's
backward is exact on a tile given the rows' global output and log-sum-exp, so the tiles' gradients
sum to the whole. Per branch it holds Kᵢ and its gradient, per tile that tile's Qᵢ block and
gradients: beyond what plain SDPA's backward holds, ~2·|k| plus a tile's worth (an untiled backward
would also hold the other branch's finished gradients and all of Qᵢ: ~2·|q| + 3·|k|). Its gradient
totals are fp32 at least: in bf16, |q| + 2·|k| more.

Precision. With OpAmp's gains (c = 1/2, d = K) the per-branch form (c + d)·O₀ + (c − d)·O₁
rounds two terms ~K times the result, which then cancel: in bf16 ~10× plain SDPA's error even
where O₀ = O₁. The mode form is exact there, so at OpAmp's initialisation the output is bitwise
plain SDPA's. The lean backward takes each branch's gradients at the unscaled upstream gradient
and adds them with weights c ± d into the fp32 totals, which round back exactly to g where both
branches give g. The recompute path does the same with whole-branch gradients. The plain path's
gradients meet in autograd in the inputs' dtype and keep ~2K roundings there (used for inference
only, by default). Away from O₀ = O₁ the bf16 error is each kernel rounding its Oᵢ before d
amplifies O₀ − O₁, which no combination removes.
"""

from __future__ import annotations

import torch

from zoomattn.attention import kernels
from zoomattn.attention.math import additive_mask, causal_flag, sdpa
from zoomattn.methods.opamp.fused import stacked_two_branch
from zoomattn.methods.opamp.modes import combine_modes
from zoomattn.methods.opamp.rng import rng_restored, rng_states

QUERY_BLOCK = 1024
PATHS = ("plain", "lean", "recompute", "stacked")  # any device (lean: the CPU); the tests run all
OPT_IN_PATHS = ("triton",)  # CUDA or Triton's interpreter; named explicitly, never chosen


def two_branch_attention(
    q, k, v, adapt_q, adapt_k, gains, params, mask=None, scaling=None, path=None, block=None,
    adapters=None,
):  # fmt: skip
    """c·(O₀ + O₁) + d·(O₀ − O₁), Oᵢ = softmax(adapt_q(i, q)·adapt_k(i, k)ᵀ·scale + mask)V and
    (c, d) = ``gains``; shapes as ``math.sdpa``. ``params`` are the adapters' trainable tensors;
    ``adapters`` the modules behind ``adapt_q``/``adapt_k``, ((E_q⁺, E_q⁻), (E_k⁺, E_k⁻)), which
    the stacked and triton paths batch; ``path`` one of PATHS or OPT_IN_PATHS (None: see the
    module docstring)."""
    block = block or QUERY_BLOCK
    if path is None and kernels.choose("opamp", q.device) == kernels.FUSED:
        path = "stacked"
    if path is None:
        training = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, *params))
        on_cpu = q.device.type == "cpu"
        path = "plain" if not training else "lean" if on_cpu and q.shape[2] > 1 else "recompute"
    if path == "lean":
        if q.device.type != "cpu":
            raise ValueError(f"path 'lean' runs the CPU's flash kernels; q is on {q.device}")
        n_q, n_k = q.shape[2], k.shape[2]
        float_mask = (
            None if mask is None else additive_mask(mask, n_q, n_k, q.dtype, q.device, -torch.inf)
        )
        return _TwoBranchAttention.apply(
            q, k, v, float_mask, scaling, tuple(gains), adapt_q, adapt_k, block, *params
        )
    if path in ("stacked", "triton"):
        if adapters is None:
            raise ValueError(f"path {path!r} batches the adapters: pass their modules (adapters=)")
        if path == "triton":  # opt-in only: imports triton
            from zoomattn.methods.opamp.triton_path import triton_two_branch

            return triton_two_branch(q, k, v, adapters, gains, mask, scaling, block)
        return stacked_two_branch(q, k, v, adapters, gains, mask, scaling, block)
    if path == "recompute":
        return _RecomputedTwoBranch.apply(
            q, k, v, mask, scaling, tuple(gains), adapt_q, adapt_k, block, *params
        )
    if path != "plain":
        raise ValueError(f"path: one of {PATHS + OPT_IN_PATHS}, got {path!r}")
    outs = [_branch(adapt_q, adapt_k, i, q, k, v, mask, scaling, block) for i in (0, 1)]
    return combine_modes(*outs, *gains)


def _branch(adapt_q, adapt_k, i, q, k, v, mask, scaling, block):
    qi, _ = _adapted_queries(adapt_q, i, q, block)
    return sdpa(qi, adapt_k(i, k), v, mask, scaling)


class _TwoBranchAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, scale, gains, adapt_q, adapt_k, block, *params):
        causal = causal_flag(mask, q.shape[2], k.shape[2])
        ctx.rng_states, ctx.branch_outputs = [], []
        for i in (0, 1):
            qi, q_states = _adapted_queries(adapt_q, i, q, block)
            k_state = torch.get_rng_state()
            ki = adapt_k(i, k)
            o, lse = _flash_forward(qi, ki, v, mask, causal, scale)
            del qi, ki
            ctx.branch_outputs.append((o, lse))
            ctx.rng_states.append((q_states, k_state))
        ctx.save_for_backward(q, k, v, *params)
        ctx.args = (mask, scale, gains, adapt_q, adapt_k, block, causal)
        (o0, _), (o1, _) = ctx.branch_outputs
        return combine_modes(o0, o1, *gains)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, *params = ctx.saved_tensors
        mask, scale, (common, differential), adapt_q, adapt_k, block, causal = ctx.args
        weights = (common + differential, common - differential)
        dq = dk = dv = None
        dparams = [None] * len(params)
        for i in (1, 0):
            w, (o, lse) = weights[i], ctx.branch_outputs[i]
            ctx.branch_outputs[i] = None
            q_states, k_state = ctx.rng_states[i]
            with torch.no_grad():
                ki = _replay(k_state, adapt_k, i, k)
            dki = None
            for (s, e), q_state in zip(_blocks(q.shape[2], block), q_states, strict=True):
                rows = slice(s, e)
                with torch.no_grad():
                    qi = _replay(q_state, adapt_q, i, q[:, :, rows])
                dqi = None
                for cols, tile_causal, tile_mask in _key_tiles(
                    mask, causal, s, e, k.shape[2], block
                ):
                    gq, gk, gv = _flash_backward(
                        grad[:, :, rows], qi, ki[:, :, cols], v[:, :, cols], o[:, :, rows],
                        lse[:, :, rows], tile_mask, tile_causal, scale,
                    )  # fmt: skip
                    dqi = _add(dqi, gq, qi, slice(None))
                    dki = _add(dki, gk, ki, cols)
                    dv = _add(dv, gv, v, cols, w)
                del qi
                if dqi is not None:
                    gq, gp = _adapter_grads(q_state, adapt_q, i, q[:, :, rows], dqi, params)
                    dq = _add(dq, gq, q, rows, w)
                    dparams = [_add(a, g, alpha=w) for a, g in zip(dparams, gp, strict=True)]
            del ki
            if dki is not None:
                gk, gp = _adapter_grads(k_state, adapt_k, i, k, dki, params)
                dk = _add(dk, gk, k, slice(None), w)
                dparams = [_add(a, g, alpha=w) for a, g in zip(dparams, gp, strict=True)]
        dq, dk, dv, *dparams = (
            None if g is None else g.to(x.dtype)
            for g, x in zip((dq, dk, dv, *dparams), (q, k, v, *params), strict=True)
        )
        return dq, dk, dv, None, None, None, None, None, None, *dparams


class _RecomputedTwoBranch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, mask, scale, gains, adapt_q, adapt_k, block, *params):
        ctx.rng_states, outs = [], []
        for i in (0, 1):
            ctx.rng_states.append(rng_states(q.device))
            outs.append(_branch(adapt_q, adapt_k, i, q, k, v, mask, scale, block))
        ctx.save_for_backward(q, k, v, *params)
        ctx.args = (mask, scale, gains, adapt_q, adapt_k, block)
        return combine_modes(*outs, *gains)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, *params = ctx.saved_tensors
        mask, scale, (common, differential), adapt_q, adapt_k, block = ctx.args
        weights = (common + differential, common - differential)
        totals = [None] * (3 + len(params))
        for i in (0, 1):
            with torch.enable_grad(), rng_restored(ctx.rng_states[i], q.device):
                leaves = [x.detach().requires_grad_() for x in (q, k, v)]
                out = _branch(adapt_q, adapt_k, i, *leaves, mask, scale, block)
                grads = torch.autograd.grad(out, (*leaves, *params), grad, allow_unused=True)
            totals = [_add(t, g, alpha=weights[i]) for t, g in zip(totals, grads, strict=True)]
        dq, dk, dv, *dparams = (
            None if g is None else g.to(x.dtype)
            for g, x in zip(totals, (q, k, v, *params), strict=True)
        )
        return dq, dk, dv, None, None, None, None, None, None, *dparams


def _flash_forward(q, k, v, mask, causal, scale):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, causal, attn_mask=mask, scale=scale
    )


def _flash_backward(grad, q, k, v, out, lse, mask, causal, scale):
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad, q, k, v, out, lse, 0.0, causal, attn_mask=mask, scale=scale
    )


def _blocks(n: int, block: int) -> list[tuple[int, int]]:
    return [(s, min(s + block, n)) for s in range(0, n, block)]


def _key_tiles(mask, causal: bool, s: int, e: int, n_k: int, block: int):
    """(key slice, causal flag, mask tile) of the tiles query rows s:e attend to.

    Causal without a mask: the key blocks before the query block (unmasked) and the diagonal
    block (causal, square). With a mask: every key block the mask does not rule out entirely.
    """
    for ks, ke in _blocks(e if causal else n_k, block):
        if mask is None:
            yield slice(ks, ke), causal and ks == s, None
            continue
        tile = mask[:, :, s:e, ks:ke]
        if not torch.isneginf(tile).all():
            yield slice(ks, ke), False, tile


def _adapted_queries(adapt_q, i, q, block):
    """adapt_q(i, q) computed block by block, with the RNG state before each block."""
    states, parts = [], []
    for s, e in _blocks(q.shape[2], block):
        states.append(torch.get_rng_state())
        parts.append(adapt_q(i, q[:, :, s:e]))
    return (parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)), states


def _replay(rng_state, adapt, i, x):
    """adapt(i, x) with the RNG as the forward had it (same dropout masks), RNG untouched."""
    with torch.random.fork_rng(devices=[]):
        torch.set_rng_state(rng_state)
        return adapt(i, x)


def _adapter_grads(rng_state, adapt, i, x, grad_out, params):
    """Gradients of adapt(i, x), replayed under autograd, w.r.t. x and each of params."""
    with torch.enable_grad():
        xd = x.detach().requires_grad_()
        y = _replay(rng_state, adapt, i, xd)
        grad_out = grad_out.to(y.dtype)
        gx, *gp = torch.autograd.grad(y, (xd, *params), grad_out, allow_unused=True)
    return gx, gp


def _add(total, g, like=None, positions=None, alpha=1.0):
    """total + alpha·g, in place, g covering ``positions`` (dim 2) of a tensor shaped ``like``;
    the total is kept in fp32 at least.

    ``total`` None means zero: a fresh ``g`` covering everything becomes the total itself, so
    a single tile's gradients are never copied into a zero-filled buffer (unless upcast).
    """
    if g is None:
        return total
    if total is None:
        dtype = torch.promote_types(g.dtype, torch.float32)
        if like is None or g.shape == like.shape:
            g = g.to(dtype)
            return g if alpha == 1.0 else g.mul_(alpha)
        total = torch.zeros_like(like, dtype=dtype)
    target = total if like is None else total[:, :, positions]
    target.add_(g, alpha=alpha)
    return total
