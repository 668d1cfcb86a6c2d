"""Building the LKG-RALM report (GRID.md §4) from the metric files alone.

Table 2 (ablations), Fig. 6a/6b (robustness to the passage count and to irrelevant passages),
Fig. 2 (head-pattern distributions) and the fine-tunes' training metrics: each as CSV + Markdown
and PNG, collected in README.md with summary.json holding every number quoted. A row of Table 2 is
named by what its cell changes (method and values), never by its entry's name.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from zoomattn.io import write_json
from zoomattn.reporting import lkg_figures as figures
from zoomattn.reporting import published_lkg as paper
from zoomattn.reporting.common.tables import cell, describe_seeds
from zoomattn.reporting.published_lkg import BASE_ROW, FT_ROW, FULL_ROW

MAIN_SPLIT = "vanilla"  # the study has no query-placement axis: its main eval sets are "vanilla"
SCORES = ["score", "ci_low", "ci_high"]
ABLATIONS = (  # value key, whether the value switches the component off, Table 2's label
    ("estimator", lambda v: v == "reranker", "w/o LPR"),
    ("entropy", lambda v: v is False, "w/o ELS"),
    ("fusion", lambda v: v is False, "w/o RPF"),
    ("aux_weight", lambda v: float(v) == 0.0, "w/o Auxiliary Loss"),
)
ORDER = [BASE_ROW, FT_ROW, FULL_ROW, *(label for _, _, label in ABLATIONS)]
AXES = {"n": "passages", "irr": "irrelevant"}  # robustness split prefix -> Fig. 6's axis
AXIS_ORDER = ["passages", "irrelevant"]


@dataclass(frozen=True)
class Row:
    label: str
    run: str  # the grid's run name (the base model's id for the base row)
    models: tuple[str, ...]  # its model ids, one per seed


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
        rows.append(Row(label, run, tuple(models[run])))
    return rows


def parse_split(split: str) -> tuple[str, float] | None:
    """("passages", k) for ``n<k>``, ("irrelevant", share) for ``irr<share>``, else None."""
    m = re.fullmatch(r"(n|irr)(\d+(?:\.\d*)?(?:e-?\d+)?)", split)
    return (AXES[m.group(1)], float(m.group(2))) if m else None


def _split(e: dict) -> str:
    return e.get("split") or e.get("placement") or MAIN_SPLIT


def check_main(rows: list[Row], benchmarks: dict, evals: list[dict]) -> None:
    have = {(e["model"], e["benchmark"], _split(e)) for e in evals}
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
        {"run": run_of[e["model"]], "benchmark": e["benchmark"], "split": _split(e)}
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


def build_report(
    spec: dict, evals: list[dict], patterns: list[dict], train: list[dict], out
) -> None:
    out = Path(out)
    block = spec.get("lkg") or {}
    benchmarks = dict(block.get("benchmarks") or {})
    rows = table2_rows(spec)
    check_main(rows, benchmarks, evals)
    df = scores_frame(rows, evals)
    seeds = ", ".join(map(str, spec.get("seeds", [])))
    caption = f"preset {spec.get('preset', '?')}, seeds {seeds}, 95% bootstrap CI"
    real = any("source" in s for s in benchmarks.values())
    mapped = [f"{b} → {paper.column(s)}" for b, s in benchmarks.items() if paper.column(s)]
    summary: dict = {"preset": spec.get("preset"), "seeds": spec.get("seeds", []), "notes": []}
    summary |= {"base": spec.get("base", "base"), "code": spec.get("code")}
    summary["benchmarks"] = {b: paper.column(s) for b, s in benchmarks.items()}
    parts = [
        f"# LKG-RALM part: {caption}\n",
        f"Rows are named by what their cell changes. **{BASE_ROW}** is the base model "
        f"({spec.get('base', 'base')}) reading the passages, not fine-tuned; **{FT_ROW}** the "
        f"shared 4-bit LoRA fine-tuned on the study's data; **{FULL_ROW}** adds the boundary "
        "tokens, the layer-wise passage estimator and the relevance-guided mask on the base's "
        "middle-focused heads; **w/o LPR** takes the guidance from an external lexical ranker's "
        "scores instead (`estimator: reranker`: no estimator, so no auxiliary losses either; the "
        "paper uses a reranking model), **w/o ELS** weighs every layer alike (`entropy: false`), "
        "**w/o RPF** trains the estimator but applies no mask (`fusion: false`), **w/o Auxiliary "
        "Loss** drops the estimator's three losses (`aux_weight: 0`). Scores ×100.\n",
        describe_seeds(spec.get("seeds", []))
        + " "
        + (
            "The benchmarks are the paper's own."
            if real
            else "Our benchmarks are synthetic analogues of the paper's (small models trained "
            "here): compare trends and signs of Δ, not values."
        )
        + f" Paper columns our benchmarks map to: {', '.join(mapped) or 'none'}. Published "
        f"numbers ({paper.MODEL}, paper scale) stand in columns and panels of their own.\n",
        "Evaluated questions per set (per seed): " + n_note(df) + ".\n",
    ]
    # Table 2
    t2 = table2(df, rows, benchmarks)
    means = mean_deltas(t2, benchmarks)
    has_full = any(r.label == FULL_ROW for r in rows)
    note = (
        f"{caption}, {block.get('distractors', '?')} distractors per question. Δ = row − our "
        f"{FULL_ROW} row; paper Δ = its row − its {FULL_ROW} row; mean Δ over our benchmarks, "
        "the paper's over the columns ours map to (same columns) and over its five."
        + ("" if has_full else f" No {FULL_ROW} cell in this grid: no Δ.")
        + f" {paper.TABLE2_NOTE}"
    )
    title = "### Table 2" + ("" if real else " (analogue)") + ": ablations of LKG-RALM"
    parts.append(
        write_table(
            t2, table2_wide(t2, benchmarks, means), out, "table2_ablations", f"{title}\n\n{note}"
        )
    )
    if has_full:
        parts.append("Computed from our numbers:\n\n" + claims(t2, means))
    summary["table2"] = t2.to_dict(orient="records")
    summary["table2_mean_delta"] = means
    long, labels, notes = robustness_frame(spec, rows, df, evals)
    summary["notes"] += notes
    parts.append("## Fig. 6: robustness to more passages and to irrelevant ones\n")
    rob = block.get("robustness") or {}
    if len(long):
        md, notes = figures.fig6_section(long, labels, rob, out, caption)
        parts.append(md)
        summary["notes"] += notes
    else:
        parts.append(summary["notes"][-1] + "\n")
    summary["robustness"] = long.to_dict(orient="records")
    base = spec.get("base", "base")
    seed_of = {m: c.get("seed") for m, c in spec.get("cells", {}).items()}
    many = len(spec.get("seeds", [])) > 1
    names = {base: figures.BASE_NAME} | {
        m: r.label + (f" s{seed_of.get(m)}" if many else "") for r in rows[1:] for m in r.models
    }
    frame, notes = figures.patterns_frame(patterns, base, names)
    parts.append("## Fig. 2: attention patterns of the heads\n")
    if len(frame):
        what = f"preset {spec.get('preset', '?')}; one measurement per model, no CI"
        by_model = {p["model"]: p for p in patterns}
        hp = block.get("head_patterns") or {}
        md, more = figures.fig2_section(frame, by_model.get(base), hp, out, what)
        parts.append(md)
        notes += more
        summary["head_patterns"] = frame.to_dict(orient="records")
    else:
        parts.append(notes[-1] + "\n")
    summary["notes"] += notes
    parts.append(training_section(rows, train, out, summary))
    summary["published"] = {"rows": paper.PUBLISHED, "columns": list(paper.COLUMNS)}
    summary["published"] |= {"fig6a": paper.FIG6A, "fig6a_peak": paper.FIG6A_PEAK}
    summary["published"] |= {"fig6a_flat": paper.FIG6A_FLAT, "fig6b": paper.FIG6B}
    summary["published"] |= {"fig2": paper.FIG2, "text_mean_drop": paper.TEXT_MEAN_DROP}
    if summary["notes"]:
        parts.append("## Skipped or missing\n\n" + "\n".join(f"- {n}" for n in summary["notes"]))
    write_json(out / "summary.json", _clean(summary))
    (out / "README.md").write_text("\n".join(parts) + "\n")


def robustness_frame(
    spec: dict, rows: list[Row], df: pd.DataFrame, evals: list[dict]
) -> tuple[pd.DataFrame, list[str], list[str]]:
    """Fig. 6's points of the robustness models (axis, then model, then x) and their labels;
    notes on what is missing, the last one saying why the frame is empty where it is."""
    cols = ["row", "run", "benchmark", "split", "axis", "x", "metric", "seeds", "n", *SCORES]
    rob = (spec.get("lkg") or {}).get("robustness")
    if not rob:
        return pd.DataFrame(columns=cols), [], ["Fig. 6 skipped: no robustness sets configured."]

    def of(entry: str) -> list[Row]:
        return [r for r in rows[1:] if r.run == entry or r.run.startswith(f"{entry}-")]

    entries = list(dict.fromkeys(rob.get("models") or []))
    chosen = list(dict.fromkeys(r for e in entries for r in of(e)))
    notes = [f"Robustness model {e!r} is no run of this grid." for e in entries if not of(e)]
    shares = (rob.get("irrelevant") or {}).get("shares", [])
    splits = [f"n{k}" for k in rob.get("passages", [])] + [f"irr{s:g}" for s in shares]
    have = {(e["model"], e["benchmark"], _split(e)) for e in evals}
    missing = {
        m: ", ".join(s for s in splits if (m, rob.get("benchmark"), s) not in have)
        for r in chosen
        for m in r.models
    }
    if any(missing.values()):
        said = "; ".join(f"{m} ({s})" for m, s in missing.items() if s)
        notes.append(f"Robustness evaluations missing (left out of Fig. 6): {said}.")
    label_of = {r.run: r.label for r in chosen}
    sub = df[df["run"].isin(label_of) & (df["benchmark"] == rob.get("benchmark"))]
    parsed = [parse_split(s) for s in sub["split"]]
    sub = sub[[p is not None for p in parsed]].assign(
        axis=[p[0] for p in parsed if p], x=[p[1] for p in parsed if p]
    )
    sub = sub.assign(row=sub["run"].map(label_of), n=sub["n"].astype("Int64"))
    labels = list(label_of.values())
    rank = [
        AXIS_ORDER.index(a) * len(labels) + labels.index(r)
        for a, r in zip(sub["axis"], sub["row"], strict=True)
    ]
    sub = sub.assign(_rank=rank).sort_values(["_rank", "x"], kind="stable")[cols]
    if sub.empty:
        notes.append("Fig. 6 skipped: no robustness evaluation among the inputs.")
    return sub.reset_index(drop=True), labels, notes


def _plain(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def training_section(rows: list[Row], train: list[dict], out: Path, summary: dict) -> str:
    """What the fine-tunes' metrics.json hold, one line per model (a key it lacks: blank)."""
    head = "## Training metrics of the fine-tunes\n\n"
    if not train:
        summary["notes"].append("Training table skipped: no training metrics among the inputs.")
        return head + summary["notes"][-1] + "\n"
    order = {m: i for i, m in enumerate(m for r in rows for m in r.models)}
    label_of = {m: r.label for r in rows for m in r.models}
    keys = [
        k
        for k in dict.fromkeys(k for t in train for k in t)
        if k != "model" and not any(isinstance(t.get(k), dict | list) for t in train)
    ]
    recs = [
        {"model": t.get("model", "?"), "row": label_of.get(t.get("model"), "")}
        | {k: t.get(k) for k in keys}
        for t in train
    ]
    recs.sort(key=lambda r: order.get(r["model"], len(order)))
    long = pd.DataFrame(recs, columns=["model", "row", *keys])
    long.to_csv(out / "training.csv", index=False)
    shown = pd.DataFrame([[_plain(v) for v in r.values()] for r in recs], columns=long.columns)
    md = (
        head
        + "As each fine-tune's metrics.json records them (blank: not recorded).\n\n"
        + shown.to_markdown(index=False, disable_numparse=True)
        + "\n"
    )
    (out / "training.md").write_text(md)
    summary["training"] = recs
    return md


def n_note(df: pd.DataFrame) -> str:
    """Questions per evaluation set, sets with equal n grouped: main split, then Fig. 6's."""
    rank = [(AXIS_ORDER.index(p[0]), p[1]) if p else (-1, 0) for p in map(parse_split, df["split"])]
    df = df.iloc[sorted(range(len(df)), key=rank.__getitem__)]
    groups: dict[str, list[str]] = {}
    for (b, n, n_max), s in df.groupby(["benchmark", "n", "n_max"], sort=False):
        n_text = f"{n:g}" if n == n_max else f"{n:g}–{n_max:g}"
        groups.setdefault(f"{b} n={n_text}", []).extend(dict.fromkeys(s["split"]))
    return "; ".join(f"{k} ({', '.join(dict.fromkeys(v))})" for k, v in groups.items())


def _clean(obj):
    """JSON-safe: NaN → None, numpy scalars → Python, tuple keys never occur."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item"):
        obj = obj.item()
    missing = obj is pd.NA or (isinstance(obj, float) and math.isnan(obj))
    return None if missing else obj
