"""LKG-RALM's layer-wise passage estimator (paper §4.3): relevance and confidence per layer, the
entropy-based layer selection, the guidance recursion and the estimator's auxiliary losses.

Shapes: B rows, Lyr decoder layers, P passage slots (a row with fewer passages leaves the last
slots invalid: ``valid`` False), hidden the model's width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ScoreHead(nn.Module):
    """One cross-attention score: σ(q·k_i/√d + b), q = W_q a(e_q), k_i = W_k a(e_i); in fp32
    whatever the module's dtype (in bf16, σ rounds to exactly 1 from a logit of ~6: the BCE of
    ``aux_losses`` then clamps to 100 and its gradient is 0)."""

    def __init__(self, adapter_dim: int, score_dim: int):
        super().__init__()
        self.w_query = nn.Linear(adapter_dim, score_dim, bias=False)
        self.w_key = nn.Linear(adapter_dim, score_dim, bias=False)
        self.offset = nn.Parameter(torch.zeros(()))
        self.scale = score_dim**-0.5

    def forward(self, a_passages: torch.Tensor, a_question: torch.Tensor) -> torch.Tensor:
        q = self.w_query(a_question)  # [B, Lyr, d]
        k = self.w_key(a_passages)  # [B, Lyr, P, d]
        logits = (k @ q[..., None])[..., 0] * self.scale + self.offset
        return torch.sigmoid(logits.float())


class PassageEstimator(nn.Module):
    """Adapter (LayerNorm → Linear → GELU → Dropout), shared by every layer and by the ``[e_i]``
    and ``[e_q]`` states, then two score heads: relevance r and confidence c ``[B, Lyr, P]``."""

    def __init__(self, hidden: int, adapter_dim: int, score_dim: int, dropout: float):
        super().__init__()
        self.adapter = nn.Sequential(
            nn.LayerNorm(hidden),
            nn.Linear(hidden, adapter_dim),
            nn.GELU(),
            nn.Dropout(dropout),
        )
        self.relevance = ScoreHead(adapter_dim, score_dim)
        self.confidence = ScoreHead(adapter_dim, score_dim)

    def forward(
        self, e_passages: torch.Tensor, e_question: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """e_passages ``[B, Lyr, P, hidden]``, e_question ``[B, Lyr, hidden]`` -> (r, c), fp32."""
        dtype = self.relevance.w_query.weight.dtype  # the base may compute in bf16
        a_p = self.adapter(e_passages.to(dtype))
        a_q = self.adapter(e_question.to(dtype))
        return self.relevance(a_p, a_q), self.confidence(a_p, a_q)


def _masked_entropy(weights: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Entropy over the last dim of ``weights`` renormalised over the ``keep`` entries (0·log 0 =
    0, with no NaN gradient; nothing kept gives 0)."""
    w = weights.masked_fill(~keep, 0.0)
    w = w / w.sum(-1, keepdim=True).clamp_min(torch.finfo(w.dtype).tiny)
    positive = w > 0
    safe = torch.where(positive, w, torch.ones_like(w))
    return -(safe * safe.log()).masked_fill(~positive, 0.0).sum(-1)


def passage_entropy(probs: torch.Tensor, in_passage: torch.Tensor) -> torch.Tensor:
    """H_i of paper eq. 4 ``[B, P]``: entropy of each ``[e_i]`` row's attention over its passage's
    tokens, K = 1/log n_i (so H_i ∈ [0, 1]; n_i = 1 gives 0), mean over heads.

    probs ``[B, H, P, S]`` (row of passage i's ``[e_i]``), in_passage ``[B, P, S]``. Under the
    estimator mask the row's mass already lies in its passage; it is renormalised over the passage
    anyway, so the entropy is of a distribution whatever mask produced the row.
    """
    inside = in_passage[:, None].expand_as(probs)
    entropy = _masked_entropy(probs.float(), inside)  # [B, H, P]
    n = in_passage.sum(-1).float()  # [B, P]
    norm = torch.where(n > 1, n.clamp_min(2).log(), torch.ones_like(n))
    return torch.where(n > 1, entropy.mean(1) / norm, torch.zeros_like(n))


def guidance(
    r: torch.Tensor, c: torch.Tensor, entropy: torch.Tensor, beta: float, alpha_init: float
) -> torch.Tensor:
    """Paper eq. 5 over layers: α^l = β·log(1+H^l)·log(1+r^l)·log(1+c^l) + (1−β)·α^{l−1},
    α^{−1} = ``alpha_init``. r, c, entropy ``[B, Lyr, P]`` (entropy may broadcast: ones for the
    w/o-ELS ablation) -> α ``[B, Lyr, P]``. Positive whenever ``alpha_init`` is."""
    step = torch.log1p(entropy) * torch.log1p(r) * torch.log1p(c)
    step = step.expand_as(r)
    alpha = torch.full_like(r[:, 0], float(alpha_init))
    out = []
    for layer in range(r.shape[1]):
        alpha = beta * step[:, layer] + (1 - beta) * alpha
        out.append(alpha)
    return torch.stack(out, dim=1)


def _masked_mean(values: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Mean over the kept entries; a zero still in the graph when none is kept (no NaN)."""
    n = keep.sum()
    total = values.masked_fill(~keep, 0.0).sum()
    return total / n.clamp_min(1)


def aux_losses(
    r: torch.Tensor,
    c: torch.Tensor,
    alpha_last: torch.Tensor,
    labels: torch.Tensor,
    agreement: torch.Tensor,
    valid: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """The estimator's three losses (paper §4.3.2), each a scalar.

    r, c ``[B, Lyr, P]``; alpha_last, labels (0/1), agreement (the share of external rankers
    agreeing with the label), valid ``[B, P]``. ``relevance``: eq. 1, BCE(r, label) averaged over
    layers and valid passages. ``confidence``: BCE(c, agreement) with soft targets. Eq. 2 as
    printed, −Σ_i (c_i − a_i), is linear in c and unbounded below (it only pushes every c up to 1,
    whatever the agreement); the BCE keeps its intent, c tracking the rankers' agreement.
    ``diversity``: eq. 3, −H of α normalised over a row's valid passages, mean over rows with at
    least two passages. Passages outside ``valid`` and rows without passages add nothing.
    """
    keep = valid[:, None, :].expand_as(r)
    labels = labels.to(r.dtype)[:, None, :].expand_as(r)
    agreement = agreement.to(c.dtype)[:, None, :].expand_as(c)
    relevance = F.binary_cross_entropy(r, labels.masked_fill(~keep, 0.0), reduction="none")
    confidence = F.binary_cross_entropy(c, agreement.masked_fill(~keep, 0.0), reduction="none")
    entropy = _masked_entropy(alpha_last, valid)  # [B]
    rows = valid.sum(-1) >= 2
    return {
        "relevance": _masked_mean(relevance, keep),
        "confidence": _masked_mean(confidence, keep),
        "diversity": -_masked_mean(entropy, rows),
    }
