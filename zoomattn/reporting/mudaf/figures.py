"""Figures of the MuDAF part beside ``retrieval_figures`` (Figs. 3/4): the head-count sweep
(Table 4), the target heads before/after (Figs. 5/6), the whole-layer effect (App. C) and the
retrieval heads of every model of the grid. Ours only: the paper's numbers stay in tables."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Rectangle

from zoomattn.reporting.common.plotting import (
    empty_panel,
    errorbar,
    mark_gaps,
    note_if_all_zero,
    panel_row,
    save,
    save_with_legend,
)
from zoomattn.reporting.common.studies import study_colour
from zoomattn.reporting.common.tables import SCORES

BASE_NAME = "base (no fine-tune)"
MODELS = ("base", "MuDAF", "Vanilla-SFT")  # Figs. 5/6 bars, in the paper's order


def head_sweep(t4: pd.DataFrame, rows: list[str], refs: pd.DataFrame, path, title: str):
    """Table 4 as a figure: score vs head count per benchmark (95% CI bars); reference rows
    (the base, MuDAF-weak) as horizontal lines."""
    benches = list(dict.fromkeys(t4["benchmark"]))
    fig, axes = panel_row(len(benches))
    for ax, b in zip(axes, benches, strict=False):
        s = t4[t4["benchmark"] == b].set_index("row")
        xs = [k for k, lab in enumerate(rows) if lab in s.index]
        errorbar(ax, xs, s.loc[[rows[k] for k in xs]], SCORES, marker="o", label="MuDAF (ours)")
        ref = refs[refs["benchmark"] == b]
        for i, r in enumerate(ref.itertuples()):
            ax.axhline(r.score, ls=(":", "--", "-.")[i % 3], color=f"C{i + 1}", label=r.row)
        ticks = [lab.removeprefix("n=").replace(" → ", "→").split(" (")[0] for lab in rows]
        ax.set_xticks(range(len(rows)), ticks, fontsize=8)
        ax.set_xlim(-0.5, len(rows) - 0.5)
        ax.set_xlabel("target heads n (asked→trained where clipped; 0 = Vanilla-SFT)")
        ax.set_ylabel(f"{b} score ×100 ({s['metric'].iloc[0]})")
        ax.set_title(b, fontsize=9)
    return save_with_legend(fig, axes, path, title)


def target_heads(df: pd.DataFrame, path, title: str):
    """Figs. 5/6: each target head's retrieval score in the base, after MuDAF and after
    Vanilla-SFT, one panel per selection (grouped bars); a missing score is a hollow marker."""
    groups = list(dict.fromkeys(df["cell"]))
    widths = [max(4.6, 0.45 * (df["cell"] == g).sum() + 1.5) for g in groups]
    fig, axes = plt.subplots(
        1, len(groups), figsize=(sum(widths) + 0.4, 4), squeeze=False, width_ratios=widths
    )
    axes = list(axes[0])
    for ax, g in zip(axes, groups, strict=True):
        s = df[df["cell"] == g]
        xs = np.arange(len(s))
        for i, (col, name) in enumerate(zip(("base", "mudaf", "vanilla_sft"), MODELS, strict=True)):
            label = BASE_NAME if name == "base" else name
            ax.bar(xs + (i - 1) * 0.27, s[col].fillna(0), 0.27, color=f"C{i}", label=label)
            mark_gaps(ax, xs + (i - 1) * 0.27, s[col], f"C{i}", label="no data (model missing)")
        note_if_all_zero(ax, s[["base", "mudaf", "vanilla_sft"]].to_numpy(), "retrieval score")
        ax.set_xticks(xs, s["target"], fontsize=7, rotation=45, ha="right")
        ax.set_xlim(-0.7, max(len(s), 4) - 0.3)
        ax.set_xlabel("target head (layer-head)")
        ax.set_ylabel("retrieval score (mean F1)")
        ax.set_ylim(0, 1.02)
        ax.set_title(g, fontsize=9)
    return save_with_legend(fig, axes, path, title)


def delta_maps(panels: list[tuple[str, np.ndarray, list]], path, title: str):
    """App. C: layer × head map of the retrieval-score change (model − base) per model, the
    selected heads outlined; one colour scale for all panels."""
    limit = max((np.nanmax(np.abs(d)) for _, d, _ in panels), default=1.0) or 1.0
    n_layers, n_heads = panels[0][1].shape
    w, h = min(max(3.6, 1.2 + 0.3 * n_heads), 9), min(max(2.6, 1.4 + 0.25 * n_layers), 10)
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(w * len(panels) + 1.2, h + 0.8),
        squeeze=False,
        layout="constrained",
    )
    for ax, (name, delta, selected) in zip(axes[0], panels, strict=True):
        im = ax.imshow(delta, aspect="auto", origin="lower", cmap="RdBu_r", vmin=-limit, vmax=limit)
        for layer, head in selected:
            box = Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, lw=1.5, ec="black")
            ax.add_patch(box)
        ax.set_xticks(range(n_heads))
        ax.set_yticks(range(n_layers))
        ax.tick_params(labelsize=7)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(name, fontsize=8)
    fig.colorbar(im, ax=list(axes[0]), label="Δ retrieval score (model − base)")
    fig.suptitle(title, fontsize=9)
    return save(fig, path)


def across_methods(df: pd.DataFrame, path, title: str):
    """Every model's retrieval heads: mean F1 of its base's top-5% heads and mean F1 over all
    heads (bars), max F1 (marker); the study in the label and the colour. A missing value is a
    hollow marker; all-zero bars are said to be zero."""
    n = len(df)
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.32 * n + 1.2)))
    ax.set_title(title, fontsize=9)
    if df.empty:
        empty_panel(ax, "no model has retrieval-head scores")
        return save(fig, path)
    ys = np.arange(n)[::-1]
    colours = [study_colour(s) for s in df["study"]]
    bars = (("top5_mean_f1", 0.2, 1.0, "base's top-5% heads"), ("mean_f1", -0.2, 0.4, "all heads"))
    for column, shift, alpha, name in bars:
        values = df[column].astype(float)
        ax.barh(ys + shift, values, 0.4, color=colours, alpha=alpha, label=f"{name}: mean F1")
        mark_gaps(ax, ys + shift, values, "black", horizontal=True)
    ax.plot(df["max_f1"], ys, "k|", ms=10, label="max F1")
    note_if_all_zero(ax, df[["top5_mean_f1", "mean_f1", "max_f1"]].to_numpy(), "retrieval score")
    ax.set_yticks(ys, [f"{s}: {m}" for s, m in zip(df["study"], df["model"], strict=True)])
    ax.tick_params(axis="y", labelsize=7)
    ax.set_xlim(0, 1.02)
    ax.set_xlabel("retrieval score (F1)")
    ax.set_ylabel("model (study: model id)")
    ax.legend(fontsize=7, loc="lower right")
    return save(fig, path)
