"""Rectification's attention kernel (docs/papers.md §2): softmax(q·kᵀ·s + g(u·kᵀ·s) + mask)·v, by
blocks.

``u`` is the low-rank query update (``model.py``): at ξ = 0, where g is the identity, the
scores are ``(q + u)·kᵀ·s``, plain attention on the updated queries, and the fused SDPA kernel
runs. A nonlinear g on pairwise scores has no SDPA kernel, so ``rectified_attention`` walks the
queries in blocks of ``block`` rows: a block's scores are ``[block, S]`` per head, and under
autograd each block is a checkpoint (``torch.utils.checkpoint``) that keeps only its inputs and
output and recomputes its scores in backward (a single block is not recomputed: it is within
the bound already). Peak memory is O(N·block) per head forward and backward, never O(N²). On
CUDA with ``attention_kernels: fused`` the Triton kernel of ``triton_kernel.py`` runs instead
(flash-style, O(N)), a decoding step (one query) included (``FUSED_DECODING``).
``rectified_attention_materialised`` is the O(N²) formula, the reference of the tests and the
benchmark.

g, with ξ from config (the paper's smooth form; ``smooth(a, b) = log(eᵃ + eᵇ + 1) − log(e⁻ᵃ + e⁻ᵇ
+ 1)``, ≈ max(a, b) for x ≥ 0 and min(a, b) for x < 0):

=============  ==========================================  ====================================
name           g(x)                                        at ξ = 0
=============  ==========================================  ====================================
max            smooth(ξ·tanh x, x)  (the method)           x (the paper's exact form: see below)
tanh           ξ·tanh x                                    0 (no update)
tanh_plus_x    ξ·tanh x + x                                x
sigmoid        smooth(2ξ·(sigmoid x − 0.5), x)             x
=============  ==========================================  ====================================

At ξ = 0 the exact form max(ξ·tanh x, x) (x ≥ 0) / min(...) (x < 0) is x, as the paper states
(Table 1: "ξ = 0 results in g(x) = x"); its smooth approximation would instead give
log(2 + eˣ) − log(2 + e⁻ˣ) (slope 2/3 at 0), which is not LoRA. So ξ = 0 is the identity, and
every ξ > 0 uses the smooth form, which is within log 3 of the exact one.

Shapes follow ``attention.math``: q, u ``[B, H, L, D]``; k, v ``[B, H_kv, S, D]`` (GQA: query head
h reads KV head h // (H / H_kv)); mask None (causal prefill, or one decoding step) or boolean
``[B, 1, L, S]`` with True where attention is allowed. Masked scores are set to finfo.min, not
−inf, so no softmax row is NaN, and a row the mask leaves no key (a left-padded query) gives 0,
as ``math.sdpa`` gives it on every device (and so at ξ = 0 here): no real row reads a padded
one, so this defines what was arbitrary without changing any real row.

Precision: the scores, g and the softmax are computed in fp32 for bf16 inputs (``probe_dtype``),
as fused SDPA computes them, and the output is cast back; in bf16 a score of 30 would be off by
up to 0.06 and g(x), a difference of two softplus terms ≈ log 3 near 0, by ~2⁻⁸ absolute. The
block's scores then take twice the bytes of bf16 ones, still O(N·block). The materialised form
and the last-row probe return fp32 (the reference and the probe, like ``math.attention_probs``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from zoomattn.attention import kernels
from zoomattn.attention.math import causal_flag, probe_dtype, repeat_kv, sdpa
from zoomattn.methods.rectify.config import (  # torch-free: the workflow checks names
    G_VARIANTS,
    MAX_XI,
    beyond_fused_kernel,  # the fused kernel's smooth max-min past MAX_XI: declined (recorded)
)

QUERY_BLOCK = 128


def smooth_max_min(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """log(eᵃ + eᵇ + 1) − log(e⁻ᵃ + e⁻ᵇ + 1), computed without overflow."""
    return F.softplus(torch.logaddexp(a, b)) - F.softplus(torch.logaddexp(-a, -b))


@dataclass(frozen=True)
class Rectifier:
    """The nonlinearity g applied to the low-rank score update."""

    name: str = "max"
    xi: float = 3.0

    def __post_init__(self):
        if self.name not in G_VARIANTS:
            raise ValueError(f"g: unknown variant {self.name!r} (known: {', '.join(G_VARIANTS)})")
        if not self.xi >= 0:
            raise ValueError(f"xi: must be ≥ 0, got {self.xi}")

    @property
    def is_identity(self) -> bool:
        return self.xi == 0 and self.name != "tanh"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.is_identity:
            return x
        if self.name == "max":
            return smooth_max_min(self.xi * torch.tanh(x), x)
        if self.name == "sigmoid":
            return smooth_max_min(2 * self.xi * (torch.sigmoid(x) - 0.5), x)
        if self.name == "tanh":
            return self.xi * torch.tanh(x)
        return self.xi * torch.tanh(x) + x  # tanh_plus_x


def _grouped(x: torch.Tensor, n_kv: int) -> torch.Tensor:
    """[B, H, L, D] -> [B, H_kv, G, L, D]: the query heads of each KV head side by side."""
    b, h, n, d = x.shape
    return x.view(b, n_kv, h // n_kv, n, d)


def _block(q, u, k, v, allowed, scale: float, g: Rectifier, causal_from=None) -> torch.Tensor:
    """One query block: q, u ``[B, H_kv, G, b, D]``; k, v ``[B, H_kv, 1, S, D]``; allowed
    broadcastable to ``[B, H_kv, G, b, S]`` or None. ``causal_from`` (causal prefill: the key
    index of the block's first query) builds the causal ``[b, S]`` mask here rather than taking
    it as an input, which the checkpoint would keep until backward (O(N²) over all blocks)."""
    if causal_from is not None:
        rows = torch.arange(causal_from, causal_from + q.shape[-2], device=q.device)
        allowed = torch.arange(k.shape[-2], device=q.device)[None, :] <= rows[:, None]
    dtype = probe_dtype(q.dtype)
    kt = k.to(dtype).transpose(-1, -2)
    scores = (q.to(dtype) @ kt) * scale + g((u.to(dtype) @ kt) * scale)
    if allowed is None:
        return (scores.softmax(dim=-1) @ v.to(dtype)).to(q.dtype)
    probs = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min).softmax(dim=-1)
    if causal_from is None:  # a causal row always sees its own key: no copy of probs for nothing
        probs = _without_empty_rows(probs, allowed)
    return (probs @ v.to(dtype)).to(q.dtype)


def _without_empty_rows(probs: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """probs with the rows the mask leaves no key set to 0 (their output 0, as ``math.sdpa``
    gives on every device; finfo.min alone would make them uniform over the keys)."""
    return probs.masked_fill(~allowed.any(dim=-1, keepdim=True), 0)


def _allowed_rows(mask, causal: bool, start: int, end: int, n_q: int, n_k: int, device):
    """The boolean mask of query rows start:end, shaped for ``_block`` (None: all allowed)."""
    if mask is not None:
        return mask[:, :, start:end, :].unsqueeze(2)  # [B, 1, 1, b, S]
    if not causal:
        return None
    rows = torch.arange(start, end, device=device) + (n_k - n_q)
    return torch.arange(n_k, device=device)[None, :] <= rows[:, None]


# A decoding step (one query) goes through the Triton kernel too, on its decode tile: on an H200
# (benchmarks/rectified_triton.py --decode 8, left-padded cache) it took 0.26× the block-wise
# path's time at 4096 cached tokens and 0.19× at 8192 (0.99× and 0.75× plain SDPA's); after the
# tiles' retune 0.26× at 8192 (1.00× SDPA's). Off, the block-wise path runs it and the dispatch
# records the kernel as declined.
FUSED_DECODING = True


def rectified_attention(q, u, k, v, g: Rectifier, mask=None, scaling=None, block=None):
    """softmax(q·kᵀ·s + g(u·kᵀ·s) + mask)·v in query blocks; shapes as the module docstring."""
    scale = q.shape[-1] ** -0.5 if scaling is None else scaling
    if g.is_identity:
        return sdpa(q + u, k, v, mask, scale)
    declined = "decoding" if q.shape[2] == 1 and not FUSED_DECODING else None
    declined = f"xi > {MAX_XI:g}" if beyond_fused_kernel(g.name, g.xi) else declined
    if kernels.choose("rectify", q.device, declined) == kernels.FUSED:
        from zoomattn.methods.rectify.triton_kernel import fused_rectified_attention

        return fused_rectified_attention(q, u, k, v, g, mask, scale)
    block = block or QUERY_BLOCK
    n_kv, (bsz, n_heads, n_q, dim) = k.shape[1], q.shape
    n_k = k.shape[2]
    causal = causal_flag(mask, n_q, n_k)
    qg, ug, kg, vg = _grouped(q, n_kv), _grouped(u, n_kv), k.unsqueeze(2), v.unsqueeze(2)
    # One block holds O(N·block) already: recomputing it in backward would only cost time.
    recompute = (
        n_q > block and torch.is_grad_enabled() and any(t.requires_grad for t in (q, u, k, v))
    )
    outs = []
    for start in range(0, n_q, block):
        end = min(start + block, n_q)
        allowed = None if causal else _allowed_rows(mask, causal, start, end, n_q, n_k, q.device)
        keys = end + (n_k - n_q) if causal else n_k  # causal rows never read later keys
        args = (
            qg[:, :, :, start:end], ug[:, :, :, start:end], kg[..., :keys, :], vg[..., :keys, :],
            None if allowed is None else allowed[..., :keys], scale, g,
            start + (n_k - n_q) if causal else None,
        )  # fmt: skip
        if recompute:
            outs.append(checkpoint(_block, *args, use_reentrant=False, preserve_rng_state=False))
        else:
            outs.append(_block(*args))
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=3)
    return out.reshape(bsz, n_heads, n_q, dim)


def _full_scores(q, u, k, g: Rectifier, mask, scaling) -> torch.Tensor:
    scale = q.shape[-1] ** -0.5 if scaling is None else scaling
    dtype = probe_dtype(q.dtype)
    kt = repeat_kv(k, q.shape[1]).to(dtype).transpose(-1, -2)
    scores = (q.to(dtype) @ kt) * scale + g((u.to(dtype) @ kt) * scale)
    n_q, n_k = q.shape[2], k.shape[2]
    allowed = _allowed_rows(mask, causal_flag(mask, n_q, n_k), 0, n_q, n_q, n_k, q.device)
    if allowed is not None:
        allowed = allowed.squeeze(2) if mask is not None else allowed
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    return scores


def rectified_attention_materialised(q, u, k, v, g: Rectifier, mask=None, scaling=None):
    """The formula with the whole ``[L, S]`` score matrix: reference for tests and benchmarks."""
    probs = _full_scores(q, u, k, g, mask, scaling).softmax(dim=-1)
    if mask is not None:
        probs = _without_empty_rows(probs, mask)
    return probs @ repeat_kv(v, q.shape[1]).to(probs.dtype)


def rectified_last_row(q, u, k, g: Rectifier, mask=None, scaling=None) -> torch.Tensor:
    """Attention weights of the last query position only: ``[B, H, S]``."""
    row_mask = None if mask is None else mask[:, :, -1:, :]
    return _full_scores(q[:, :, -1:], u[:, :, -1:], k, g, row_mask, scaling).softmax(-1)[:, :, 0]
