"""Attention diagnostics across methods: one table and four figures over every model of the grid.

Inputs are the evaluation modules' JSON, each with its ``"model"``: golden attention share
(``attention_share.golden_attention``), eval metric files (``answer_gap`` from
``rectification.answer_gap``), retrieval heads (``retrieval_heads.head_scores``) and head patterns
(``head_patterns.head_patterns``). ``models`` maps model id -> {"study", "label", "seed"}; files of
models outside it are ignored, and a model without a file gets NaN (its figure panel is skipped).

Retrieval-head strength is the mean F1 of the model's own top 5% heads by F1 (at least one head;
MuDAF's retrieval heads are the top ~5%), beside the max F1 and the mean F1 over all heads. Figures
aggregate a (study, label) cell over its seeds: mean, with the seeds' min..max as band/bar.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from zoomattn.reporting.common.html_tables import write_table_html
from zoomattn.reporting.common.plotting import legend_entries, mark_gaps, note_if_all_zero, save
from zoomattn.reporting.common.studies import STUDY_ORDER, study_colour, study_rank
from zoomattn.splits import Split

CLASSES = ("edge", "uniform", "middle", "other")  # as evaluation.head_patterns.CLASSES
TOP_SHARE = 0.05  # retrieval-head strength: mean F1 of the top 5% heads by F1
CELL = ["study", "label"]


def _by_model(files: list[dict]) -> dict[str, dict]:
    return {f["model"]: f for f in files if isinstance(f, dict) and "model" in f}


def _ordered(models: dict[str, dict]) -> list[str]:
    """Model ids by study (``STUDY_ORDER``, unknown studies last), then in ``models``' order."""
    return sorted(models, key=lambda m: study_rank(models[m]["study"]))


def top_share_mean_f1(f1) -> float:
    """Mean F1 of the top ``TOP_SHARE`` of heads by F1 (at least one head)."""
    flat = np.sort(np.asarray(f1, dtype=float).ravel())[::-1]
    return float(flat[: max(1, math.ceil(TOP_SHARE * flat.size))].mean()) if flat.size else math.nan


def pattern_shares(p: dict) -> dict[str, float]:
    """Share of heads per class: the file's ``distribution``, else counted from ``head_class``."""
    if p.get("distribution"):
        return {c: float(p["distribution"].get(c, 0.0)) for c in CLASSES}
    called = [c for layer in p.get("head_class", []) for c in layer]
    return {c: called.count(c) / len(called) if called else math.nan for c in CLASSES}


def noise_ratio(e: dict) -> float | None:
    """The eval's noise ratio: its ``noise_ratio``, else read from a split named ``r<ratio>``."""
    if e.get("noise_ratio") is not None:
        return float(e["noise_ratio"])
    try:
        return Split.parse(str(e.get("split", ""))).noise_ratio
    except ValueError:  # no split name
        return None


def _gap_evals(models: dict[str, dict], evals: list[dict]) -> pd.DataFrame:
    """One row per eval that has an answer gap and a known model."""
    rows = [
        {
            "model": e["model"],
            **{k: models[e["model"]][k] for k in ("study", "label", "seed")},
            "noise_ratio": noise_ratio(e),
            "placement": e.get("placement") or e.get("split"),
            "answer_gap": float(e["answer_gap"]),
            "ci_low": e.get("answer_gap_ci_low"),
            "ci_high": e.get("answer_gap_ci_high"),
        }
        for e in evals
        if e.get("answer_gap") is not None and e.get("model") in models
    ]
    cols = ["model", "study", "label", "seed", "noise_ratio", "placement", "answer_gap"]
    df = pd.DataFrame(rows, columns=[*cols, "ci_low", "ci_high"])
    return df.astype({"ci_low": float, "ci_high": float})


def diagnostics_table(models, attention, evals, heads, patterns) -> pd.DataFrame:
    """One row per model: golden share, answer gap, retrieval-head strength, head patterns."""
    att, rh, hp = _by_model(attention), _by_model(heads), _by_model(patterns)
    gaps = _gap_evals(models, evals).groupby("model")["answer_gap"]
    gap_mean, gap_n = gaps.mean().to_dict(), gaps.size().to_dict()
    rows = []
    for m in _ordered(models):
        a, h, p = att.get(m, {}), rh.get(m), hp.get(m)
        f1 = np.asarray(h["f1"], dtype=float) if h and h.get("f1") else np.array([])
        shares = pattern_shares(p) if p else {}
        rows.append(
            {
                "model": m,
                **{k: models[m].get(k) for k in ("study", "label", "seed")},
                "mean_golden_share": a.get("mean_golden_share", math.nan),
                "golden_is_top": a.get("golden_is_top", math.nan),
                "common_answer_gap": _num(a.get("answer_gap")),  # the attention set's
                "answer_gap": gap_mean.get(m, math.nan),
                "answer_gap_evals": gap_n.get(m, 0),
                "max_f1": float(f1.max()) if f1.size else math.nan,
                "top5_mean_f1": top_share_mean_f1(f1),
                "mean_f1": float(f1.mean()) if f1.size else math.nan,
                **{f"share_{c}": shares.get(c, math.nan) for c in CLASSES},
            }
        )
    return pd.DataFrame(rows).astype({"seed": "Int64"}) if rows else pd.DataFrame(rows)


def _num(value) -> float:
    return math.nan if value is None else float(value)


def _cell_name(study: str, label: str, n: int) -> str:
    return f"{study}: {label}" + (f" (mean of {n} seeds)" if n > 1 else "")


def _by_cell(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """Mean, min and max over a cell's models (seeds) of each column, in table order."""
    agg = {f"{c}{s}": (c, f) for c in cols for s, f in (("", "mean"), ("_min", "min"))}
    agg |= {f"{c}_max": (c, "max") for c in cols} | {"n_seeds": ("model", "size")}
    return df.groupby(CELL, sort=False, as_index=False).agg(**agg)


def golden_share_table(models: dict[str, dict], attention: list[dict]) -> pd.DataFrame:
    """Golden share by document position per (study, label) of every model with an attention
    file: mean, min, max over seeds."""
    rows = [
        {"model": f["model"], **{k: models[f["model"]][k] for k in CELL}}
        | {"position": b["position"], "golden_share": b.get("golden_share")}
        | {"uniform_share": f.get("uniform_share")}
        for f in attention
        if f.get("model") in models
        for b in f.get("by_position", [])
    ]
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame(rows).astype({"golden_share": float, "uniform_share": float})
    df = df.sort_values("study", key=lambda s: s.map(study_rank), kind="stable")
    return df.groupby([*CELL, "position"], sort=False, as_index=False).agg(
        golden_share=("golden_share", "mean"),
        share_min=("golden_share", "min"),
        share_max=("golden_share", "max"),
        n_seeds=("model", "nunique"),
        uniform_share=("uniform_share", "mean"),
    )


def _legend_outside(ax) -> None:
    handles, labels = legend_entries(ax)
    if labels:
        kw = {"fontsize": 7, "loc": "upper left", "bbox_to_anchor": (1.01, 1), "frameon": False}
        ax.legend(handles, labels, **kw)


def _save(fig, path: Path, title: str):
    fig.suptitle(title, fontsize=10)
    return save(fig, path)


def plot_golden_share(df: pd.DataFrame, path: Path):
    order = ("leaderboard", *[s for s in STUDY_ORDER if s not in ("base", "leaderboard")])
    panels = [s for s in order if (df["study"] == s).any()]
    cols = min(2, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(8.5 * cols, 4.6 * rows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, study in zip(axes.flat, panels, strict=False):
        for i, ((s, label), c) in enumerate(
            df[df["study"].isin([study, "base"])].groupby(CELL, sort=False)
        ):
            base = s == "base"
            name = _cell_name(s, label, int(c["n_seeds"].max()))
            cycle = i // 10 % 3  # past 10 lines colours repeat: change the line and marker too
            kw = dict(color=f"C{i % 10}", ls=("-", "-.", ":")[cycle], marker="osd"[cycle], ms=3)
            kw = dict(color="grey", ls="--") if base else kw
            ax.plot(c["position"], c["golden_share"], label=name, **kw)
            mark_gaps(ax, c["position"], c["golden_share"], kw["color"])
            if c["n_seeds"].max() > 1:
                ax.fill_between(
                    c["position"], c["share_min"], c["share_max"], alpha=0.15, color=kw["color"]
                )
        ax.axhline(df["uniform_share"].mean(), color="k", ls=":", lw=1, label="uniform share")
        ax.set_xticks(sorted(set(df["position"])))
        ax.set_xlabel("golden document position")
        ax.set_ylabel("golden document's attention share")
        ax.set_title(f"{study} models (band: min..max over seeds)", fontsize=9)
        _legend_outside(ax)
    return _save(fig, path, "Golden attention share by document position")


def answer_gap_tables(models: dict[str, dict], evals: list[dict]) -> pd.DataFrame:
    """Leaderboard: gap per (label, noise ratio), mean over seeds of each seed's mean over evals;
    rectification: gap per (label, eval placement), mean over evals. ``ci_low``/``ci_high``: mean
    of the per-eval CI bounds; ``seed_min``/``seed_max``: range of the seeds' means."""
    g = _gap_evals(models, evals)
    lead = g[(g["study"] == "leaderboard") & g["noise_ratio"].notna()]
    keys = ["label", "noise_ratio"]
    seeds = lead.groupby([*keys, "model"], sort=False, as_index=False)[
        ["answer_gap", "ci_low", "ci_high"]
    ].mean()
    lead = seeds.groupby(keys, sort=False, as_index=False).agg(
        answer_gap=("answer_gap", "mean"),
        ci_low=("ci_low", "mean"),
        ci_high=("ci_high", "mean"),
        seed_min=("answer_gap", "min"),
        seed_max=("answer_gap", "max"),
        n_seeds=("model", "size"),
    )
    rect = g[g["study"] == "rectification"]
    rect = rect.groupby(["label", "placement"], sort=False, as_index=False, dropna=False).agg(
        answer_gap=("answer_gap", "mean"),
        ci_low=("ci_low", "mean"),
        ci_high=("ci_high", "mean"),
        n_seeds=("model", "nunique"),
    )
    return pd.concat(
        [lead.assign(study="leaderboard"), rect.assign(study="rectification")], ignore_index=True
    )


def _yerr(s: pd.DataFrame) -> np.ndarray:
    """CI bounds where every eval had them, else the seeds' min..max."""
    lo, hi = s["ci_low"], s["ci_high"]
    if lo.isna().any() or hi.isna().any():
        lo, hi = s.get("seed_min", s["answer_gap"]), s.get("seed_max", s["answer_gap"])
    gap = s["answer_gap"]
    return np.nan_to_num(np.vstack([gap - lo, hi - gap]).clip(min=0))


def plot_answer_gap(df: pd.DataFrame, path: Path):
    panels = [s for s in ("leaderboard", "rectification") if (df["study"] == s).any()]
    fig, axes = plt.subplots(1, len(panels), figsize=(8.5 * len(panels), 4.6), squeeze=False)
    for ax, study in zip(axes[0], panels, strict=True):
        sub = df[df["study"] == study]
        if study == "leaderboard":
            groups = list(sub.groupby("label", sort=False))
            for i, (label, s) in enumerate(groups):
                s = s.sort_values("noise_ratio")
                dodge = (i - (len(groups) - 1) / 2) * 0.006  # error bars side by side
                name = f"{label} ({int(s['n_seeds'].max())} seeds)"
                bars = ax.errorbar(
                    s["noise_ratio"] + dodge,
                    s["answer_gap"],
                    _yerr(s),
                    marker="o",
                    capsize=3,
                    label=name,
                )
                mark_gaps(ax, s["noise_ratio"] + dodge, s["answer_gap"], bars.lines[0].get_color())
            ax.set_xticks(sorted(set(sub["noise_ratio"])))
            ax.set_xlabel("noise ratio")
            ax.set_title(
                "leaderboard: mean over seeds (bars: 95% CI, else seeds' range)", fontsize=9
            )
        else:
            # one bar per (model, eval placement), coloured by the placement: a rectification
            # model is evaluated at the placement it was trained with, so no empty slots
            bars = sub.drop_duplicates(["label", "placement"]).reset_index(drop=True)
            for p in dict.fromkeys(bars["placement"]):
                s = bars[bars["placement"] == p]
                ax.bar(s.index, s["answer_gap"], 0.8, yerr=_yerr(s), capsize=2, label=str(p))
            names = [
                lab if str(p) in lab else f"{lab} ({p})"
                for lab, p in zip(bars["label"], bars["placement"], strict=True)
            ]
            ax.set_xticks(range(len(bars)), names, rotation=45, ha="right", fontsize=7)
            ax.set_xlabel("model (eval placement)")
            ax.set_title("rectification: by model and eval placement (bars: 95% CI)", fontsize=9)
        ax.axhline(0, color="k", lw=0.6)
        ax.set_ylabel("answer-token attention gap (×1000)")
        _legend_outside(ax)
    return _save(fig, path, "Answer-token attention gap")


def _rows_axes(n: int, width: float = 9.0):
    fig, ax = plt.subplots(figsize=(width, max(2.5, 0.28 * n + 1.6)))
    ys = np.arange(n)[::-1]
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_ylabel("model cell (study: label)")
    return fig, ax, ys


def _cell_names(cells: pd.DataFrame) -> list[str]:
    return [
        _cell_name(*c) for c in zip(cells["study"], cells["label"], cells["n_seeds"], strict=True)
    ]


def _study_bars(ax, ys, cells: pd.DataFrame, column: str) -> list[Patch]:
    """One bar per cell of ``column`` (its mean over seeds), coloured by study, whiskers at the
    seeds' range, the cells named on the y axis; returns the studies' legend handles."""
    value = cells[column].astype(float)
    err = np.nan_to_num(np.vstack([value - cells[f"{column}_min"], cells[f"{column}_max"] - value]))
    colours = [study_colour(s) for s in cells["study"]]
    ax.barh(ys, value.fillna(0), 0.7, xerr=err, color=colours, capsize=2)
    mark_gaps(ax, ys, value, "black", horizontal=True)
    note_if_all_zero(ax, value, "value")
    ax.set_yticks(ys, _cell_names(cells), fontsize=7)
    return [Patch(color=study_colour(s), label=s) for s in dict.fromkeys(cells["study"])]


def plot_retrieval_heads(cells: pd.DataFrame, path: Path):
    fig, ax, ys = _rows_axes(len(cells))
    handles = _study_bars(ax, ys, cells, "top5")
    ax.plot(cells["max_f1"], ys, "k|", ms=10, label="max F1 (mean over seeds)")
    ax.set_xlim(0, 1.02)
    ax.set_xlabel(
        f"retrieval-head strength: mean F1 of the top {TOP_SHARE:.0%} heads (bar: seeds' range)"
    )
    ax.legend(
        handles=[*handles, *legend_entries(ax)[0]],  # "no data" last, if a bar is missing
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
        frameon=False,
    )
    return _save(fig, path, "Retrieval heads of every model")


def plot_common_answer_gap(cells: pd.DataFrame, path: Path):
    """Every model's answer-token attention gap on the one attention set (the golden share's)."""
    fig, ax, ys = _rows_axes(len(cells))
    handles = _study_bars(ax, ys, cells, "common_answer_gap")
    ax.axvline(0, color="k", lw=0.6)
    ax.set_xlabel("answer-token attention gap ×1000 on the attention set (bar: seeds' range)")
    handles += legend_entries(ax)[0]  # "no data", if a bar is missing
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _save(fig, path, "Answer-token attention gap of every model")


def plot_head_patterns(cells: pd.DataFrame, path: Path):
    fig, ax, ys = _rows_axes(len(cells))
    left = np.zeros(len(cells))
    for i, c in enumerate(CLASSES):
        share = cells[f"share_{c}"].fillna(0).to_numpy()
        ax.barh(ys, share, 0.7, left=left, color=f"C{i}", label=c)
        left += share
    ax.set_yticks(ys, _cell_names(cells), fontsize=7)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of heads by majority pattern (mean over seeds)")
    _legend_outside(ax)
    return _save(fig, path, "Head attention patterns (LKG-RALM App. D classes)")


def build_diagnostics(
    models: dict[str, dict],
    attention: list[dict],
    evals: list[dict],
    heads: list[dict],
    patterns: list[dict],
    out: Path,
) -> pd.DataFrame:
    """Write the diagnostics table (csv, md, html) and every figure that has data; return it."""
    out = Path(out)
    table = diagnostics_table(models, attention, evals, heads, patterns)
    table.to_csv(out / "diagnostics.csv", index=False)
    shown = table.astype(object).where(table.notna(), None)  # missing values as blanks
    (out / "diagnostics.md").write_text(shown.to_markdown(index=False, floatfmt=".3f") + "\n")
    write_table_html(table, out / "diagnostics.html", float_format="%.3f")
    shares = golden_share_table(models, attention)
    if not shares.empty and (shares["study"] != "base").any():
        shares.to_csv(out / "diag_golden_share.csv", index=False)
        plot_golden_share(shares, out / "diag_golden_share.png")
    gaps = answer_gap_tables(models, evals)
    if not gaps.empty:
        gaps.to_csv(out / "diag_answer_gap.csv", index=False)
        plot_answer_gap(gaps, out / "diag_answer_gap.png")
    if table.empty:
        return table
    cells = _by_cell(table, ["top5_mean_f1", "max_f1", *[f"share_{c}" for c in CLASSES]])
    cells = cells.rename(columns=lambda c: c.replace("top5_mean_f1", "top5"))
    scored = cells[cells["top5"].notna()]
    if not scored.empty:
        plot_retrieval_heads(scored, out / "diag_retrieval_heads.png")
    common = _by_cell(table, ["common_answer_gap"])
    common = common[common["common_answer_gap"].notna()]
    if not common.empty:
        plot_common_answer_gap(common, out / "diag_answer_gap_every_model.png")
    classified = cells[cells[[f"share_{c}" for c in CLASSES]].notna().any(axis=1)]
    if not classified.empty:
        plot_head_patterns(classified, out / "diag_head_patterns.png")
    return table
