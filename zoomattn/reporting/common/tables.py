"""Table helpers every study report shares: a score with its interval as one cell, the seeds note,
the paper column a benchmark maps to, and the run-based score tables (one line per run, benchmark
and placement) that the rectification and MuDAF reports and the cross-method fidelity table read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

SCORES = ["score", "ci_low", "ci_high"]
GAPS = ["answer_gap", "answer_gap_ci_low", "answer_gap_ci_high"]
KEYS = ["row", "run", "benchmark", "placement", "metric", "seeds"]


def cell(score: float, lo: float, hi: float) -> str:
    return f"{score:.1f} [{lo:.1f}, {hi:.1f}]"


def paper_column(spec: dict, aliases: dict[str, str]) -> str | None:
    """The paper column a configured benchmark is (real data) or mirrors (synthetic), if any:
    its ``published:`` name, spelled any way ``aliases`` (lower-case, no spaces/-/_) knows."""
    name = spec.get("published")
    if not name:
        return None
    return aliases.get(str(name).replace(" ", "").replace("-", "").replace("_", "").lower())


def describe_seeds(seeds: list, base_runs: str = "one evaluation") -> str:
    """How a report combines seeds, and that the untrained base has no seeds."""
    note = (
        "Seeds are combined by the mean score; the interval is the envelope (lowest lower, highest "
        "upper bound) of the per-seed 95% bootstrap CIs, not a pooled CI."
        if len(seeds) > 1
        else "The interval is the run's 95% bootstrap CI."
    )
    return note + f" The base model is not trained: {base_runs} whatever the seeds."


@dataclass(frozen=True)
class Row:
    """One row of a report table: its label, the grid run it shows (the base model's id for the
    base row) and what kind of row it is (each report names its own kinds)."""

    label: str
    run: str
    kind: str


def scores_frame(spec: dict, evals: list[dict]) -> pd.DataFrame:
    """One row per (run, benchmark, placement), scores ×100. Seeds: the mean score and the
    envelope (lowest lower, highest upper bound) of the per-seed 95% bootstrap CIs. A model is
    the spec's ``base`` or one of its ``cells`` (model id -> {"run", ...}); others are left out."""
    base, cells = spec.get("base", "base"), spec.get("cells", {})
    recs = []
    for e in evals:
        run = base if e["model"] == base else cells.get(e["model"], {}).get("run")
        if run is None:
            continue
        rec = {"run": run, "benchmark": e["benchmark"], "metric": e.get("metric", "")}
        rec["placement"] = e.get("placement") or e.get("split")
        recs.append(rec | {k: e.get(k) for k in [*SCORES, *GAPS, "answer_gap_examples"]})
    cols = ["run", "benchmark", "placement", "metric", *SCORES, *GAPS, "answer_gap_examples"]
    df = pd.DataFrame(recs, columns=cols)
    for k in cols[4:]:
        df[k] = pd.to_numeric(df[k], errors="coerce")
    df[SCORES] *= 100
    agg = {"metric": ("metric", "first"), "seeds": ("score", "count")}
    for k in (*SCORES, *GAPS):
        agg[k] = (k, "min" if k.endswith("ci_low") else "max" if k.endswith("ci_high") else "mean")
    agg["answer_gap_examples"] = ("answer_gap_examples", "sum")
    return df.groupby(["run", "benchmark", "placement"], as_index=False, sort=False).agg(**agg)


def select(df: pd.DataFrame, rows: list[Row], columns: list[tuple], values=SCORES) -> pd.DataFrame:
    """Long table: one line per (row, benchmark, placement) that has a value, in report order."""
    idx = df.set_index(["run", "benchmark", "placement"])
    out = []
    for r in rows:
        for b, p in columns:
            if (r.run, b, p) not in idx.index:
                continue
            s = idx.loc[(r.run, b, p)]
            if pd.isna(s[values[0]]):
                continue
            line = {"row": r.label, "run": r.run, "benchmark": b, "placement": p}
            line |= {"metric": s["metric"], "seeds": int(s["seeds"])}
            out.append(line | {k: round(float(s[k]), 3) for k in values})
    return pd.DataFrame(out, columns=[*KEYS, *values])


def wide(long: pd.DataFrame, columns: list[tuple], values=SCORES, mean=False) -> pd.DataFrame:
    """Markdown view: rows × "benchmark placement" cells "61.0 [55.0, 67.0]"."""
    labels = list(dict.fromkeys(long["row"]))
    t = pd.DataFrame(index=pd.Index(labels, name="row"))
    scores = pd.DataFrame(index=labels)
    for b, p in columns:
        sub = long[(long["benchmark"] == b) & (long["placement"] == p)].set_index("row")
        if sub.empty:
            continue
        t[f"{b} {p}"] = [cell(*sub.loc[lab, values]) if lab in sub.index else "–" for lab in labels]
        scores[f"{b} {p}"] = sub[values[0]].reindex(labels)
    if mean:  # over every column, as the paper's; only where the row has them all
        avg = scores.mean(axis=1).where(scores.notna().all(axis=1))
        t["mean"] = [f"{v:.1f}" if pd.notna(v) else "–" for v in avg]
    return t


def write_table(
    long: pd.DataFrame, shown: pd.DataFrame, out: Path, name: str, title: str, note: str
):
    """The long table as CSV, the shown one as Markdown under its title and note."""
    long.to_csv(out / f"{name}.csv", index=False)
    md = f"### {title}\n\n{note}\n\n" + shown.to_markdown(disable_numparse=True) + "\n"
    (out / f"{name}.md").write_text(md)
    return md
