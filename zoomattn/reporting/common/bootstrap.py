"""Bootstrap intervals over examples and seeds, and the significance rule of the reports.

A cell's scores are a [seeds, examples] array: every seed of a cell is evaluated on the same
examples. One bootstrap draw resamples the seeds with replacement and, independently, the examples
with replacement (the same examples for every drawn seed), and takes the mean: the interval covers
both the run-to-run spread of fine-tuning and the finite test set. With one seed it is the usual
percentile bootstrap over examples.

A difference between two cells evaluated on the same examples is drawn *paired*: one example
resample serves both sides, each side resamples its own seeds. It is significant only when its
interval excludes 0 — overlapping per-cell intervals alone decide nothing either way.

The resample count is a parameter; every report draws ``RESAMPLES`` = 2000 (the leaderboard's
cells and comparisons, the claims' differences). The study reports draw none: they show the
intervals of the evaluation files, which the evaluation stage draws with 1000 resamples over
examples (``evaluation.metrics.bootstrap_ci``, a lower layer that cannot import this one).
"""

from __future__ import annotations

import numpy as np

RESAMPLES = 2000
LEVEL = 0.95


def as_matrix(scores) -> np.ndarray:
    """[seeds, examples] float array; a flat sequence is one seed."""
    x = np.asarray(scores, dtype=float)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[1] == 0 or x.shape[0] == 0:
        raise ValueError(f"scores must be [seeds, examples] with both > 0, got shape {x.shape}")
    return x


def _example_counts(n: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """[resamples, n]: how often each example is drawn in each resample of n with replacement."""
    return rng.multinomial(n, np.full(n, 1.0 / n), size=resamples)


def _draws(x: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Mean of each draw: the example resample given as counts, the seeds resampled here."""
    per_seed = x @ counts.T / x.shape[1]  # [seeds, draws]: each seed's mean on each resample
    seeds = rng.integers(0, x.shape[0], size=(counts.shape[0], x.shape[0]))
    return per_seed[seeds, np.arange(counts.shape[0])[:, None]].mean(axis=1)


def _interval(draws: np.ndarray, level: float) -> tuple[float, float]:
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def mean_ci(
    scores, resamples: int = RESAMPLES, level: float = LEVEL, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, low, high): the percentile interval over seeds and examples."""
    x = as_matrix(scores)
    rng = np.random.default_rng(seed)
    counts = _example_counts(x.shape[1], resamples, rng)
    return (float(x.mean()), *_interval(_draws(x, counts, rng), level))


def difference_ci(
    a, b, resamples: int = RESAMPLES, level: float = LEVEL, seed: int = 0
) -> tuple[float, float, float]:
    """(mean(a) - mean(b), low, high), examples paired: column j of a and b is the same example."""
    a, b = as_matrix(a), as_matrix(b)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"paired cells need the same examples: {a.shape[1]} vs {b.shape[1]}")
    rng = np.random.default_rng(seed)
    counts = _example_counts(a.shape[1], resamples, rng)
    draws = _draws(a, counts, rng) - _draws(b, counts, rng)
    return (float(a.mean() - b.mean()), *_interval(draws, level))


def verdict(low: float, high: float) -> str:
    """'higher' / 'lower' when the difference's interval excludes 0, else 'n.s.'."""
    if low > 0:
        return "higher"
    if high < 0:
        return "lower"
    return "n.s."
