"""Figures of the MuDAF retrieval-head analysis (Fig. 3/4 analogues), from the JSON of
``evaluation.retrieval_heads``: ``head_scores`` for the curve and the heat map, one
``masking_experiment`` result per model for the masking plot. Each function saves the figure and
returns it (closed) so callers and tests can inspect what was drawn."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from zoomattn.reporting.common.plotting import empty_panel, legend_entries, mark_gaps, save


def _save(fig, path, title: str | None):
    if title:
        fig.suptitle(title, fontsize=9)
    return save(fig, path)


def _caption(scores: dict) -> str:
    return f"{scores['n_examples']} questions, attended: mass > {scores['threshold']:g}"


def plot_retrieval_curve(scores: dict, path, title: str | None = None):
    """Fig. 3: F1 and EM retrieval score of every head, heads ranked by F1 (descending)."""
    ranking = scores["ranking"]
    ranks = [r["rank"] for r in ranking]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot(ranks, [r["f1"] for r in ranking], "-", color="C0", label="F1 (retrieval score R)")
    ax.plot(ranks, [r["em"] for r in ranking], ".", ms=3, color="C1", label="EM")
    top = max(1, round(0.05 * len(ranking)))
    ax.axvline(top + 0.5, ls=":", color="grey", label=f"top 5% ({top} heads)")
    ax.set_xlabel(f"head rank by F1 ({scores['layers']} layers × {scores['heads']} heads)")
    ax.set_ylabel("retrieval score")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(_caption(scores), fontsize=9)
    ax.legend(fontsize=8)
    return _save(fig, path, title)


def plot_retrieval_heatmap(scores: dict, path, title: str | None = None):
    """Layer × head map of the F1 retrieval score, with a colour bar."""
    f1 = np.asarray(scores["f1"], dtype=float)
    n_layers, n_heads = f1.shape
    fig, ax = plt.subplots(figsize=(min(3 + 0.25 * n_heads, 14), min(2 + 0.2 * n_layers, 12)))
    im = ax.imshow(f1, aspect="auto", origin="lower", cmap="viridis", vmin=0, vmax=1)
    fig.colorbar(im, ax=ax, label="F1 retrieval score")
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(f"{_caption(scores)}; max {scores['max_f1']:.2f}", fontsize=9)
    return _save(fig, path, title)


def plot_masking(results: dict[str, dict], path, title: str | None = None):
    """Fig. 4: task score vs number of masked heads k, per model: the top-k heads by retrieval
    score (solid) and random heads (dashed: mean over draws, band: min to max); k = 0 is the
    unmasked baseline."""
    fig, ax = plt.subplots(figsize=(7, 4))
    if not results:
        empty_panel(ax, "no masking result among the inputs")
        return _save(fig, path, title)
    metrics = set()
    for i, (label, res) in enumerate(results.items()):
        color = f"C{i}"
        metrics.add(res["metric"])
        rows = [e for e in res["k"] if e["k"] > 0]
        ks = [0] + [e["k"] for e in rows]
        base = res["baseline"]
        top = np.array([base] + [e["top"] for e in rows], dtype=float)
        ax.plot(ks, top, "o-", color=color, label=f"{label}: top-k retrieval heads masked")
        mark_gaps(ax, ks, top, color)
        drawn = [e for e in rows if e["random"]]
        if drawn:
            rk = [0] + [e["k"] for e in drawn]
            ax.plot(
                rk,
                [base] + [e["random_mean"] for e in drawn],
                "s--",
                color=color,
                label=f"{label}: k random heads masked (mean)",
            )
            lo = [base] + [min(e["random"]) for e in drawn]
            hi = [base] + [max(e["random"]) for e in drawn]
            ax.fill_between(
                rk, lo, hi, color=color, alpha=0.15, lw=0, label=f"{label}: random, min to max"
            )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("masked heads k")
    ax.set_ylabel(f"score ({', '.join(sorted(metrics))})")
    handles, labels = legend_entries(ax)  # beside the panel: the curves stay clear
    ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path, title)
