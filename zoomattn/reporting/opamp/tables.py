"""Tables of the OpAmp part: our scores with 95% bootstrap intervals beside the published ones."""

from __future__ import annotations

import math

import pandas as pd

from zoomattn.reporting.common.tables import cell
from zoomattn.reporting.opamp import published
from zoomattn.reporting.opamp.labels import Row, label_of


def scores_frame(evals: list[dict], rows: list[Row]) -> pd.DataFrame:
    """One row per (model label, benchmark, noise, subset), seeds averaged (score ×100), in the
    order of ``rows`` (the tables below keep it). Every eval's model must be one of the rows'."""
    label, rank = label_of(rows), {r.label: i for i, r in enumerate(rows)}
    unknown = sorted({e["model"] for e in evals} - set(label))
    if unknown:
        raise ValueError(f"OpAmp report: {', '.join(unknown)} is neither its base nor a cell")
    lines = []
    for e in evals:
        base = {
            "label": label[e["model"]],
            "benchmark": e["benchmark"],
            "noise": e["noise_ratio"],
            "metric": e["metric"],
        }
        lines.append({**base, "subset": "", **{k: e[k] for k in ("score", "ci_low", "ci_high")}})
        for name, s in e.get("subsets", {}).items():
            lines.append(
                {**base, "subset": name, **{k: s[k] for k in ("score", "ci_low", "ci_high")}}
            )
    df = pd.DataFrame(lines)
    df[["score", "ci_low", "ci_high"]] *= 100
    keys = ["label", "benchmark", "noise", "metric", "subset"]
    df = df.groupby(keys, as_index=False)[["score", "ci_low", "ci_high"]].mean()
    return df.sort_values("label", key=lambda s: s.map(rank), kind="stable")


def _pivot(df: pd.DataFrame, columns: list[tuple]) -> pd.DataFrame:
    """Labels × columns of "score [CI]" cells, labels in the frame's (the rows') order."""
    labels = list(dict.fromkeys(df["label"]))
    out = pd.DataFrame(index=labels)
    for name, mask in columns:
        sub = df[mask].set_index("label")
        out[name] = [
            cell(*sub.loc[lab, ["score", "ci_low", "ci_high"]]) if lab in sub.index else "–"
            for lab in labels
        ]
        out[name + "__score"] = [
            sub.loc[lab, "score"] if lab in sub.index else math.nan for lab in labels
        ]
    return out


def table3(df: pd.DataFrame, benchmarks: dict) -> pd.DataFrame:
    """K sweep: each benchmark at its highest configured noise ratio, plus the average."""
    main = df[df["subset"] == ""]
    cols = [
        (
            f"{b} (r={max(spec['noise_ratios']):g}, {spec['metric'].upper()})",
            (main["benchmark"] == b) & (main["noise"] == max(spec["noise_ratios"])),
        )
        for b, spec in benchmarks.items()
    ]
    t = _pivot(main, cols)
    score_cols = [c for c in t.columns if c.endswith("__score")]
    t.insert(0, "Avg", t[score_cols].mean(axis=1).round(1))
    t["published Avg"] = [
        published.TABLE3[lab][0] if lab in published.TABLE3 else "–" for lab in t.index
    ]
    return t


def table4(df: pd.DataFrame, benchmarks: dict) -> pd.DataFrame:
    main = df[df["subset"] == ""]
    cols = [
        (f"{b} r={r:g}", (main["benchmark"] == b) & (main["noise"] == r))
        for b, spec in benchmarks.items()
        if len(spec["noise_ratios"]) > 1
        for r in spec["noise_ratios"]
    ]
    t = _pivot(main, cols)
    noisy = [b for b, spec in benchmarks.items() if len(spec["noise_ratios"]) > 1]
    for paper_name in [published.column(b, benchmarks[b]) for b in noisy]:
        if paper_name not in published.TABLE4:
            continue
        for i, r in enumerate(published.TABLE4["noise_ratios"]):
            t[f"published {paper_name} r={r:g}"] = [
                published.TABLE4[paper_name].get(lab, ["–"] * 3)[i] for lab in t.index
            ]
    return t


def table5(df: pd.DataFrame, faith_benchmarks: list[str]) -> pd.DataFrame:
    """FaithEval's three subsets (one benchmark with subsets, or one benchmark per subset) and
    their mean, as the paper averages them."""
    sub = df[df["benchmark"].isin(faith_benchmarks)]
    names = ("inconsistent", "unanswerable", "counterfactual")
    t = _pivot(sub, [(s, sub["subset"] == s) for s in names])
    t.insert(0, "Avg", t[[f"{s}__score" for s in names]].mean(axis=1).round(1))
    for i, name in enumerate(published.TABLE5["columns"]):
        t[f"published {name}"] = [
            published.TABLE5[lab][i] if lab in published.TABLE5 else "–" for lab in t.index
        ]
    return t


def comparison(df: pd.DataFrame, benchmarks: dict) -> pd.DataFrame:
    """Every cell the paper reports, ours beside it: score [95% CI], published, Δ = ours − paper.
    Only for real benchmarks; a synthetic analogue's numbers are not comparable."""
    rows = []
    for r in df.itertuples():
        spec = benchmarks.get(r.benchmark, {})
        if "source" not in spec:
            continue
        paper = published.lookup(published.column(r.benchmark, spec), r.label, r.noise, r.subset)
        if paper is None:
            continue
        rows.append(
            {
                "model": r.label,
                "benchmark": r.benchmark + (f" / {r.subset}" if r.subset else ""),
                "noise": r.noise,
                "metric": r.metric.upper(),
                "ours": cell(r.score, r.ci_low, r.ci_high),
                "published": paper,
                "Δ": round(r.score - paper, 1),
            }
        )
    return pd.DataFrame(rows)


def with_rule(t: pd.DataFrame, t_rule: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    """``t`` with columns of ``t_rule`` (the same table on the rule-scored frame) beside it, each
    renamed by ``names``; the standard columns stay as they are."""
    t = t.copy()
    for name, new in names.items():
        if name in t_rule:
            t[new] = t_rule[name].reindex(t.index).fillna("–")
    return t


def visible(t: pd.DataFrame) -> pd.DataFrame:
    return t[[c for c in t.columns if not c.endswith("__score")]]
