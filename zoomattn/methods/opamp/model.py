"""OpAmp adaptation (docs/papers.md §1): two adapted attentions, common- and differential-mode gain.

    M̄ = A_d (M⁺ − M⁻) + (A_c/2)(M⁺ + M⁻),  M± = softmax(Q±K±ᵀ/√d),  Q± = E_q±(q), K± = E_k±(k)

with A_c = 1 and A_d = K·A_c (K = CMRR); K = inf is the Differential-Transformer limit A_c = 0,
A_d = 1. The output M̄V = A_d·(M⁺V − M⁻V) + (A_c/2)·(M⁺V + M⁻V) is two fused SDPA calls and no
N×N matrix is formed; combined in this form, not as (A_d + A_c/2)·M⁺V + (A_c/2 − A_d)·M⁻V, it
stays exact in bf16 where M⁺ = M⁻ (``kernel``). Adapters E(x) = x + GELU(dropout(x) W₁) W₂
act on the whole flattened q (all query heads) or k (the KV heads, before GQA repetition) after
RoPE; W₂ starts at zero, so at initialisation M⁺ = M⁻ = M and M̄ = M for every finite K (Eq. 14),
bitwise in any dtype. Only layers with ``layer_idx % every == 0`` are adapted. Training on CPU
keeps only q, k, v and each branch's output and log-sum-exp for backward
(``two_branch_attention``), recomputing the adapters there; on CUDA with ``attention_kernels:
fused`` both branches run as one SDPA call, the adapters batched (``fused.py``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from zoomattn.attention.interface import attention_modules
from zoomattn.attention.math import attention_probs, last_row_probs, repeat_kv
from zoomattn.methods.opamp.config import OpAmpConfig
from zoomattn.methods.opamp.kernel import two_branch_attention
from zoomattn.methods.opamp.modes import combine_modes


class BottleneckAdapter(nn.Module):
    """x + φ(dropout(x) W₁) W₂ with φ = GELU, no biases, W₂ zero-initialised."""

    def __init__(self, dim: int, hidden: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.down = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(hidden, dim, bias=False)
        nn.init.kaiming_uniform_(self.down.weight, a=math.sqrt(5))
        nn.init.zeros_(self.up.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.up(F.gelu(self.down(self.dropout(x))))


def _adapt(adapter: BottleneckAdapter, x: torch.Tensor) -> torch.Tensor:
    """Apply an adapter to all heads of one position at once: [B, H, L, D] -> same shape, in the
    adapter's dtype (``dtype`` of the config), returned in the queries' and keys' own."""
    b, h, n, d = x.shape
    flat = x.transpose(1, 2).reshape(b, n, h * d).to(adapter.down.weight.dtype)
    return adapter(flat).to(x.dtype).view(b, n, h, d).transpose(1, 2)


class OpAmpAttention(nn.Module):
    """The zoom module of one adapted layer (see ``zoomattn.attention.interface``)."""

    query_block: int | None = None  # positions per block of the adapted queries (None: default)

    def __init__(self, n_heads: int, n_kv_heads: int, head_dim: int, cfg: OpAmpConfig):
        super().__init__()
        q_dim, k_dim = n_heads * head_dim, n_kv_heads * head_dim
        self.q1 = BottleneckAdapter(q_dim, cfg.adapter_dim, cfg.dropout)
        self.k1 = BottleneckAdapter(k_dim, cfg.adapter_dim, cfg.dropout)
        self.q2 = BottleneckAdapter(q_dim, cfg.adapter_dim, cfg.dropout)
        self.k2 = BottleneckAdapter(k_dim, cfg.adapter_dim, cfg.dropout)
        self.mode_gains = cfg.mode_gains()  # (A_c/2, A_d)

    def adapt_q(self, i: int, q):
        """E_q±(q) of branch 0 (M⁺) or 1 (M⁻)."""
        return _adapt(self.q1 if i == 0 else self.q2, q)

    def adapt_k(self, i: int, k):
        """E_k±(k) of branch 0 (M⁺) or 1 (M⁻)."""
        return _adapt(self.k1 if i == 0 else self.k2, k)

    def branches(self, q, k):
        return [(self.adapt_q(i, q), self.adapt_k(i, k)) for i in (0, 1)]

    def forward(self, q, k, v, mask=None, scaling=None, last_row: bool = False, path=None):
        if last_row:  # signed M̄ row of the last query: rows sum to A_c, entries may be < 0
            (q1, k1), (q2, k2) = self.branches(q, k)
            rows = last_row_probs(q1, k1, mask, scaling), last_row_probs(q2, k2, mask, scaling)
            return combine_modes(*rows, *self.mode_gains)
        params = tuple(p for p in self.parameters() if p.requires_grad)
        return two_branch_attention(
            q, k, v, self.adapt_q, self.adapt_k, self.mode_gains, params, mask, scaling, path,
            self.query_block, adapters=((self.q1, self.q2), (self.k1, self.k2)),
        )  # fmt: skip

    def materialised(self, q, k, v, mask=None, scaling=None) -> torch.Tensor:
        """The formula itself, M̄ built as a matrix (in fp32 at least, as ``attention_probs``): the
        reference for tests and benchmarks."""
        (q1, k1), (q2, k2) = self.branches(q, k)
        m_plus, m_minus = (
            attention_probs(q1, k1, mask, scaling),
            attention_probs(q2, k2, mask, scaling),
        )
        half_a_c, a_d = self.mode_gains
        m_bar = a_d * (m_plus - m_minus) + half_a_c * (m_plus + m_minus)
        return m_bar @ repeat_kv(v, q.shape[1]).to(m_bar.dtype)


def adapted_layers(n_layers: int, every: int) -> list[int]:
    return [i for i in range(n_layers) if i % every == 0]


def attach(model, cfg: OpAmpConfig) -> None:
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    layers = attention_modules(model)
    for i in adapted_layers(len(layers), cfg.every):
        layers[i].zoom = OpAmpAttention(c.num_attention_heads, c.num_key_value_heads, head_dim, cfg)
