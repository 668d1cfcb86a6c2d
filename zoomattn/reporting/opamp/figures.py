"""Figures of the OpAmp part. Each has our run on the left and, where the paper gives numbers, the
published values on a separate panel on the right, labelled as paper scale."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd

from zoomattn.reporting.common.plotting import (
    empty_panel,
    gap_legend,
    legend_entries,
    mark_gaps,
    save,
)
from zoomattn.reporting.opamp import published


def ksweep(t3: pd.DataFrame, ks: list[str], path, caption: str):
    """Table 3 as a figure: average score across benchmarks vs K (``ks``: the OpAmp rows of
    ``t3``, by K), QLoRA as a reference line."""
    fig, (ours, paper) = plt.subplots(1, 2, figsize=(10, 3.8))
    if ks:
        line, *_ = ours.plot(range(len(ks)), [t3.loc[k, "Avg"] for k in ks], "o-", label="OpAmp")
        mark_gaps(ours, *line.get_data(), line.get_color())
        for ref, style in (("QLoRA", "--"), ("base (no fine-tune)", ":")):
            if ref in t3.index:
                ours.axhline(t3.loc[ref, "Avg"], ls=style, color="grey", label=ref)
        ours.set_xticks(range(len(ks)), ks)
        ours.set_xlabel("OpAmp fine-tune's K")
        ours.set_ylabel("average score over benchmarks")
        ours.legend(*legend_entries(ours), fontsize=8)
    else:
        empty_panel(ours, "no OpAmp (K=…) row in Table 3")
    ours.set_title(f"ours ({caption})", fontsize=9)
    pk = [k for k in published.TABLE3 if k.startswith("K=")]
    paper.plot(
        range(len(pk)), [published.TABLE3[k][0] for k in pk], "o-", color="C1", label="OpAmp"
    )
    paper.axhline(published.TABLE3["QLoRA"][0], ls="--", color="grey", label="QLoRA")
    paper.set_xticks(range(len(pk)), pk)
    paper.set_xlabel("OpAmp fine-tune's K")
    paper.set_ylabel("average score (published)")
    paper.set_title(published.SOURCE, fontsize=8)
    paper.legend(fontsize=8)
    return save(fig, path)


def noise_curves(df: pd.DataFrame, benchmark: str, paper_name: str, path, caption: str):
    """Table 4 as a figure: score vs noise ratio per model (in the frame's order: the report's
    rows), with 95% intervals."""
    sub = df[(df["benchmark"] == benchmark) & (df["subset"] == "")]
    fig, (ours, paper) = plt.subplots(1, 2, figsize=(10, 3.8))
    for lab in dict.fromkeys(sub["label"]):
        s = sub[sub["label"] == lab].sort_values("noise")
        bars = ours.errorbar(
            s["noise"],
            s["score"],
            yerr=[s["score"] - s["ci_low"], s["ci_high"] - s["score"]],
            marker="o",
            capsize=3,
            label=lab,
        )
        mark_gaps(ours, s["noise"], s["score"], bars.lines[0].get_color())
    if sub.empty:
        empty_panel(ours, f"no evaluation of ours on {benchmark}")
    else:
        ours.set_xlabel("noise ratio")
        ours.set_ylabel(f"{benchmark} score")
        ours.legend(*legend_entries(ours), fontsize=7)
    ours.set_title(f"ours ({caption})", fontsize=9)
    for lab, vals in published.TABLE4[paper_name].items():
        paper.plot(published.TABLE4["noise_ratios"], vals, marker="o", label=lab)
    paper.set_xlabel("noise ratio")
    paper.set_ylabel(f"{paper_name} score (published)")
    paper.set_title(f"{paper_name}: {published.SOURCE}", fontsize=8)
    paper.legend(fontsize=7)
    return save(fig, path)


def golden_share(attn: dict[str, dict], labels: list[str], path, title: str):
    """Fig. 5/6 analogue: golden document's share by its position, noise documents' share. A
    position without a value (no example put its golden document there) gets a hollow marker."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    some = next(iter(attn.values()))
    pos = [p["position"] for p in some["by_position"]]
    panels = (
        (left, "golden_share", "o", "no example has its golden document here"),
        (right, "noise_share", ".", "no noise document here"),
    )
    for lab in labels:
        rows = attn[lab]["by_position"]
        for ax, key, marker, missing in panels:
            values = [math.nan if p[key] is None else p[key] for p in rows]
            line, *_ = ax.plot(pos, values, marker=marker, label=lab)
            mark_gaps(ax, pos, values, line.get_color(), label=f"no data: {missing}")
    for ax, *_ in panels:
        if not labels:
            empty_panel(ax, "no model of this figure has an attention file")
            continue
        ax.axhline(some["uniform_share"], ls=":", color="grey", label="uniform")
        ax.set_xlabel("document position")
        ax.set_ylabel("attention share (normalised over documents)")
        ax.set_xticks(pos)
    if labels:
        left.legend(*legend_entries(left), fontsize=7)
        gap_legend(right, fontsize=7)
    left.set_title("golden document, by its position", fontsize=9)
    right.set_title("noise documents, by position", fontsize=9)
    fig.suptitle(title, fontsize=9)
    return save(fig, path)
