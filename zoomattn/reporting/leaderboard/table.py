"""The cross-method leaderboard (docs/papers.md §5): each method's setting and the baselines on one
common suite and noise axis, at one training budget, over several seeds.

Every cell's interval is the bootstrap over seeds and examples (``bootstrap.mean_ci``). A cell is
marked against the baseline (↑ / ↓) only when the paired bootstrap interval of the difference
excludes 0, and **bold** when it is not significantly below the best cell of its column: ties
stay ties. The ``mean`` column pools every set of the suite (equal sizes: the macro mean).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from zoomattn.reporting.common.bootstrap import LEVEL, RESAMPLES, difference_ci, mean_ci, verdict
from zoomattn.reporting.common.html_tables import write_table_html
from zoomattn.reporting.common.plotting import empty_panel, legend_entries, mark_gaps, save
from zoomattn.splits import Split

MEAN = "mean"
MARK = {"higher": " ↑", "lower": " ↓", "n.s.": ""}


def entry_label(method: str, values: dict) -> str:
    """A leaderboard row's name: the method and the setting that makes it that method's cell."""
    if method == "qlora":
        return "QLoRA"
    if method == "mudaf":
        heads = values.get("heads", 0)
        return "Vanilla SFT (full)" if not heads else f"MuDAF (n={heads})"
    if method == "opamp":
        k = values.get("K")
        return f"OpAmp (K={'∞' if k in ('inf', math.inf) else k})"
    if method == "rectify":
        g = values.get("g", "max")
        return f"Rectification (ξ={values.get('xi')}" + (f", g={g})" if g != "max" else ")")
    if method == "lkg":
        off = [k for k, v in (("fusion", False), ("entropy", False)) if values.get(k) is v]
        guided = " (BM25 α)" if values.get("estimator") == "reranker" else ""
        return "LKG-RALM" + guided + "".join(f" w/o {k}" for k in off)
    return method


def score_matrix(models: list[str], sets: list[tuple[str, str]], predictions: dict) -> np.ndarray:
    """[seeds, examples]: each model (seed) a row, the sets' examples side by side, by id."""
    rows = []
    for m in models:
        row = []
        for benchmark, split in sets:
            scores = predictions[(m, benchmark, split)]
            row += [scores[i] for i in sorted(scores)]
        rows.append(row)
    return np.asarray(rows, dtype=float)


def leaderboard(
    spec: dict, predictions: dict, resamples: int = RESAMPLES, level: float = LEVEL
) -> pd.DataFrame:
    """Long format: one row per (entry, column) with score, interval, and the two comparisons.

    ``spec``: {"cells": {model id: {"entry", "method", "values", "seed"}}, "benchmarks": {name:
    {...}}, "noise_ratios": [...], "baseline": entry}; ``predictions``: (model, benchmark,
    split) -> {example id: score}."""
    entries: dict[str, list[str]] = {}  # entry -> its models by seed; entries by name: the
    for model, cell in sorted(
        spec["cells"].items(), key=lambda kv: (kv[1]["entry"], kv[1]["seed"])
    ):
        entries.setdefault(cell["entry"], []).append(model)  # order never depends on the spec's
    columns = {
        f"{b} r={r:g}": [(b, str(Split(noise_ratio=r)))]
        for b in spec["benchmarks"]
        for r in spec["noise_ratios"]
    }
    columns[MEAN] = [s for sets in list(columns.values()) for s in sets]
    rows = []
    for column, sets in columns.items():
        matrices = {e: score_matrix(models, sets, predictions) for e, models in entries.items()}
        stats = {e: mean_ci(x, resamples, level) for e, x in matrices.items()}
        best = max(stats, key=lambda e: stats[e][0])
        for entry, x in matrices.items():
            first = spec["cells"][entries[entry][0]]
            vs_base = difference_ci(x, matrices[spec["baseline"]], resamples, level)
            vs_best = difference_ci(x, matrices[best], resamples, level)
            score, lo, hi = stats[entry]
            rows.append(
                {
                    "entry": entry,
                    "label": entry_label(first["method"], first["values"]),
                    "column": column,
                    "seeds": x.shape[0],
                    "examples": x.shape[1],
                    "score": 100 * score,
                    "ci_low": 100 * lo,
                    "ci_high": 100 * hi,
                    "vs_baseline": 100 * vs_base[0],
                    "vs_baseline_low": 100 * vs_base[1],
                    "vs_baseline_high": 100 * vs_base[2],
                    "vs_baseline_verdict": "–"
                    if entry == spec["baseline"]
                    else verdict(*vs_base[1:]),
                    "tied_best": entry == best or verdict(*vs_best[1:]) != "lower",
                }
            )
    return pd.DataFrame(rows)


def wide(long: pd.DataFrame) -> pd.DataFrame:
    """One row per entry, one column per set and the mean, best-first by the mean."""
    cells = long.assign(
        text=[
            ("**" if r.tied_best else "")
            + f"{r.score:.1f} [{r.ci_low:.1f}, {r.ci_high:.1f}]"
            + ("**" if r.tied_best else "")
            + MARK.get(r.vs_baseline_verdict, "")
            for r in long.itertuples()
        ]
    )
    table = cells.pivot(index="label", columns="column", values="text")
    mean = long[long["column"] == MEAN]
    order = mean.sort_values(["score", "label"], ascending=[False, True], kind="stable")["label"]
    columns = list(dict.fromkeys(long["column"]))
    return table.loc[list(order), columns].reset_index().rename(columns={"label": "method"})


def plot(long: pd.DataFrame, spec: dict, path: Path):
    """Score against the noise ratio, one panel per benchmark, one line per method (95% CI)."""
    benchmarks = list(spec["benchmarks"])
    fig, axes = plt.subplots(1, len(benchmarks), figsize=(5 * len(benchmarks), 4), squeeze=False)
    for ax, benchmark in zip(axes[0], benchmarks, strict=True):
        ax.set_title(benchmark)
        cells = long[long["column"].str.startswith(f"{benchmark} r=")]
        if cells.empty:
            empty_panel(ax, f"no leaderboard cell of {benchmark}")
            continue
        for label, rows in cells.groupby("label", sort=False):
            ratios = [float(c.split("r=")[1]) for c in rows["column"]]
            yerr = [rows["score"] - rows["ci_low"], rows["ci_high"] - rows["score"]]
            bars = ax.errorbar(ratios, rows["score"], yerr=yerr, marker="o", capsize=3, label=label)
            mark_gaps(ax, ratios, rows["score"], bars.lines[0].get_color())
        ax.set_xlabel("noise ratio")
        ax.set_ylabel("score ×100 (95% CI over seeds and examples)")
    axes[0][-1].legend(
        *legend_entries(*axes[0]), fontsize=8, loc="center left", bbox_to_anchor=(1, 0.5)
    )
    return save(fig, path)


def write_leaderboard(spec: dict, predictions: dict, out: Path, **bootstrap) -> pd.DataFrame:
    long = leaderboard(spec, predictions, **bootstrap)
    long.round(2).to_csv(out / "leaderboard_long.csv", index=False)
    table = wide(long)
    table.to_csv(out / "leaderboard.csv", index=False)
    (out / "leaderboard.md").write_text(table.to_markdown(index=False) + "\n")
    write_table_html(table, out / "leaderboard.html")
    plot(long, spec, out / "leaderboard.png")
    return table
