"""The cross-method report's fidelity tables, computed from the metric files alone.

``fidelity_numbers``: every cell of a paper table we reproduce, our score beside the published one
with Δ = ours − published (both at the printed precision). Ours is scored by the published
column's own rule where the evaluation scored it (its ``published_rule`` block), our standard
metric standing beside it; each line names both decodings, and its note says whatever keeps the
comparison from being like for like (checked against each paper's ``published.SCORING``). Rows
are named, and mapped to the paper's rows and columns, by each study report's own helpers, so the
two never disagree.

The papers' claims are tested in ``claims.py``; ``write_fidelity`` writes both tables.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from zoomattn.reporting import lkg, mudaf, opamp, rectification
from zoomattn.reporting.common import tables as common_tables
from zoomattn.reporting.common.html_tables import write_table_html
from zoomattn.reporting.common.published_rule import decoding_differs, decoding_text, rule_evals
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

KEY = ["paper", "table", "row", "benchmark", "split", "column"]
NUMBER_COLUMNS = [*KEY, "same_task", "rule", "ours_rule", "rule_ci_low", "rule_ci_high"]
NUMBER_COLUMNS += ["ours_standard", "ci_low", "ci_high", "published", "delta"]
NUMBER_COLUMNS += ["decoding_ours", "decoding_published", "note"]
PAPER_COLUMN = {  # study -> benchmark spec -> the paper column it is or mirrors
    "rectification": paper_rect.column,
    "mudaf": paper_mudaf.column,
    "lkg": paper_lkg.column,
}
SCORING = {  # study -> paper column -> how the paper scored and decoded it
    OPAMP: published.SCORING,
    "rectification": paper_rect.SCORING,
    "mudaf": paper_mudaf.SCORING,
    "lkg": paper_lkg.SCORING,
}


# ---- fidelity numbers ---------------------------------------------------------------------------


def _line(paper, table, row, benchmark, split, column, real, metric, paper_col, scores, pub):
    """One cell, ours at the printed precision; ``metric`` and ``paper_col`` (the paper column
    it is or mirrors) are read by ``_compare`` and not printed."""
    score, lo, hi = (round(float(v), 1) for v in scores)
    line = {"paper": paper, "table": table, "row": row, "benchmark": benchmark, "split": split}
    line |= {"column": column, "same_task": real, "metric": metric, "paper_column": paper_col}
    return line | {"score": score, "ci_low": lo, "ci_high": hi, "published": pub}


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
        where = (r.label, r.benchmark, split, column, real, r.metric, col)
        out.append(_line(PAPERS[OPAMP], table, *where, (r.score, r.ci_low, r.ci_high), pub))
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
        where = (r.row, r.benchmark, r.placement, column, real, r.metric, col)
        out.append(_line(PAPERS[study], table(r.row), *where, score, pub))
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


def _cells(spec: dict, evals: list[dict]) -> list[dict]:
    lines = _opamp_numbers(spec, evals)
    for study, numbers in (
        ("rectification", _rect_numbers),
        ("mudaf", _mudaf_numbers),
        ("lkg", _lkg_numbers),
    ):
        if block_of(spec, study):
            lines += numbers(spec, evals)
    return lines


def _decodings(spec: dict, evals: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """(paper, benchmark) -> the decodings its evaluations ran (one, unless files disagree)."""
    out: dict[tuple[str, str], list[dict]] = {}
    for study, paper in PAPERS.items():
        models = {base_of(spec, study), *cells_of(spec, study)}
        for e in evals:
            if e["model"] in models:
                found = out.setdefault((paper, e["benchmark"]), [])
                if (e.get("decoding") or {}) not in found:
                    found.append(e.get("decoding") or {})
    return out


def _compare(line: dict, rule: dict | None, decodings: list[dict]) -> dict:
    """The printed line: ours under the published rule beside the standard score, Δ on the rule's
    score (on the standard one where no rule was scored), and why it is not like for like."""
    study = next(s for s, p in PAPERS.items() if p == line["paper"])
    expected = SCORING[study].get(line["paper_column"])
    notes = [] if line["same_task"] else ["synthetic analogue: compare trends, not values"]
    out = {k: line[k] for k in (*KEY, "same_task")}
    if rule is not None:
        out |= {"rule": rule["metric"], "ours_rule": rule["score"]}
        out |= {"rule_ci_low": rule["ci_low"], "rule_ci_high": rule["ci_high"]}
        ours = rule["score"]
        if expected is not None and rule["metric"] != expected.rule:
            notes.append(
                f"rule mismatch: our evaluation scored {rule['metric']}, the published column's "
                f"rule is {expected.rule}, so Δ is not like for like"
            )
    else:
        ours = line["score"]
        named = f" (the column's rule: {expected.rule})" if expected else ""
        notes.append(f"no published rule scored{named}: Δ on our standard metric {line['metric']}")
    out |= {"ours_standard": line["score"], "ci_low": line["ci_low"], "ci_high": line["ci_high"]}
    out |= {"published": line["published"], "delta": round(ours - line["published"], 1)}
    out["decoding_ours"] = " / ".join(decoding_text(d) for d in decodings) or "greedy"
    out["decoding_published"] = expected.decoding if expected else "–"
    if expected is None:
        notes.append("the paper names no rule for this column")
    elif any(decoding_differs(expected, d) for d in decodings or [{}]):
        notes.append(
            f"decoding differs: ours {out['decoding_ours']}, the authors' {expected.decoding}"
        )
    elif expected.temperature is None:
        notes.append("the paper does not state its decoding")
    return out | {"note": "; ".join(notes)}


def fidelity_numbers(spec: dict, evals: list[dict]) -> pd.DataFrame:
    """One line per (paper, table, our row, our benchmark / split) the paper has a number for:
    ours under the published column's rule (``ours_rule``, ×100, seeds averaged, with the study
    report's interval) where the evaluation scored it, our standard metric (``ours_standard``),
    published, delta = ours_rule − published (ours_standard − published where no rule was
    scored), both decodings and a note on whatever keeps the two from being like for like.
    ``same_task``: the benchmark is the paper's own (else a synthetic analogue: compare trends)."""
    by_rule = {tuple(x[k] for k in KEY): x for x in _cells(spec, rule_evals(evals))}
    decodings = _decodings(spec, evals)
    lines = [
        _compare(
            x,
            by_rule.get(tuple(x[k] for k in KEY)),
            decodings.get((x["paper"], x["benchmark"]), []),
        )
        for x in _cells(spec, evals)
    ]
    return pd.DataFrame(lines, columns=NUMBER_COLUMNS)


def _write(df: pd.DataFrame, out: Path, name: str, title: str) -> None:
    df.to_csv(out / f"{name}.csv", index=False)
    shown = df.round({c: 1 for c in ("difference", "diff_ci_low", "diff_ci_high") if c in df})
    (out / f"{name}.md").write_text(f"### {title}\n\n" + shown.to_markdown(index=False) + "\n")
    write_table_html(shown, out / f"{name}.html")


def write_fidelity(
    spec: dict, evals: list[dict], predictions: dict, out: Path, by_rule: dict | None = None
) -> None:
    """fidelity.{csv,md,html} and claims.{csv,md,html} under ``out``; ``by_rule``: the published
    rules' per-example scores, as ``predictions`` (the claims read them where they exist)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    title = "Our numbers beside the published ones (Δ = ours − published, ×100)"
    _write(fidelity_numbers(spec, evals), out, "fidelity", title)
    title = "The papers' claims in our runs (paired bootstrap over seeds and examples, 95%)"
    _write(claims(spec, evals, predictions, by_rule), out, "claims", title)
