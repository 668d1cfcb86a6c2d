"""The figure parts of the LKG-RALM report: Fig. 6 (robustness curves) and Fig. 2 (head
patterns), each written as PNG with its table (CSV + Markdown) and the notes computed from it.

Ours and the paper's never share an axis: Fig. 6's published points get a panel of their own (the
paper's scale is 0 to 50 passages, ours a few), and the paper's Fig. 2 distribution is a bar of
its own, labelled as the paper's.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from zoomattn.reporting.common.plotting import empty_panel, legend_entries, mark_gaps, save
from zoomattn.reporting.common.tables import cell
from zoomattn.reporting.lkg import published as paper

CLASSES = ("edge", "uniform", "middle", "other")  # evaluation/head_patterns.py's order
CLASS_COLOURS = {"edge": "tab:blue", "uniform": "tab:orange", "middle": "tab:green"}
CLASS_COLOURS["other"] = "lightgrey"
BASE_NAME = "base (no fine-tune)"
SCORES = ["score", "ci_low", "ci_high"]


def _tick(axis: str, x: float) -> str:
    return f"k={x:g}" if axis == "passages" else f"{100 * x:g}%"


def _trend(axis: str, label: str, s: pd.DataFrame) -> str:
    """One model's curve in words: its ends, and the peak of the passage curve."""
    first, last = s.iloc[0], s.iloc[-1]
    if len(s) == 1:
        return f"{label}: {first.score:.1f} at {_tick(axis, first.x)} (its one point)"
    ends = (
        f"{first.score:.1f} at {_tick(axis, first.x)} → {last.score:.1f} at {_tick(axis, last.x)}"
    )
    if axis == "irrelevant":
        return f"{label}: {ends} (Δ {last.score - first.score:+.1f})"
    peak = s.loc[s["score"].idxmax()]
    return f"{label}: {ends} (peak {peak.score:.1f} at {_tick(axis, peak.x)})"


def _versus(axis: str, ref: str, other: str, s: pd.DataFrame) -> str:
    """Where ``ref``'s interval lies above, below or across ``other``'s, point by point."""
    a = s[s["row"] == ref].set_index("x")
    b = s[s["row"] == other].set_index("x")
    where: dict[str, list[str]] = {"above": [], "below": [], "overlapping": []}
    for x in a.index.intersection(b.index):
        p, q = a.loc[x], b.loc[x]
        key = (
            "above" if p.ci_low > q.ci_high else "below" if p.ci_high < q.ci_low else "overlapping"
        )
        where[key].append(_tick(axis, x))
    said = "; ".join(f"{k} at {', '.join(v)}" for k, v in where.items() if v)
    return f"{ref} vs {other} (95% intervals): {said or 'no common point'}"


def _stated(points: dict, unit: str) -> str:
    return "; ".join(
        f"{name} " + " → ".join(f"{y:.1f} at {x:g}{unit}" for x, y in pts)
        for name, pts in points.items()
    )


def fig6_section(long: pd.DataFrame, labels: list[str], rob: dict, out, caption: str):
    """Fig. 6a (score vs passages) and 6b (score vs irrelevant share): PNGs, robustness.csv/.md
    and the computed trends. Returns (Markdown, notes on what is missing)."""
    long.to_csv(out / "robustness.csv", index=False)
    n_irr = (rob.get("irrelevant") or {}).get("passages", "?")
    bench = rob.get("benchmark", "?")
    parts, notes = [f"### Fig. 6 data: {bench} by robustness set ({caption})\n"], []
    setups = (
        (
            "passages",
            "fig6a_passages",
            "Fig. 6a",
            "retrieved passages k (golden among them)",
            paper.FIG6A,
            paper.FIG6A_FLAT,
            paper.FIG6A_PEAK,
            "retrieved passages",
        ),
        (
            "irrelevant",
            "fig6b_irrelevant",
            "Fig. 6b",
            f"irrelevant share of {n_irr} passages (%)",
            paper.FIG6B,
            {},
            {},
            f"irrelevant share of {paper.FIG6B_PASSAGES} passages (%)",
        ),
    )
    for axis, name, fig, xlabel, pub, flat, peak, pub_xlabel in setups:
        unit = " passages" if axis == "passages" else "%"
        s = long[long["axis"] == axis]
        if s.empty:
            notes.append(f"{fig} skipped: no evaluation of ours on this axis.")
            parts.append(f"{notes[-1]}\n")
            continue
        shown = [lab for lab in labels if lab in set(s["row"])]
        plotted = s.assign(x=s["x"] * (100 if axis == "irrelevant" else 1))
        title = f"{fig}: {bench} score vs {xlabel} ({caption})"
        robustness(plotted, shown, xlabel, pub, flat, peak, pub_xlabel, out / f"{name}.png", title)
        xs = sorted(set(s["x"]))
        wide = pd.DataFrame(index=pd.Index(shown, name="row"))
        for x in xs:
            at = s[s["x"] == x].set_index("row")
            wide[_tick(axis, x)] = [
                cell(*at.loc[lab, SCORES]) if lab in at.index else "–" for lab in shown
            ]
        computed = [_trend(axis, lab, s[s["row"] == lab].sort_values("x")) for lab in shown]
        computed += [_versus(axis, shown[0], lab, s) for lab in shown[1:]]
        parts += [
            f"#### {fig}: {xlabel}\n",
            wide.to_markdown(disable_numparse=True) + "\n",
            "Computed: "
            + "; ".join(computed)
            + f". Paper (stated points): {_stated(pub, unit)}.\n",
            f"![{fig}: ours left, published points right]({name}.png)\n",
        ]
    parts.append(paper.FIG6_NOTE + "\n")
    md = "\n".join(parts)
    (out / "robustness.md").write_text(md)
    return md, notes


def patterns_frame(patterns: list[dict], base: str, names: dict[str, str]):
    """One line per head-pattern file (the CSV: every model given), shares in %: the base
    first, then this study's models (``names``: model -> label, in order), then the rest as
    given. Returns (frame, notes on what is missing; the last says why the frame is empty)."""
    recs = []
    for p in patterns:
        m = p["model"]
        rec = {"model": m, "study": "base" if m == base else "lkg" if m in names else "other"}
        rec |= {"row": names.get(m, "")} | {k: p.get(k) for k in ("examples", "layers", "heads")}
        for key, suffix in (("distribution", "%"), ("example_distribution", "% (examples)")):
            rec |= {f"{c} {suffix}": 100 * (p.get(key) or {}).get(c, np.nan) for c in CLASSES}
        rec |= {f"mass {k} %": 100 * v for k, v in (p.get("mean_mass") or {}).items()}
        recs.append(rec | {"middle heads": len(p.get("middle_heads") or [])})
    order = {m: i for i, m in enumerate(names)}
    frame = pd.DataFrame(recs)
    if len(frame):
        rank = frame["model"].map(order).fillna(len(order))
        frame = frame.iloc[np.argsort(rank.to_numpy(), kind="stable")].reset_index(drop=True)
    lacking = [m for m in names if m not in {p["model"] for p in patterns}]
    notes = [f"Head patterns missing for: {', '.join(lacking)}."] if lacking else []
    if not patterns:
        notes.append("Fig. 2 skipped: no head-pattern file among the inputs.")
    return frame, notes


def fig2_section(frame: pd.DataFrame, base: dict | None, cfg: dict, out, caption: str):
    """Fig. 2: every shown model's class distribution beside the paper's, and the base's class
    map; head_patterns.csv holds every model given. Returns (Markdown, notes)."""
    frame.to_csv(out / "head_patterns.csv", index=False)
    shown = frame[frame["study"] != "other"]
    bars = [
        (r["row"] or r["model"], {c: r[f"{c} %"] for c in CLASSES}, False)
        for _, r in shown.iterrows()
    ]
    paper_dist = paper.FIG2 | {"other": 100 - sum(paper.FIG2.values())}
    bars.append((paper.FIG2_LABEL, paper_dist, True))
    notes = [] if base else ["Fig. 2's class map skipped: no head patterns of the base."]
    where = f"{cfg.get('examples', '?')} examples of {cfg.get('benchmark', '?')}"
    map_title = ""
    if base:
        total = (base.get("layers") or 0) * (base.get("heads") or 0)
        fused = len(base.get("middle_heads") or [])
        map_title = (
            f"base ({base['model']}): each head's class; middle = the heads the mask acts on "
            f"({fused} of {total})"
        )
    title = f"Fig. 2: share of heads per attention pattern of the last prompt token, {where} "
    title += f"({caption})"
    head_patterns(
        bars,
        base.get("head_class") if base else None,
        map_title,
        out / "fig2_head_patterns.png",
        title,
    )
    cols = ["model", "row", "examples", *(f"{c} %" for c in CLASSES)]
    cols += [f"{c} % (examples)" for c in CLASSES] + ["middle heads"]
    table = shown.reindex(columns=cols).astype(object)
    table.loc[len(table)] = [paper.FIG2_LABEL, "", "2000", *(paper_dist[c] for c in CLASSES)] + [
        "–"
    ] * 5
    text = table.map(lambda v: f"{v:.2f}" if isinstance(v, float) else str(v))
    base_line = ""
    if base is not None and len(shown) and shown.iloc[0]["study"] == "base":
        b = shown.iloc[0]
        base_line = (
            f"Computed: the base's heads are {b['edge %']:.1f}% edge, {b['uniform %']:.1f}% "
            f"uniform, {b['middle %']:.1f}% middle-focused, {b['other %']:.1f}% other (paper: "
            f"78, 5.37, 6 and 10.63 unstated). "
        )
    md = (
        f"### Fig. 2: head patterns ({where}; {caption})\n\n"
        "Shares of heads by their most frequent class, and of (example, head) rows per class "
        f"(examples); the paper's row (§3.2) has no per-example shares. {base_line}"
        f"{paper.FIG2_NOTE} head_patterns.csv holds every model given, other studies' too.\n\n"
        + text.to_markdown(index=False, disable_numparse=True)
        + "\n\n![Fig. 2: pattern shares, ours and the paper's; the base's class map]"
        "(fig2_head_patterns.png)\n"
    )
    (out / "head_patterns.md").write_text(md)
    return md, notes


def robustness(
    ours: pd.DataFrame,
    labels: list[str],
    xlabel: str,
    published: dict[str, list[tuple[float, float]]],
    flat: dict[str, float],
    peak: dict[str, float],
    published_xlabel: str,
    path,
    title: str,
):
    """Left: our score vs ``x`` per model row, the 95% interval as a band. Right: the points the
    paper's text states (markers joined by dotted lines), a flat system and a stated peak whose
    x is unknown as horizontal lines."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, label in enumerate(labels):
        s = ours[ours["row"] == label].sort_values("x")
        if s.empty:
            continue
        colour = f"C{i}"
        left.plot(s["x"], s["score"], "o-", color=colour, label=label)
        left.fill_between(s["x"], s["ci_low"], s["ci_high"], color=colour, alpha=0.2)
        mark_gaps(left, s["x"], s["score"], colour)
    left.set_title("ours (95% CI band)", fontsize=9)
    if left.has_data():
        left.set_xlabel(xlabel)
        left.set_ylabel(f"score ×100 ({ours['metric'].iloc[0]})")
        left.legend(*legend_entries(left), fontsize=7)
    else:
        empty_panel(left, "no evaluation of ours on this axis")
    names = list(published) + [n for n in (*flat, *peak) if n not in published]
    for name in names:
        colour = f"C{names.index(name)}"
        if name in published:
            xs, ys = zip(*published[name], strict=True)
            right.plot(xs, ys, "s:", color=colour, label=f"{name} (stated points)")
            for x, y in published[name]:
                right.annotate(
                    f"{y:.1f}", (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points"
                )
        if name in flat:
            right.axhline(flat[name], ls="--", color=colour, label=f"{name} ≈ {flat[name]:g}")
        if name in peak:
            right.axhline(
                peak[name], ls=":", lw=1, color=colour, label=f"{name} {peak[name]:g}: x not stated"
            )
    right.margins(x=0.1)
    right.set_xlabel(published_xlabel)
    right.set_ylabel("EM ×100 (published)")
    right.set_title("PUBLISHED: points the paper's text states; not our runs", fontsize=9)
    right.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    return save(fig, path)


def head_patterns(
    bars: list[tuple[str, dict[str, float], bool]],
    class_map: list[list[str]] | None,
    map_title: str,
    path,
    title: str,
):
    """Stacked bars: each model's share of heads per class (%); a bar flagged ``True`` is the
    paper's, its unstated remainder hatched. Beside it, the base's layer × head class map."""
    n_panels = 2 if class_map else 1
    fig, axes = plt.subplots(
        1,
        n_panels,
        figsize=(max(6.0, 0.8 * len(bars) + 2.5) + 5 * (n_panels - 1), 4.8),
        squeeze=False,
        width_ratios=[max(1.0, 0.15 * len(bars)), 1][:n_panels],
    )
    ax = axes[0][0]
    xs = np.arange(len(bars))
    bottom = np.zeros(len(bars))
    for cls in CLASSES:
        values = np.array([dist.get(cls, 0.0) for _, dist, _ in bars])
        hatch = ["//" if paper and cls == "other" else "" for _, _, paper in bars]
        for x, v, b, h in zip(xs, values, bottom, hatch, strict=True):
            ax.bar(x, v, 0.7, bottom=b, color=CLASS_COLOURS[cls], hatch=h, edgecolor="white")
        bottom += values
    for x, (_, dist, _) in zip(xs, bars, strict=True):
        ax.text(x, 101, f"mid {dist.get('middle', 0):.1f}%", ha="center", fontsize=6)
    ax.set_xticks(xs, [label for label, _, _ in bars], fontsize=7, rotation=30, ha="right")
    ax.set_ylim(0, 108)
    ax.set_xlabel("model")
    ax.set_ylabel("share of heads (%)")
    ax.set_title("heads by pattern (a head's most frequent class)", fontsize=9)
    handles = [Patch(color=CLASS_COLOURS[c], label=c) for c in CLASSES]
    handles.append(Patch(facecolor="lightgrey", hatch="//", label="paper: not stated"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if class_map:
        ax = axes[0][1]
        codes = np.array([[CLASSES.index(c) for c in layer] for layer in class_map])
        cmap = ListedColormap([CLASS_COLOURS[c] for c in CLASSES])
        ax.imshow(codes, aspect="auto", origin="lower", cmap=cmap, vmin=-0.5, vmax=3.5)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_xticks(range(codes.shape[1]))
        ax.set_yticks(range(codes.shape[0]))
        ax.tick_params(labelsize=6)
        ax.set_title(map_title, fontsize=9)
    fig.suptitle(title, fontsize=9)
    return save(fig, path)
