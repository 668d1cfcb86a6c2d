"""The one attention implementation every zoomattn model runs through (name: ``zoomattn``).

A method changes attention by hanging a module under ``attn_module.zoom``; layers without one run
plain fused SDPA, identical to transformers' ``sdpa``. The zoom module's forward takes
``(query, key, value, mask, scaling, last_row=False)``: with ``last_row`` it returns the attention
weights of the last query position ``[B, H, S]`` instead of the output (the probe used for
attention diagnostics). Calling through ``forward`` keeps peft wrappers working.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from zoomattn.attention.math import last_row_probs, sdpa

NAME = "zoomattn"


def zoom_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    if dropout:
        raise ValueError("zoomattn attention has no attention dropout; set attention_dropout=0")
    mask = attention_mask if attention_mask is None else attention_mask.bool()
    zoom = getattr(module, "zoom", None)
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
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, zoom_attention)
AttentionMaskInterface.register(NAME, sdpa_mask)


def attention_modules(model) -> list[torch.nn.Module]:
    """The self-attention module of every decoder layer, in layer order."""
    return [m for name, m in model.named_modules() if name.endswith("self_attn")]


@contextlib.contextmanager
def recording_last_row(model) -> Iterator[list[torch.nn.Module]]:
    """While active, each layer stores the last query row of its attention as ``.last_row``."""
    modules = attention_modules(model)
    for m in modules:
        m.record_last_row = True
    try:
        yield modules
    finally:
        for m in modules:
            m.record_last_row = False
            m.__dict__.pop("last_row", None)
