"""Building the attention-rectification report (docs/papers.md §2) from the metric files alone.

Table 1 (ξ sweep × benchmark × query placement), Fig. 3 (answer-token attention gap), Fig. 4 (g
variants at one ξ) and Fig. 5 (the base model's score margin): each as CSV + Markdown and PNG,
collected in README.md. Published numbers stay in tables and panels of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from zoomattn.reporting.common import tables
from zoomattn.reporting.common.inputs import only
from zoomattn.reporting.common.published_rule import beside, rule_evals, rules_by_benchmark
from zoomattn.reporting.common.tables import (
    GAPS,
    cell,
    describe_seeds,
    scores_frame,
    select,
    wide,
    write_table,
)
from zoomattn.reporting.rectification import figures
from zoomattn.reporting.rectification import published as paper

KINDS = ("evals", "margin")
BASE_ROW = "vanilla"  # the paper's name for the base model without fine-tuning
LORA_ROW = "LoRA"


@dataclass(frozen=True)
class Row(tables.Row):
    """kind: "base", "lora", "xi" (Table 1's sweep, g = max) or "g" (Fig. 4's variants)."""

    xi: float | str | None = None
    g: str | None = None


def xi_label(xi, xi_auto: float | None) -> str:
    if xi == "auto":
        return "ξ=auto" + ("" if xi_auto is None else f" (={xi_auto:g})")
    return f"ξ={float(xi):g}"


def grid_rows(spec: dict, margin: dict) -> list[Row]:
    """Every row of the report in order: base, LoRA, the ξ sweep (config order, auto last), then
    the g variants. A label already taken gets its run name appended."""
    runs: dict[str, dict] = {}
    for c in spec.get("cells", {}).values():
        runs.setdefault(c["run"], c)
    taken = {BASE_ROW}

    def unique(label: str, run: str) -> str:
        label = label if label not in taken else f"{label} ({run})"
        taken.add(label)
        return label

    lora, xis, gs = [], [], []
    for run, c in runs.items():
        values = c.get("values") or {}
        xi, g = values.get("xi", 3.0), values.get("g", "max")
        if c.get("method") == "qlora":
            lora.append(Row(unique(LORA_ROW, run), run, "lora"))
        elif c.get("method") == "rectify" and g == "max":
            xis.append(Row(unique(xi_label(xi, margin.get("xi_auto")), run), run, "xi", xi, g))
        elif c.get("method") == "rectify":
            gs.append(Row(unique(str(g), run), run, "g", xi, g))
    # by value: the spec's cells arrive in JSON key order (xi10 before xi3)
    xis.sort(key=lambda r: (r.xi == "auto", 0.0 if r.xi == "auto" else float(r.xi)))
    return [Row(BASE_ROW, spec.get("base", "base"), "base"), *lora, *xis, *gs]


def published_table() -> pd.DataFrame:
    cols = [f"{c} {p}" for c in paper.COLUMNS for p in paper.PLACEMENTS] + ["mean"]
    t = pd.DataFrame.from_dict(paper.TABLE1, orient="index", columns=cols)
    t.index.name = "row"
    return t


def comparison(t1: pd.DataFrame, benchmarks: dict) -> pd.DataFrame:
    """Every Table 1 cell the paper reports: ours, published, Δ = ours − published (both at the
    shown precision, so Δ is the difference of the printed numbers)."""
    rows = []
    for r in t1.itertuples():
        col = paper.column(benchmarks.get(r.benchmark, {}))
        pub = paper.lookup(r.row, col, r.placement) if col else None
        if pub is None:
            continue
        ours = round(r.score, 1)
        line = {"row": r.row, "benchmark": r.benchmark, "paper column": col}
        line |= {"placement": r.placement, "ours": ours, "ci_low": round(r.ci_low, 1)}
        rows.append(
            line | {"ci_high": round(r.ci_high, 1), "published": pub, "Δ": round(ours - pub, 1)}
        )
    cols = ["row", "benchmark", "paper column", "placement", "ours", "ci_low", "ci_high"]
    return pd.DataFrame(rows, columns=[*cols, "published", "Δ"])


def _placements(spec: dict, df: pd.DataFrame) -> list[str]:
    configured = list(spec.get("rectification", {}).get("placements") or [])
    found = configured + [p for p in dict.fromkeys(df["placement"]) if p not in configured]
    order = {"reverse": 0, "vanilla": 1}  # the paper's order; others after, in config order
    return sorted(found, key=lambda p: order.get(p, 2))


def _training_note(rect: dict, real: bool) -> str:
    """Which model fills each benchmark's column (``train_scheme``, zoomattn/studies.py); ""
    for the synthetic pooled grids, whose reports stay as they were."""
    if rect.get("train_scheme") == "per_dataset":
        served = {b: s.get("train") for b, s in (rect.get("benchmarks") or {}).items()}
        pairs = ", ".join(f"{b} ← {t}" for b, t in served.items() if t)
        untrained = ", ".join(b for b, t in served.items() if not t)
        note = (
            "Training: one model per training set (`train_scheme: per_dataset`, the paper's "
            f"App. A), each tested on its own benchmark only: {pairs}."
        )
        if untrained:
            note += f" No training set for {untrained}: the base row only."
        return note + "\n"
    if real:  # the synthetic grids say nothing: their analogues share one training mix by design
        return (
            "Training: one model per cell on every training set together (`train_scheme: "
            "pooled`), tested on every benchmark; the paper trains one per dataset.\n"
        )
    return ""


def build_report(spec: dict, inputs: dict[str, list], out: Path) -> None:
    out, evals = Path(out), inputs["evals"]
    rect = spec.get("rectification", {})
    benchmarks = dict(rect.get("benchmarks") or {})
    margin = only(inputs, "margin") or {}
    seeds = ", ".join(map(str, spec.get("seeds", [])))
    caption = f"preset {spec.get('preset', '?')}, seeds {seeds}, 95% bootstrap CI"
    df = scores_frame(spec, evals)
    for b in dict.fromkeys(df["benchmark"]):
        benchmarks.setdefault(b, {})
    placements = _placements(spec, df)
    columns = [(b, p) for b in benchmarks for p in placements]
    rows = grid_rows(spec, margin)
    real = any("source" in s for s in benchmarks.values())
    kind = "" if real else " analogue"
    mapped = [(b, paper.column(s)) for b, s in benchmarks.items() if paper.column(s)]
    seed_note = describe_seeds(spec.get("seeds", []), "one evaluation per placement")
    scale_note = (
        "The benchmarks are the paper's own: the comparison table gives Δ = ours − published."
        if real
        else "Our benchmarks are synthetic analogues of the paper's (tiny/smoke scale, small "
        "models trained here): compare trends, not values."
    )
    analogues = ", ".join(f"{b} → {c}" for b, c in mapped) or "none"
    parts = [
        f"# Attention rectification part: {caption}\n",
        "Rows: **vanilla** is the base model without fine-tuning (the paper's name; not the query "
        "placement). **LoRA** is the shared LoRA baseline on every target module. **ξ=v** is "
        "rectification with g = max(ξ·tanh x, x): its rank-r update replaces LoRA on q_proj with "
        "the same parameters, so **ξ=0** is LoRA on q_proj exactly; **ξ=auto** resolves to half "
        "the base model's median score margin (Fig. 5). Placements: *reverse* puts the query "
        "before the documents, *vanilla* after them, at training and test alike. Scores ×100.\n",
        f"{seed_note} {scale_note} Paper columns our benchmarks map to: {analogues}. Published "
        f"numbers ({paper.MODEL}, paper scale) are in tables and panels of their own.\n",
    ]
    if _training_note(rect, real):
        parts.append(_training_note(rect, real))
    xi_rows = [r for r in rows if r.kind == "xi"]
    if not any(r.xi == "auto" for r in xi_rows):
        parts.append("No ξ=auto cell in this grid.\n")

    # Table 1
    t1_rows = [r for r in rows if r.kind in ("base", "lora", "xi")]
    t1 = select(df, t1_rows, columns)
    note = f"{caption}. {seed_note} Only g = max runs enter this table; mean over all columns."
    title = f"Table 1{kind}: ξ sweep by benchmark and query placement"
    parts.append(
        write_table(t1, wide(t1, columns, mean=True), out, "table1", title, note)
        if len(t1)
        else "### Table 1\n\nNo evaluations of the base, LoRA or ξ sweep runs.\n"
    )
    shown_xi = [r.label for r in xi_rows if r.label in set(t1["row"])]
    if shown_xi:
        title = (
            f"Table 1{kind}, ours: score vs ξ per placement; LoRA dashed, base dotted ({caption})"
        )
        figures.xi_curves(t1, shown_xi, placements, out / "table1_xi.png", title)
        parts.append(f"![Table 1{kind}: score vs ξ](table1_xi.png)\n")
    pub = published_table()
    pub.to_csv(out / "table1_published.csv")
    md = f"### Table 1, {paper.SOURCE}\n\n" + pub.to_markdown(floatfmt=".1f") + "\n"
    (out / "table1_published.md").write_text(md)
    parts.append(md)
    if mapped:
        figures.published_curves(mapped, placements, out / "table1_published.png")
        parts.append("![Table 1, published (paper scale, not our runs)](table1_published.png)\n")
        compared = comparison(t1, benchmarks)
        t1_rule = select(scores_frame(spec, rule_evals(evals)), t1_rows, columns)
        on = ["row", "benchmark", "placement"]
        compared = beside(compared, comparison(t1_rule, benchmarks), on, rules_by_benchmark(evals))
        compared.to_csv(out / "table1_comparison.csv", index=False)
        side = "the paper's own benchmarks" if real else "ours on synthetic analogues"
        ours = [cell(*v) for v in compared[["ours", "ci_low", "ci_high"]].to_numpy()]
        shown = compared.assign(ours=ours).drop(columns=["ci_low", "ci_high"])
        if not real:  # the paper's numbers beside our analogues: say which is which
            names = {"benchmark": "benchmark (ours, analogue)", "paper column": "paper's benchmark"}
            shown = shown.rename(columns=names | {"published": f"paper's ({paper.MODEL})"})
        md = (
            f"### Table 1 beside the paper's (Δ = ours − published; {side}, published = "
            f"{paper.MODEL} at paper scale)\n\n"
            + (
                shown.to_markdown(index=False, floatfmt=".1f")
                if len(shown)
                else "No cell in common."
            )
            + "\n"
        )
        (out / "table1_comparison.md").write_text(md)
        parts.append(md)
    else:
        parts.append("No benchmark names a paper column (`published:`): no comparison table.\n")

    # Fig. 3
    gap_rows = [r for r in rows if r.kind in ("base", "lora", "xi")]
    gaps = select(df, gap_rows, columns, values=GAPS)
    if len(gaps):
        title = f"Fig. 3{kind}: answer-token attention gap ×1000 ({caption})"
        gap_labels = list(dict.fromkeys(gaps["row"]))
        figures.answer_gap(gaps, gap_labels, placements, out / "fig3_answer_gap.png", title)
        note = (
            f"{caption}. {seed_note} At the last prompt token, mean attention on the gold-answer "
            "tokens minus that on the other tokens, ×1000, over the examples whose golden "
            f"documents contain the answer. {paper.FIG3_NOTE}"
        )
        parts.append(
            write_table(gaps, wide(gaps, columns, GAPS), out, "fig3_answer_gap", title, note)
        )
        parts.append(f"![Fig. 3{kind}](fig3_answer_gap.png)\n")
    else:
        parts.append(f"### Fig. 3{kind}\n\nNo answer-gap measurements. {paper.FIG3_NOTE}\n")

    # Fig. 4
    parts.append(_fig4(df, rows, columns, placements, out, kind, caption, seed_note))

    # Fig. 5
    parts.append(_fig5(spec, margin, xi_rows, out, kind))
    (out / "README.md").write_text("\n".join(parts))


def _fig4(df, rows, columns, placements, out: Path, kind, caption, seed_note) -> str:
    variants = [r for r in rows if r.kind == "g"]
    if not variants:
        return f"### Fig. 4{kind}\n\nNo g variants in this grid. {paper.FIG4_NOTE}\n"
    xis = list(dict.fromkeys(float(r.xi) for r in variants if r.xi != "auto"))
    ref = [r for r in rows if r.kind == "xi" and r.xi != "auto" and float(r.xi) in xis][:1]
    g_rows = [Row("max", r.run, "g", r.xi, "max") for r in ref] + variants
    gs = select(df, g_rows, columns)
    if gs.empty:
        return f"### Fig. 4{kind}\n\nNo evaluations of the g variants. {paper.FIG4_NOTE}\n"
    at = ", ".join(f"{x:g}" for x in xis) or "auto"
    title = f"Fig. 4{kind}: g variants at ξ = {at}, LoRA dashed ({caption})"
    lora = select(df, [r for r in rows if r.kind == "lora"][:1], columns)
    labels = list(dict.fromkeys(gs["row"]))
    figures.g_variants(gs, lora, labels, placements, out / "fig4_g_variants.png", title)
    where = f"the ξ = {ref[0].xi:g} run of the sweep ({ref[0].run})" if ref else "absent"
    note = f"{caption}. {seed_note} max: {where}. LoRA's numbers are Table 1's. {paper.FIG4_NOTE}"
    md = write_table(gs, wide(gs, columns), out, "fig4_g_variants", title, note)
    return md + f"\n![Fig. 4{kind}](fig4_g_variants.png)\n"


def _fig5(spec: dict, margin: dict, xi_rows: list[Row], out: Path, kind: str) -> str:
    head = f"### Fig. 5{kind}: the base model's attention-score margin\n\n"
    if not margin.get("margins"):
        return head + f"No margin measurements. Published reference: {paper.MARGIN_QUOTE}\n"
    xis = [float(r.xi) for r in xi_rows if r.xi != "auto"]
    who = f"{margin.get('model', spec.get('base', 'base'))}, {margin.get('examples', '?')} examples"
    preset = spec.get("preset", "?")
    title = f"Fig. 5{kind}: score margin of the base model ({who}, preset {preset}; no seeds)"
    figures.margin(margin, xis, out / "fig5_margin.png", title)
    stats = [(k, margin.get(k)) for k in ("median", "p10", "p90", "xi_auto", "examples")]
    per_layer = margin.get("per_layer_median") or []
    stats += [(f"layer {i} median", v) for i, v in enumerate(per_layer)]
    pd.DataFrame(stats, columns=["statistic", "value"]).to_csv(out / "fig5_margin.csv", index=False)
    lines = ["| statistic | value |", "|---|---|"]
    lines += [f"| {k} | {'–' if v is None else f'{v:g}'} |" for k, v in stats]
    md = (
        head
        + f"{who}; margin = p90 − p10 of the last prompt token's pre-softmax scores per (example, "
        "layer, head); the dashed lines mark 2ξ for each configured ξ: a ξ covers the margin when "
        "2ξ reaches it (ξ=auto = median / 2). Published reference: "
        + paper.MARGIN_QUOTE
        + "\n\n"
        + "\n".join(lines)
        + "\n"
    )
    (out / "fig5_margin.md").write_text(md)
    return md + f"\n![Fig. 5{kind}](fig5_margin.png)\n"
