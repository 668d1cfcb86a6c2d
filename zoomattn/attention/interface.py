"""The one attention implementation every zoomattn model runs through (name: ``zoomattn``).

A method changes attention by hanging a module under ``attn_module.zoom``; layers without one run
plain fused SDPA, identical to transformers' ``sdpa``. The zoom module's forward takes
``(query, key, value, mask, scaling, last_row=False)``: with ``last_row`` it returns the attention
weights of the last query position ``[B, H, S]`` instead of the output (the probe used for
attention diagnostics). ``recording_last_scores`` probes the base pre-softmax scores instead.
``masking_heads`` zeroes chosen heads' outputs (MuDAF's masking experiment) and ``capturing_qk``
hands out each layer's post-RoPE queries and keys with their gradients (MuDAF's contrastive loss);
both work under any method. Calling through ``forward`` keeps peft wrappers working.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from zoomattn.attention.math import last_row_probs, last_row_scores, sdpa

NAME = "zoomattn"


def zoom_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    if dropout:
        raise ValueError("zoomattn attention has no attention dropout; set attention_dropout=0")
    mask = attention_mask if attention_mask is None else attention_mask.bool()
    zoom = getattr(module, "zoom", None)
    if getattr(module, "record_last_scores", False):  # the base scores (q·kᵀ·s), any method
        module.last_scores = last_row_scores(query, key, mask, scaling).detach()
    if getattr(module, "capture_qk", False):  # post-RoPE, in the graph: a loss may use them
        module.captured_qk = (query, key)
    if getattr(module, "record_last_row", False):
        if zoom is None:
            row = last_row_probs(query, key, mask, scaling)
        else:
            row = zoom(query, key, value, mask, scaling, last_row=True)
        module.last_row = row.detach()
    out = (
        sdpa(query, key, value, mask, scaling)
        if zoom is None
        else zoom(query, key, value, mask, scaling)
    )
    masked = getattr(module, "masked_heads", None)
    if masked:
        keep = torch.ones(out.shape[1], dtype=out.dtype, device=out.device)
        keep[list(masked)] = 0
        out = out * keep[None, :, None, None]
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, zoom_attention)
AttentionMaskInterface.register(NAME, sdpa_mask)


def attention_modules(model) -> list[torch.nn.Module]:
    """The self-attention module of every decoder layer, in layer order."""
    return [m for name, m in model.named_modules() if name.endswith("self_attn")]


@contextlib.contextmanager
def _recording(model, flag: str, attr: str) -> Iterator[list[torch.nn.Module]]:
    modules = attention_modules(model)
    for m in modules:
        setattr(m, flag, True)
    try:
        yield modules
    finally:
        for m in modules:
            setattr(m, flag, False)
            m.__dict__.pop(attr, None)


def recording_last_row(model):
    """While active, each layer stores the last query row of its attention as ``.last_row``."""
    return _recording(model, "record_last_row", "last_row")


def recording_last_scores(model):
    """While active, each layer stores the last query row of its base pre-softmax scores
    (q·kᵀ·scale, NaN where masked) as ``.last_scores``: ``[B, H, S]``."""
    return _recording(model, "record_last_scores", "last_scores")


def capturing_qk(model):
    """While active, each layer stores its post-RoPE ``(query [B, H, L, d], key [B, KV, S, d])``
    as ``.captured_qk``, still attached to the autograd graph."""
    return _recording(model, "capture_qk", "captured_qk")


@contextlib.contextmanager
def masking_heads(model, heads) -> Iterator[None]:
    """While active, the outputs of the given ``(layer, head)`` pairs are zero (before o_proj)."""
    modules = attention_modules(model)
    n_heads = model.config.num_attention_heads
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        if not (0 <= layer < len(modules) and 0 <= head < n_heads):
            raise ValueError(f"no head ({layer}, {head}): {len(modules)} layers × {n_heads} heads")
        by_layer.setdefault(int(layer), []).append(int(head))
    for layer, hs in by_layer.items():
        modules[layer].masked_heads = tuple(hs)
    try:
        yield
    finally:
        for m in modules:
            m.__dict__.pop("masked_heads", None)
