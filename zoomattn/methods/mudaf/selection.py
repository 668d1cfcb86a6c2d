"""Choosing MuDAF's target heads from their retrieval scores (paper §4.2, docs/papers.md §3).

``scores[layer][head]`` is a head's retrieval score (mean F1 over questions). ``weighted`` is the
paper's strategy: heads drawn one after another without replacement, each with probability
∝ exp(score / temperature) among the heads not drawn yet; ``top`` takes the n best (ties: lower
layer, then lower head first); ``weak`` (MuDAF-weak) draws uniformly among heads scoring below
``weak_below``. Pure and seeded: the same inputs give the same heads.
"""

from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger(__name__)


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max())
    return z / z.sum()


def select_heads(
    scores,
    n: int,
    selection: str = "weighted",
    temperature: float = 0.05,
    weak_below: float = 0.1,
    seed: int = 0,
) -> list[list[int]]:
    """n ``[layer, head]`` pairs (n clipped to the number of heads), sorted by (layer, head)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.size == 0:
        raise ValueError(f"scores: a [layers][heads] table, got shape {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError("scores: every retrieval score must be finite")
    if n < 0:
        raise ValueError(f"n: must be ≥ 0, got {n}")
    if temperature <= 0:
        raise ValueError(f"temperature: must be > 0, got {temperature}")
    n_heads = s.shape[1]
    flat = s.ravel()
    n = min(n, flat.size)
    rng = np.random.default_rng(seed)
    if selection == "top":
        chosen = np.argsort(-flat, kind="stable")[:n]
    elif selection == "weighted":
        left = np.arange(flat.size)
        chosen = []
        for _ in range(n):
            pick = rng.choice(len(left), p=_softmax(flat[left] / temperature))
            chosen.append(left[pick])
            left = np.delete(left, pick)
    elif selection == "weak":
        weak = np.flatnonzero(flat < weak_below)
        if len(weak) < n:
            log.warning(
                "weak selection: only %d heads score below %g, fewer than the %d asked for; "
                "taking all of them",
                len(weak),
                weak_below,
                n,
            )
            chosen = weak
        else:
            chosen = rng.choice(weak, size=n, replace=False)
    else:
        raise ValueError(f"selection: unknown strategy {selection!r} (weighted, top, weak)")
    return sorted([int(i) // n_heads, int(i) % n_heads] for i in chosen)
