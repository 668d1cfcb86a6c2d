"""Table 2 of the LKG-RALM report: its rows, named by what their cell changes (method and values),
never by their entry's name; the scores by run; the long and shown tables with Δ against the full
method; and the paper's claims computed on ours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from zoomattn.reporting.common.tables import cell
from zoomattn.reporting.lkg import published as paper
from zoomattn.reporting.lkg.published import BASE_ROW, FT_ROW, FULL_ROW
from zoomattn.splits import Split

MAIN_SPLIT = "vanilla"  # the study has no query-placement axis: its main eval sets are "vanilla"
SCORES = ["score", "ci_low", "ci_high"]
ABLATIONS = (  # value key, whether the value switches the component off, Table 2's label
    ("estimator", lambda v: v == "reranker", "w/o LPR"),
    ("entropy", lambda v: v is False, "w/o ELS"),
    ("fusion", lambda v: v is False, "w/o RPF"),
    ("aux_weight", lambda v: float(v) == 0.0, "w/o Auxiliary Loss"),
)
ORDER = [BASE_ROW, FT_ROW, FULL_ROW, *(label for _, _, label in ABLATIONS)]
AXIS_ORDER = ["passages", "irrelevant"]


@dataclass(frozen=True)
class Row:
    label: str
    run: str  # the grid's run name (the base model's id for the base row)
    models: tuple[str, ...]  # its model ids, one per seed
    entry: str | None = None  # the ``methods:`` entry its cell comes from (None: the base)


def row_label(method: str, values: dict) -> str | None:
    """Table 2's name of a cell: what its values switch off (several: joined), None for a method
    that is neither the LoRA baseline nor LKG-RALM."""
    if method == "qlora":
        return FT_ROW
    if method != "lkg":
        return None
    off = [label for key, test, label in ABLATIONS if key in values and test(values[key])]
    return " & ".join(off) if off else FULL_ROW


def table2_rows(spec: dict) -> list[Row]:
    """The base, then every run in Table 2's order (config order within a label); a label taken
    twice gets its run name appended."""
    base = spec.get("base", "base")
    models: dict[str, list[str]] = {}
    first: dict[str, dict] = {}
    for model, c in spec.get("cells", {}).items():
        models.setdefault(c["run"], []).append(model)
        first.setdefault(c["run"], c)
    named = [
        (row_label(c["method"], c.get("values") or {}) or run, run) for run, c in first.items()
    ]
    rank = {label: i for i, label in enumerate(ORDER)}
    named.sort(key=lambda lr: rank.get(lr[0], len(ORDER) + (" & " not in lr[0])))
    rows, taken = [Row(BASE_ROW, base, (base,))], {BASE_ROW}
    for label, run in named:
        label = label if label not in taken else f"{label} ({run})"
        taken.add(label)
        rows.append(Row(label, run, tuple(models[run]), first[run].get("entry")))
    return rows


def parse_split(split: str) -> tuple[str, float] | None:
    """("passages", k) for ``n<k>``, ("irrelevant", share) for ``irr<share>``, else None."""
    parsed = Split.parse(split)
    if parsed.irrelevant is not None:
        return "irrelevant", float(parsed.irrelevant)
    return None if parsed.passages is None else ("passages", float(parsed.passages))


def split_of(e: dict) -> str:
    return e.get("split") or e.get("placement") or MAIN_SPLIT


def check_main(rows: list[Row], benchmarks: dict, evals: list[dict]) -> None:
    have = {(e["model"], e["benchmark"], split_of(e)) for e in evals}
    missing = [
        f"{m} on {b} (split {MAIN_SPLIT})"
        for r in rows
        for m in r.models
        for b in benchmarks
        if (m, b, MAIN_SPLIT) not in have
    ]
    if missing:
        raise ValueError(f"LKG report: no evaluation of {'; '.join(missing)}")


def scores_frame(rows: list[Row], evals: list[dict]) -> pd.DataFrame:
    """One line per (run, benchmark, split), ×100. Seeds: the mean score and the envelope of the
    per-seed 95% bootstrap CIs; n: the fewest and most questions of one evaluation."""
    run_of = {m: r.run for r in rows for m in r.models}
    recs = [
        {"run": run_of[e["model"]], "benchmark": e["benchmark"], "split": split_of(e)}
        | {"metric": e.get("metric", ""), "n": e.get("n")}
        | {k: e.get(k) for k in SCORES}
        for e in evals
        if e["model"] in run_of
    ]
    df = pd.DataFrame(recs, columns=["run", "benchmark", "split", "metric", "n", *SCORES])
    for k in ["n", *SCORES]:
        df[k] = pd.to_numeric(df[k], errors="coerce")
    df[SCORES] *= 100
    return df.groupby(["run", "benchmark", "split"], as_index=False, sort=False).agg(
        metric=("metric", "first"),
        seeds=("score", "count"),
        n=("n", "min"),
        n_max=("n", "max"),
        score=("score", "mean"),
        ci_low=("ci_low", "min"),
        ci_high=("ci_high", "max"),
    )


def _overlap(a, b) -> bool:
    return bool(a.ci_low <= b.ci_high and b.ci_low <= a.ci_high)


def _num(v, fmt: str = ".1f") -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def table2(df: pd.DataFrame, rows: list[Row], benchmarks: dict) -> pd.DataFrame:
    """Long Table 2: every row × benchmark with its interval, Δ = row − our full row, whether the
    two intervals overlap, and the paper's number and its own Δ against its full row."""
    idx = df[df["split"] == MAIN_SPLIT].set_index(["run", "benchmark"])
    full = next((r for r in rows if r.label == FULL_ROW), None)
    out = []
    for r in rows:
        for b, bspec in benchmarks.items():
            s = idx.loc[(r.run, b)]
            col = paper.column(bspec)
            line = {"row": r.label, "run": r.run, "benchmark": b, "metric": s["metric"]}
            line |= {"seeds": int(s["seeds"]), "n": None if pd.isna(s["n"]) else int(s["n"])}
            line |= {k: round(float(s[k]), 3) for k in SCORES}
            f = idx.loc[(full.run, b)] if full else None
            line["Δ full"] = round(line["score"] - round(f["score"], 3), 1) if full else None
            line["overlaps full"] = _overlap(s, f) if full and r is not full else None
            pub, pub_full = paper.lookup(r.label, col), paper.lookup(FULL_ROW, col)
            line |= {"paper column": col, "published": pub}
            line["paper Δ full"] = round(pub - pub_full, 1) if pub is not None else None
            out.append(line)
    return pd.DataFrame(out)


RULE_SCORES = ["rule_score", "rule_ci_low", "rule_ci_high"]


def with_rule(t2: pd.DataFrame, by_rule: pd.DataFrame, rules: dict[str, str]) -> pd.DataFrame:
    """Table 2 with our score under each benchmark's published rule beside the standard one
    (``rule``, ``rule_score`` and its interval; ``by_rule``: ``scores_frame`` of the rule-scored
    evaluations). Unchanged where no evaluation scored a published rule."""
    if by_rule.empty:
        return t2
    idx = by_rule[by_rule["split"] == MAIN_SPLIT].set_index(["run", "benchmark"])
    keys = list(zip(t2["run"], t2["benchmark"], strict=True))
    values = [
        [round(float(idx.loc[k, s]), 3) for s in SCORES] if k in idx.index else [None] * 3
        for k in keys
    ]
    out = t2.assign(rule=t2["benchmark"].map(rules))
    out[RULE_SCORES] = pd.DataFrame(values, index=t2.index, columns=RULE_SCORES)
    return out


def mean_deltas(t2: pd.DataFrame, benchmarks: dict) -> dict[str, dict]:
    """Per row: our mean Δ over the benchmarks, the paper's over the same columns and over all."""
    cols = list(dict.fromkeys(c for c in map(paper.column, benchmarks.values()) if c))
    out = {}
    for row, s in t2.groupby("row", sort=False):
        ours = s["Δ full"].mean() if s["Δ full"].notna().all() else None
        same = paper.mean_delta(row, cols) if len(cols) == len(benchmarks) else None
        out[row] = {"ours": ours, "paper_same_columns": same}
        out[row]["paper_all_columns"] = paper.mean_delta(row, list(paper.COLUMNS))
    return out


def table2_wide(t2: pd.DataFrame, benchmarks: dict, means: dict) -> pd.DataFrame:
    labels = list(dict.fromkeys(t2["row"]))
    shown = pd.DataFrame(index=pd.Index(labels, name="row"))
    for b, bspec in benchmarks.items():
        s = t2[t2["benchmark"] == b].set_index("row").reindex(labels)
        shown[b] = [cell(*v) for v in s[SCORES].to_numpy()]
        shown[f"{b} Δ"] = [_num(v, "+.1f") for v in s["Δ full"]]
        if "rule" in s and s["rule"].notna().any():
            rule = s["rule"].dropna().iloc[0]
            shown[f"{b} ({rule})"] = [
                cell(*v) if pd.notna(v[0]) else "–" for v in s[RULE_SCORES].to_numpy()
            ]
        if col := paper.column(bspec):
            shown[f"paper {col}"] = [_num(v) for v in s["published"]]
            shown[f"paper {col} Δ"] = [_num(v, "+.1f") for v in s["paper Δ full"]]
    shown["mean Δ"] = [_num(means[lab]["ours"], "+.2f") for lab in labels]
    shown["paper mean Δ (same columns)"] = [
        _num(means[lab]["paper_same_columns"], "+.2f") for lab in labels
    ]
    shown["paper mean Δ (5 columns)"] = [
        _num(means[lab]["paper_all_columns"], "+.2f") for lab in labels
    ]
    return shown


def write_table(long: pd.DataFrame, shown: pd.DataFrame, out: Path, name: str, md: str) -> str:
    long.to_csv(out / f"{name}.csv", index=False)
    md += "\n\n" + shown.to_markdown(disable_numparse=True) + "\n"
    (out / f"{name}.md").write_text(md)
    return md


def claims(t2: pd.DataFrame, means: dict) -> str:
    """The paper's claims (every component helps; w/o RPF collapses), computed on ours."""
    lines = []
    for row, s in t2[t2["overlaps full"].notna()].groupby("row", sort=False):
        per = [
            f"{b}: Δ {_num(d, '+.1f')}, interval {'overlaps' if o else 'separate from'} the full "
            f"method's" + (f" (paper Δ {_num(p, '+.1f')})" if p is not None and p == p else "")
            for b, d, o, p in s[["benchmark", "Δ full", "overlaps full", "paper Δ full"]].to_numpy()
        ]
        lines.append(f"- **{row}**: " + "; ".join(per) + ".")
    ablations = [r for r in means if r.startswith("w/o") or " & " in r]
    below = [r for r in ablations if (t2[t2["row"] == r]["Δ full"] < 0).all()]
    apart = [
        r
        for r in below
        if not t2[t2["row"] == r]["overlaps full"].astype(bool).any()  # every interval apart
    ]
    scored = {r: means[r]["ours"] for r in ablations if means[r]["ours"] is not None}
    worst = min(scored, key=scored.get) if scored else None
    summary = (
        f"Ablation rows below {FULL_ROW} on every benchmark (ours): {', '.join(below) or 'none'}"
        f" of {len(ablations)}; with every interval separate from the full method's: "
        f"{', '.join(apart) or 'none'}. Largest mean drop (ours): "
        + (f"{worst} ({scored[worst]:+.2f})" if worst else "–")
        + "; the paper's: w/o RPF (−22.22 over its five columns)."
    )
    return summary + "\n\n" + "\n".join(lines) + "\n"
