"""Attention rectification (docs/papers.md §2): ``score_ij = q_i·k_j·s + g(u_i·k_j·s)``.

The low-rank ΔW of the paper is built the way LoRA builds an update of ``q_proj``, with the same
parameters (A ∈ R^{r×hidden} Kaiming-initialised with a = √5, B ∈ R^{(H·d)×r} zero, scaling α/r,
dropout on the input): ``u = RoPE(B·A·dropout(x))·α/r``, one row per query head. The update of
score (i, j) is ``x_iᵀ ΔW x_j = u_i·k_j·s`` with ΔW = Aᵀ Bᵀ W_k of rank r per head, where k_j is
the key the layer already computes: GQA comes for free (query head h reads its group's KV head),
the KV cache needs nothing new, and no extra projection of the keys is trained.

RoPE: u gets the rotary embedding of its query position, exactly as LoRA's update of ``q_proj``
would inside q, so the update depends on relative position like the base score does. Hence at
ξ = 0 (g(x) = x) the scores are (q + u)·k·s: LoRA on ``q_proj``, the same function class with the
same parameter count, and a checkpoint maps one to the other (tests/methods/rectify/test_model.py).
The shared LoRA of the preset still adapts every other target module; ``q_proj`` is left to ΔW.

The attention function only receives q, k, v (``attention.interface``); a forward pre-hook on the
attention module hands this module the layer input and its rotary cos/sin.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from zoomattn.attention.interface import attention_modules
from zoomattn.methods.rectify.config import RectifyConfig
from zoomattn.methods.rectify.kernel import Rectifier, rectified_attention, rectified_last_row


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RectifiedAttention(nn.Module):
    """The zoom module of one layer (see ``zoomattn.attention.interface``)."""

    def __init__(self, hidden: int, n_heads: int, head_dim: int, cfg: RectifyConfig):
        super().__init__()
        if cfg.rank is None or cfg.alpha is None or cfg.dropout is None or cfg.xi == "auto":
            raise ValueError("RectifiedAttention needs a resolved config (RectifyConfig.resolved)")
        self.head_dim = head_dim
        self.g = Rectifier(cfg.g, float(cfg.xi))
        self.block = cfg.block
        self.scaling = cfg.alpha / cfg.rank
        self.dropout = nn.Dropout(cfg.dropout) if cfg.dropout > 0 else nn.Identity()
        self.down = nn.Linear(hidden, cfg.rank, bias=False)
        self.up = nn.Linear(cfg.rank, n_heads * head_dim, bias=False)
        nn.init.kaiming_uniform_(self.down.weight, a=math.sqrt(5))
        nn.init.zeros_(self.up.weight)
        self.layer_input = None  # (hidden_states, (cos, sin)), set by the pre-hook

    def query_update(self, like: torch.Tensor) -> torch.Tensor:
        """u = RoPE(B·A·dropout(x))·α/r as ``[B, H, L, d]``, in the dtype of the queries."""
        x, (cos, sin) = self.layer_input
        w = self.down.weight
        delta = self.up(self.down(self.dropout(x.to(w.dtype)))) * self.scaling
        delta = delta.view(*x.shape[:-1], -1, self.head_dim).transpose(1, 2).to(like.dtype)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return delta * cos + rotate_half(delta) * sin

    def forward(self, q, k, v, mask=None, scaling=None, last_row: bool = False):
        u = self.query_update(q)
        if last_row:
            return rectified_last_row(q, u, k, self.g, mask, scaling)
        self.layer_input = None
        return rectified_attention(q, u, k, v, self.g, mask, scaling, self.block)


def _capture_layer_input(module, args, kwargs):
    hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
    module.zoom.layer_input = (hidden, kwargs["position_embeddings"])


def attach(model, cfg: RectifyConfig) -> None:
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    for attn in attention_modules(model):
        attn.zoom = RectifiedAttention(c.hidden_size, c.num_attention_heads, head_dim, cfg)
        attn.register_forward_pre_hook(_capture_layer_input, with_kwargs=True)
