"""Figures of the attention-rectification part. Ours and the paper's are never on one panel: the
published Table 1 curves get a figure of their own, labelled as published at paper scale."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from zoomattn.reporting.common.plotting import (
    empty_panel,
    errorbar,
    panel_row,
    save,
    save_with_legend,
)
from zoomattn.reporting.common.tables import SCORES
from zoomattn.reporting.rectification import published as paper

BASE_NAME = "base (no fine-tune)"  # the "vanilla" row; not to be confused with the placement


def _short(label: str) -> str:
    """A ξ row label as a tick: "ξ=3" -> "3", "ξ=auto (=2.95)" -> "auto\n(=2.95)"."""
    return label.removeprefix("ξ=").replace(" (", "\n(")


def xi_curves(t1: pd.DataFrame, xi_rows: list[str], placements: list[str], path, title: str):
    """Table 1 as a figure: per benchmark, score vs ξ per placement (95% CI bars); LoRA dashed and
    the base model dotted, in the placement's colour."""
    benches = list(dict.fromkeys(t1["benchmark"]))
    fig, axes = panel_row(len(benches))
    for ax, b in zip(axes, benches, strict=False):
        sub = t1[t1["benchmark"] == b]
        for i, p in enumerate(placements):
            s = sub[sub["placement"] == p].set_index("row")
            color = f"C{i}"
            xs = [k for k, lab in enumerate(xi_rows) if lab in s.index]
            if xs:
                ys = s.loc[[xi_rows[k] for k in xs]]
                label = f"rectify (g = max), {p}"
                errorbar(ax, xs, ys, SCORES, marker="o", color=color, label=label)
            for ref, name, ls in (("LoRA", "LoRA", "--"), ("vanilla", BASE_NAME, ":")):
                if ref in s.index:
                    ax.axhline(
                        s.loc[ref, "score"], ls=ls, lw=1.2, color=color, label=f"{name}, {p}"
                    )
        ax.set_xticks(range(len(xi_rows)), [_short(lab) for lab in xi_rows], fontsize=8)
        ax.set_xlim(-0.5, len(xi_rows) - 0.5)
        ax.set_xlabel("ξ")
        ax.set_ylabel(f"{b} score ×100 ({sub['metric'].iloc[0]})")
        ax.set_title(f"{b}, query placement per line", fontsize=9)
    return save_with_legend(fig, axes, path, title, legend_cols=len(placements) or 1)


def published_curves(mapped: list[tuple[str, str]], placements: list[str], path):
    """The published Table 1 for the paper columns our benchmarks map to, one panel each."""
    columns = list(dict.fromkeys(col for _, col in mapped))
    fig, axes = panel_row(len(columns))
    shown = [p for p in paper.PLACEMENTS if p in placements] or list(paper.PLACEMENTS)
    for ax, col in zip(axes, columns, strict=False):
        ours = ", ".join(b for b, c in mapped if c == col)
        for i, p in enumerate(paper.PLACEMENTS):
            if p not in shown:
                continue
            color = f"C{placements.index(p)}" if p in placements else f"C{i}"
            ys = [paper.lookup(r, col, p) for r in paper.XI_ROWS]
            ax.plot(range(len(ys)), ys, "s-", color=color, label=f"published rectify, {p}")
            ax.axhline(paper.lookup("LoRA", col, p), ls="--", color=color, label=f"LoRA, {p}")
            ax.axhline(
                paper.lookup("vanilla", col, p), ls=":", color=color, label=f"{BASE_NAME}, {p}"
            )
        ax.set_xticks(range(len(paper.XI_ROWS)), [_short(r) for r in paper.XI_ROWS])
        ax.set_xlabel("ξ")
        ax.set_ylabel(f"{col} (published, ×100)")
        ax.set_title(f"PUBLISHED {col} (ours: {ours})", fontsize=9)
    title = f"{paper.SOURCE}; not our runs"
    return save_with_legend(fig, axes, path, title, legend_cols=len(shown))


def answer_gap(gaps: pd.DataFrame, rows: list[str], placements: list[str], path, title: str):
    """Fig. 3 analogue: answer-token attention gap (× 1000) per model row, bars per placement."""
    benches = list(dict.fromkeys(gaps["benchmark"]))
    fig, axes = panel_row(len(benches), width=max(4.6, 0.75 * len(rows) + 1.5))
    width = 0.8 / max(len(placements), 1)
    cols = ("answer_gap", "answer_gap_ci_low", "answer_gap_ci_high")
    for ax, b in zip(axes, benches, strict=False):
        sub = gaps[gaps["benchmark"] == b]
        for i, p in enumerate(placements):
            s = sub[sub["placement"] == p].set_index("row")
            xs = [k for k, lab in enumerate(rows) if lab in s.index]
            if not xs:
                continue
            ys = s.loc[[rows[k] for k in xs]]
            pos = np.array(xs) + (i - (len(placements) - 1) / 2) * width
            ax.bar(pos, ys["answer_gap"], width, color=f"C{i}", label=f"placement {p}")
            errorbar(ax, pos, ys, cols, ls="none", color="black", elinewidth=1)
        ax.axhline(0, color="grey", lw=0.8)
        names = [
            BASE_NAME if r == "vanilla" else _short(r) if r.startswith("ξ") else r for r in rows
        ]
        ax.set_xticks(range(len(rows)), names, fontsize=7, rotation=30, ha="right")
        ax.set_xlabel("model (numbers: ξ)")
        ax.set_ylabel("attn(answer) − attn(other), ×1000")
        ax.set_title(b, fontsize=9)
    return save_with_legend(fig, axes, path, title, legend_cols=len(placements) or 1)


def g_variants(gs: pd.DataFrame, lora: pd.DataFrame, rows: list[str], placements, path, title):
    """Fig. 4 analogue: score per g variant at one ξ (95% CI), LoRA dashed per placement."""
    benches = list(dict.fromkeys(gs["benchmark"]))
    fig, axes = panel_row(len(benches))
    step = 0.25 / max(len(placements) - 1, 1)
    for ax, b in zip(axes, benches, strict=False):
        sub = gs[gs["benchmark"] == b]
        for i, p in enumerate(placements):
            color = f"C{i}"
            s = sub[sub["placement"] == p].set_index("row")
            xs = [k for k, lab in enumerate(rows) if lab in s.index]
            if xs:
                pos = np.array(xs) + (i - (len(placements) - 1) / 2) * step
                ys = s.loc[[rows[k] for k in xs]]
                style = {"marker": "o", "ls": "none", "color": color}
                errorbar(ax, pos, ys, SCORES, label=f"rectify, {p}", **style)
            ref = lora[(lora["benchmark"] == b) & (lora["placement"] == p)]
            if len(ref):
                ax.axhline(ref["score"].iloc[0], ls="--", color=color, label=f"LoRA, {p}")
        ax.set_xticks(range(len(rows)), rows)
        ax.set_xlim(-0.5, len(rows) - 0.5)
        ax.set_xlabel("g")
        ax.set_ylabel(f"{b} score ×100 ({sub['metric'].iloc[0]})")
        ax.set_title(b, fontsize=9)
    return save_with_legend(fig, axes, path, title, legend_cols=len(placements) or 1)


def flatten(nested) -> np.ndarray:
    """Margins of any nesting ([example][layer][head], ragged or not) as one float array."""
    try:
        return np.asarray(nested, dtype=float).ravel()
    except (TypeError, ValueError):
        out: list[float] = []
        stack = [nested]
        while stack:
            x = stack.pop()
            if isinstance(x, list | tuple):
                stack.extend(x)
            elif x is not None:
                out.append(float(x))
        return np.asarray(out, dtype=float)


def margin(margin: dict, xis: list[float], path, title: str):
    """Fig. 5 analogue: the base model's p90 − p10 score margins, with the median and 2ξ for
    every configured ξ (ξ covers the margin when 2ξ reaches it); per-layer medians beside."""
    values = flatten(margin.get("margins", []))
    values = values[np.isfinite(values)]
    per_layer = margin.get("per_layer_median") or []
    fig, (hist, layers) = plt.subplots(
        1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [2.2, 1]}
    )
    hist.hist(values, bins=min(60, max(10, len(values) // 20)), color="C0", alpha=0.7)
    median = margin.get("median", float(np.median(values)) if len(values) else math.nan)
    hist.axvline(median, color="black", lw=2, label=f"median margin {median:.2f}")
    for i, xi in enumerate(sorted(set(xis))):
        hist.axvline(2 * xi, ls="--", color=f"C{i + 1}", label=f"2ξ = {2 * xi:g} (ξ = {xi:g})")
    xi_auto = margin.get("xi_auto")
    if xi_auto is not None:
        hist.axvline(
            2 * xi_auto, ls=":", lw=2, color="magenta", label=f"2·ξ_auto = {2 * xi_auto:g}"
        )
    hist.set_xlabel("p90 − p10 of the last token's pre-softmax scores (per example, layer, head)")
    hist.set_ylabel("count")
    auto = "–" if xi_auto is None else f"{xi_auto:g}"
    hist.set_title(
        f"score margins ({len(values)} values); xi_auto = median / 2 = {auto}", fontsize=9
    )
    hist.legend(fontsize=7)
    layers.set_title("per-layer median margin", fontsize=9)
    if per_layer:
        layers.bar(range(len(per_layer)), per_layer, color="C0")
        layers.axhline(median, color="black", lw=1, label="overall median")
        layers.set_xlabel("layer")
        layers.set_ylabel("median margin")
        layers.set_xticks(range(len(per_layer)))
        layers.legend(fontsize=7)
    else:
        empty_panel(layers, "the margin file has no per-layer medians")
    fig.suptitle(title, fontsize=9)
    return save(fig, path)
