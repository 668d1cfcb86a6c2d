"""Building the LKG-RALM report (docs/papers.md §4) from the metric files alone.

Table 2 (ablations, ``table2.py``), Fig. 6a/6b (robustness to the passage count and to irrelevant
passages), Fig. 2 (head-pattern distributions) and the fine-tunes' training metrics: each as CSV +
Markdown and PNG, collected in README.md with summary.json holding every number quoted.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from zoomattn.io import write_json
from zoomattn.reporting.common.published_rule import rule_evals, rules_by_benchmark
from zoomattn.reporting.common.tables import describe_seeds
from zoomattn.reporting.lkg import figures
from zoomattn.reporting.lkg import published as paper
from zoomattn.reporting.lkg.published import BASE_ROW, FT_ROW, FULL_ROW
from zoomattn.reporting.lkg.table2 import (
    AXIS_ORDER,
    SCORES,
    Row,
    check_main,
    claims,
    mean_deltas,
    parse_split,
    scores_frame,
    split_of,
    table2,
    table2_rows,
    table2_wide,
    with_rule,
    write_table,
)
from zoomattn.splits import Split

KINDS = ("evals", "patterns", "train_metrics")


def build_report(spec: dict, inputs: dict[str, list], out: Path) -> None:
    out, evals = Path(out), inputs["evals"]
    patterns, train = inputs["patterns"], inputs["train_metrics"]
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
    t2 = with_rule(t2, scores_frame(rows, rule_evals(evals)), rules_by_benchmark(evals))
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

    unnamed = [r.run for r in rows[1:] if r.entry is None]
    if unnamed:
        raise ValueError(f"LKG report: the cells of {', '.join(unnamed)} name no entry")

    def of(entry: str) -> list[Row]:  # the runs of one ``methods:`` entry
        return [r for r in rows[1:] if r.entry == entry]

    entries = list(dict.fromkeys(rob.get("models") or []))
    chosen = list(dict.fromkeys(r for e in entries for r in of(e)))
    notes = [f"Robustness model {e!r} is no run of this grid." for e in entries if not of(e)]
    shares = (rob.get("irrelevant") or {}).get("shares", [])
    sets = [Split(passages=k) for k in rob.get("passages", [])]
    splits = [str(s) for s in [*sets, *(Split(irrelevant=share) for share in shares)]]
    have = {(e["model"], e["benchmark"], split_of(e)) for e in evals}
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
