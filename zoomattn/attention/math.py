"""Attention math shared by every method: fused SDPA, the materialised reference, last-row probes
(a method's own attention, such as OpAmp's two-branch form, is in its folder's ``kernel.py``).

The materialised softmax and the probes compute in ``probe_dtype`` (fp32 for bf16 inputs) and
return it: a bf16 softmax rounds every probability and every score by up to 2⁻⁹ of itself (a
score of 30 by 0.06, 6% of its weight), and finfo(fp16).min plus a negative score is −inf.
Fused SDPA needs none of this: its kernels keep scores and softmax in fp32 whatever the inputs.

Shapes follow transformers' attention interface: q ``[B, H, L, D]``, k/v ``[B, H_kv, S, D]``
(post-RoPE, KV heads not yet repeated for GQA), mask ``None`` or boolean ``[B, 1, L, S]`` with
True where attention is allowed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from zoomattn.attention import kernels
from zoomattn.attention.reuse import SameTensors
from zoomattn.attention.tile_ranges import padding_spans

_from_mask = SameTensors()


def repeat_kv(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Expand KV heads to the query heads of their group (GQA)."""
    n_rep = n_heads // x.shape[1]
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


def causal_flag(mask: torch.Tensor | None, q_len: int, k_len: int) -> bool:
    """With no mask, prefill is causal; a single decoding step sees every cached key."""
    if mask is not None or q_len == 1:
        return False
    if q_len != k_len:
        raise ValueError(f"unmasked attention with {q_len} queries over {k_len} keys is ambiguous")
    return True


def gqa_for_kernel(q, k, v, mask) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(k, v, enable_gqa) for SDPA. On CUDA a masked call goes to the memory-efficient kernel,
    which has no GQA: with ``enable_gqa`` it would fall back to the math kernel and build the
    N×N scores, so the KV heads are repeated there instead (a copy of k and v, not N×N)."""
    grouped = k.shape[1] != q.shape[1]
    if grouped and mask is not None and q.device.type == "cuda":
        return repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1]), False
    return k, v, grouped


FLASH_DTYPES = (torch.float16, torch.bfloat16)  # CUDA's flash kernel: these, head dim ≤ 256
FLASH_HEAD_DIM = 256


def right_padded_causal(mask: torch.Tensor) -> bool:
    """Whether ``mask`` (boolean ``[B, 1, L, L]``) is causal with at most right padding
    (transformers' mask of a right-padded batch, whose padded rows see every real key): then each
    real row's allowed keys are exactly its causal ones. A comparison over the mask (host syncs);
    any other dtype or shape is not."""
    square = mask.dim() == 4 and mask.shape[1] == 1 and mask.shape[-2] == mask.shape[-1]
    if mask.dtype != torch.bool or not square:
        return False
    spans = padding_spans(mask)
    return spans is not None and not bool(spans[:, 0].any())


def plain_mask(mask: torch.Tensor | None, q: torch.Tensor) -> torch.Tensor | None:
    """The mask plain SDPA runs under: None (causal) where ``attention_kernels`` runs ``plain``
    fused on q's device, CUDA's flash kernel takes q (without it, GQA without a mask would fall to
    the math kernel's N×N scores) and ``mask`` is only right padding (``kernels`` docstring), else
    ``mask``. Decided once per mask tensor (a forward's layers share it)."""
    if mask is None or not kernels.requested(kernels.PLAIN):
        return mask
    if q.dtype not in FLASH_DTYPES or q.shape[-1] > FLASH_HEAD_DIM:
        declined = "no flash kernel"
    else:
        right = _from_mask.get("right padded", (mask,), lambda: right_padded_causal(mask))
        declined = None if right else "not right padding"
    return None if kernels.choose(kernels.PLAIN, q.device, declined) == kernels.FUSED else mask


def sdpa(q, k, v, mask=None, scaling=None) -> torch.Tensor:
    """Fused attention (no N×N matrix is kept): softmax(q kᵀ·scale + mask) v, GQA-aware. A row
    the mask leaves no key (a left-padded query) gives 0 on every device. Under
    ``attention_kernels: {plain: fused}`` on CUDA a right-padded batch runs causal without its
    mask (``plain_mask``)."""
    mask = plain_mask(mask, q)
    k, v, grouped = gqa_for_kernel(q, k, v, mask)
    empty = None
    if mask is not None and q.device.type == "cuda":
        # CUDA's memory-efficient kernel gives such a row 0 but, in bf16, a NaN query gradient
        # (measured on an H200, torch 2.11), which reaches q_proj's weights even though no loss
        # reads the row. Let the row see every key instead, then zero its output: the same
        # forward, and a gradient of exactly 0 through the zeroed row.
        empty = ~mask.any(dim=-1, keepdim=True)
        mask = mask | empty
    out = F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=mask,
        is_causal=causal_flag(mask, q.shape[2], k.shape[2]),
        scale=scaling,
        enable_gqa=grouped,
    )
    return out if empty is None else out.masked_fill(empty, 0)


def row_dot(
    a: torch.Tensor, b: torch.Tensor, heads: int = 8, b_lo: torch.Tensor | None = None
) -> torch.Tensor:
    """Σ over the last dim of a·b in fp32, ``[B, H, L]`` (FlashAttention's Δ = rowsum(dO ∘ O)),
    ``heads`` heads at a time: computed whole, its fp32 copies of a, b and their product were
    three times the output in fp32, the peak of a fused kernel's backward (384 MiB at 8192 tokens
    and 32 heads, where plain SDPA's whole step peaks at 483). ``b_lo``: b's rounding error (b
    as computed in fp32 is b + b_lo), added to b in fp32."""
    out = torch.empty(a.shape[:-1], dtype=torch.float32, device=a.device)
    for start in range(0, a.shape[1], heads):
        part = slice(start, start + heads)
        if b_lo is None:
            b_part = b[:, part].float()
        else:  # b_lo added in place into a copy (.float() is b itself where b is fp32)
            b_part = b[:, part].to(torch.float32, copy=True).add_(b_lo[:, part])
        out[:, part] = (a[:, part].float() * b_part).sum(-1)
    return out


def additive_mask(mask, q_len: int, k_len: int, dtype, device, fill=None) -> torch.Tensor:
    """Boolean/absent mask as an additive one. The default fill finfo.min (not −inf) keeps fully
    masked (padded) rows finite; ``fill=-inf`` gives the mask SDPA builds from a boolean one."""
    if mask is None:
        allowed = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
        if q_len > 1:
            allowed = allowed.tril()
        mask = allowed[None, None]
    fill = torch.finfo(dtype).min if fill is None else fill
    return torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill(~mask, fill)


def probe_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype references and probes compute in: fp32, or the inputs' if wider (fp64 stays)."""
    return torch.promote_types(dtype, torch.float32)


def attention_probs(q, k, mask=None, scaling=None) -> torch.Tensor:
    """Materialised softmax(q kᵀ·scale + mask): ``[B, H, L, S]`` in ``probe_dtype``. Reference
    and probes only."""
    scaling = q.shape[-1] ** -0.5 if scaling is None else scaling
    dtype = probe_dtype(q.dtype)
    k = repeat_kv(k, q.shape[1]).to(dtype)
    scores = q.to(dtype) @ k.transpose(-1, -2) * scaling
    scores = scores + additive_mask(mask, q.shape[2], k.shape[2], scores.dtype, scores.device)
    return scores.softmax(dim=-1)


def last_row_probs(q, k, mask=None, scaling=None) -> torch.Tensor:
    """Attention of the last query position only: ``[B, H, S]`` in ``probe_dtype`` (one row,
    never the matrix)."""
    row_mask = None if mask is None else mask[:, :, -1:, :]
    return attention_probs(q[:, :, -1:], k, row_mask, scaling)[:, :, 0]


def last_row_scores(q, k, mask=None, scaling=None) -> torch.Tensor:
    """Pre-softmax scores q·kᵀ·scale of the last query position, NaN where masked: ``[B, H, S]``
    in ``probe_dtype``."""
    scaling = q.shape[-1] ** -0.5 if scaling is None else scaling
    dtype = probe_dtype(q.dtype)
    k = repeat_kv(k, q.shape[1]).to(dtype)
    scores = (q[:, :, -1:].to(dtype) @ k.transpose(-1, -2))[:, :, 0] * scaling
    if mask is not None:
        scores = scores.masked_fill(~mask[:, :, -1, :], float("nan"))
    return scores
