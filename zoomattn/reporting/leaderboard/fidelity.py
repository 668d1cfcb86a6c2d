"""The cross-method report's fidelity tables, computed from the metric files alone.

``fidelity_numbers``: every cell of a paper table we reproduce, our score beside the published one
with Δ = ours − published (both at the printed precision). Rows are named, and mapped to the
paper's rows and columns, by each study report's own helpers, so the two never disagree.

The papers' claims are tested in ``claims.py``; ``write_fidelity`` writes both tables.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from zoomattn.reporting import lkg, mudaf, opamp, rectification
from zoomattn.reporting.common import tables as common_tables
from zoomattn.reporting.common.html_tables import write_table_html
from zoomattn.reporting.leaderboard.claims import claims
from zoomattn.reporting.leaderboard.slices import (
    OPAMP,
    PAPERS,
    base_of,
    block_of,
    cells_of,
    evals_of,
    study_spec,
)
from zoomattn.reporting.lkg import published as paper_lkg
from zoomattn.reporting.mudaf import published as paper_mudaf
from zoomattn.reporting.opamp import published
from zoomattn.reporting.rectification import published as paper_rect
from zoomattn.splits import Split

NUMBER_COLUMNS = ["paper", "table", "row", "benchmark", "split", "column", "same_task"]
NUMBER_COLUMNS += ["ours", "ci_low", "ci_high", "published", "delta"]
PAPER_COLUMN = {  # study -> benchmark spec -> the paper column it is or mirrors
    "rectification": paper_rect.column,
    "mudaf": paper_mudaf.column,
    "lkg": paper_lkg.column,
}


# ---- fidelity numbers ---------------------------------------------------------------------------


def _line(paper, table, row, benchmark, split, column, real, score, lo, hi, pub) -> dict:
    ours = round(float(score), 1)
    line = {"paper": paper, "table": table, "row": row, "benchmark": benchmark, "split": split}
    line |= {"column": column, "same_task": real, "ours": ours, "ci_low": round(float(lo), 1)}
    return line | {"ci_high": round(float(hi), 1), "published": pub, "delta": round(ours - pub, 1)}


def _opamp_numbers(spec: dict, evals: list[dict]) -> list[dict]:
    """Tables 3-5 by ``published.lookup``, rows labelled as the OpAmp report's (``opamp.rows``)."""
    benchmarks = spec.get("benchmarks") or {}
    ev = evals_of(evals, spec, OPAMP, benchmarks)
    if not ev:
        return []
    ev = [
        {**e, "noise_ratio": e.get("noise_ratio", Split.parse(e["split"]).noise_ratio)} for e in ev
    ]
    rows = opamp.rows(cells_of(spec, OPAMP), base_of(spec, OPAMP))
    out = []
    for r in opamp.scores_frame(ev, rows).itertuples():
        col = published.column(r.benchmark, benchmarks[r.benchmark])
        pub = published.lookup(col, r.label, r.noise, r.subset) if col else None
        if pub is None:
            continue
        if col == "FaithEval":
            table, column = "Table 5", r.subset
        elif col in published.TABLE4 and r.noise in published.TABLE4["noise_ratios"]:
            table, column = "Table 4", f"{col} r={r.noise:g}"
        else:
            table, column = "Table 3", col
        split = str(Split(noise_ratio=r.noise)) + (f" / {r.subset}" if r.subset else "")
        real = "source" in benchmarks[r.benchmark]
        where = (r.label, r.benchmark, split, column, real)
        out.append(_line(PAPERS[OPAMP], table, *where, r.score, r.ci_low, r.ci_high, pub))
    return out


def _long_numbers(study: str, long: pd.DataFrame, benchmarks: dict, table, lookup) -> list:
    """Lines of a study report's long table (row, benchmark, placement, score, CI) the paper has a
    number for: ``table(row)`` names the paper's table, ``lookup(row, paper column, placement)``
    gives its number (None: it has none)."""
    out = []
    for r in long.itertuples():
        col = PAPER_COLUMN[study](benchmarks.get(r.benchmark, {}))
        pub = lookup(r.row, col, r.placement) if col else None
        if pub is None:
            continue
        column = f"{col} {r.placement}" if study == "rectification" else col
        real = "source" in benchmarks.get(r.benchmark, {})
        score = (r.score, r.ci_low, r.ci_high)
        where = (r.row, r.benchmark, r.placement, column, real)
        out.append(_line(PAPERS[study], table(r.row), *where, *score, pub))
    return out


def _columns(benchmarks: dict, df: pd.DataFrame) -> list[tuple[str, str]]:
    placements = sorted(dict.fromkeys(df["placement"]), key=lambda p: p != "reverse")
    return [(b, p) for b in benchmarks for p in placements]


def _rect_numbers(spec: dict, evals: list[dict]) -> list[dict]:
    """Table 1: the rectification report's base / LoRA / ξ-sweep rows (g = max)."""
    benchmarks = dict(block_of(spec, "rectification").get("benchmarks") or {})
    sub = study_spec(spec, "rectification")
    df = common_tables.scores_frame(sub, evals_of(evals, spec, "rectification", benchmarks))
    rows = [r for r in rectification.grid_rows(sub, {}) if r.kind in ("base", "lora", "xi")]
    long = common_tables.select(df, rows, _columns(benchmarks, df))
    return _long_numbers("rectification", long, benchmarks, lambda _: "Table 1", paper_rect.lookup)


def _mudaf_numbers(spec: dict, evals: list[dict]) -> list[dict]:
    """Table 2 (the report's roles) and Table 4 (its head-count sweep rows)."""
    benchmarks = dict(block_of(spec, "mudaf").get("benchmarks") or {})
    sub = study_spec(spec, "mudaf")
    df = common_tables.scores_frame(sub, evals_of(evals, spec, "mudaf", benchmarks))
    columns, cells = _columns(benchmarks, df), mudaf.mudaf_cells(sub)
    Row = common_tables.Row
    t2_rows = [Row(mudaf.BASE_ROW, sub["base"], "base")]
    t2_rows += [Row(role, run, "role") for role, run in mudaf.roles(cells).items()]
    out = []
    for name, table, rows in (
        ("Table 2", paper_mudaf.TABLE2, t2_rows),
        ("Table 4", paper_mudaf.TABLE4, [row for row, _, _ in mudaf.sweep_rows(sub, cells)]),
    ):
        long = common_tables.select(df, rows, columns)
        out += _long_numbers(
            "mudaf",
            long,
            benchmarks,
            lambda _, n=name: n,
            lambda row, col, _, t=table: paper_mudaf.lookup(t, row, col),
        )
    return out


def _lkg_numbers(spec: dict, evals: list[dict]) -> list[dict]:
    """Table 1's base and fine-tuning rows and Table 2's ablations, by ``lkg.table2_rows``."""
    benchmarks = dict(block_of(spec, "lkg").get("benchmarks") or {})
    rows = lkg.table2_rows(study_spec(spec, "lkg"))
    df = lkg.scores_frame(rows, evals_of(evals, spec, "lkg", benchmarks))
    label = {r.run: r.label for r in rows}
    df = df[df["split"] == lkg.MAIN_SPLIT]
    long = df.assign(row=df["run"].map(label), placement=df["split"])
    return _long_numbers(
        "lkg",
        long,
        benchmarks,
        lambda row: paper_lkg.ROW_SOURCE.get(row, "Table 2"),
        lambda row, col, _: paper_lkg.lookup(row, col),
    )


def fidelity_numbers(spec: dict, evals: list[dict]) -> pd.DataFrame:
    """One line per (paper, table, our row, our benchmark / split) the paper has a number for:
    ours (×100, seeds averaged, the study report's interval), published, delta = ours − published.
    ``same_task``: the benchmark is the paper's own (else a synthetic analogue: compare trends)."""
    lines = _opamp_numbers(spec, evals)
    for study, numbers in (
        ("rectification", _rect_numbers),
        ("mudaf", _mudaf_numbers),
        ("lkg", _lkg_numbers),
    ):
        if block_of(spec, study):
            lines += numbers(spec, evals)
    return pd.DataFrame(lines, columns=NUMBER_COLUMNS)


def _write(df: pd.DataFrame, out: Path, name: str, title: str) -> None:
    df.to_csv(out / f"{name}.csv", index=False)
    shown = df.round({c: 1 for c in ("difference", "diff_ci_low", "diff_ci_high") if c in df})
    (out / f"{name}.md").write_text(f"### {title}\n\n" + shown.to_markdown(index=False) + "\n")
    write_table_html(shown, out / f"{name}.html")


def write_fidelity(spec: dict, evals: list[dict], predictions: dict, out: Path) -> None:
    """fidelity.{csv,md,html} and claims.{csv,md,html} under ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    title = "Our numbers beside the published ones (Δ = ours − published, ×100)"
    _write(fidelity_numbers(spec, evals), out, "fidelity", title)
    title = "The papers' claims in our runs (paired bootstrap over seeds and examples, 95%)"
    _write(claims(spec, evals, predictions), out, "claims", title)
