"""Building the OpAmp report: tables (CSV + Markdown) and figures from the metric files alone."""

from __future__ import annotations

from pathlib import Path

from zoomattn.reporting.common.inputs import only
from zoomattn.reporting.common.published_rule import beside, rule_evals, rules_by_benchmark
from zoomattn.reporting.opamp import figures, labels, published, tables

KINDS = ("evals", "attention", "base_metrics")
FIG5_K = 10  # the paper's Fig. 5 shows OpAmp at K = 10 beside the base and QLoRA


def _write(t, out: Path, name: str, title: str) -> str:
    shown = tables.visible(t)
    shown.to_csv(out / f"{name}.csv", index_label="model")
    md = f"### {title}\n\n" + shown.to_markdown() + "\n"
    (out / f"{name}.md").write_text(md)
    return md


def base_table(base_metrics: dict) -> str:
    if "copy_phase_steps" not in base_metrics:
        return f"### Base model\n\n{base_metrics['source']} (hub or local, not trained here)\n"
    rows = [
        (k.removeprefix("base_em_"), v) for k, v in base_metrics.items() if k.startswith("base_em_")
    ]
    lines = ["| probe | teacher-forced EM |", "|---|---|"]
    lines += [f"| {k} | {v:.3f} |" for k, v in rows]
    return (
        "### Base model (pretrained here): EM by noise ratio, and with the golden document "
        f"removed\n\ncopy phase: {base_metrics['copy_phase_steps']} steps, total "
        f"{base_metrics['total_steps']} steps\n\n" + "\n".join(lines) + "\n"
    )


def build_report(spec: dict, inputs: dict[str, list], out: Path) -> None:
    evals, attention = inputs["evals"], inputs["attention"]
    base_metrics = only(inputs, "base_metrics")
    benchmarks = spec["benchmarks"]
    seeds = ", ".join(map(str, spec["seeds"]))
    caption = f"preset {spec['preset']}, seeds {seeds}, 95% bootstrap CI"
    rows = labels.rows(spec.get("cells", {}), spec.get("base", "base"))
    df = tables.scores_frame(evals, rows)
    df.to_csv(out / "scores.csv", index=False)
    by_rule = rule_evals(evals)  # the evaluations that scored a published column's rule
    rules = rules_by_benchmark(evals)
    rdf = tables.scores_frame(by_rule, rows) if by_rule else None
    real = any("source" in s for s in benchmarks.values())
    note = (
        "The benchmarks are the paper's own: the comparison table gives Δ = ours − published."
        if real
        else "Our benchmarks are synthetic analogues; compare trends, not values."
    )
    kind = "" if real else " analogue"  # the paper's benchmarks, or synthetic stand-ins
    parts = [
        f"# OpAmp part: {caption}\n",
        f"Published columns: {published.SOURCE}. {note}\n",
        base_table(base_metrics),
    ]
    t3 = tables.table3(df, benchmarks)
    if rdf is not None and set(benchmarks) <= set(rules):  # an average of rule scores only
        t3 = tables.with_rule(t3, tables.table3(rdf, benchmarks), {"Avg": "Avg (published rules)"})
    parts.append(_write(t3, out, "table3_cmrr", f"Table 3{kind}: CMRR sweep"))
    k_rows = [r.label for r in rows if r.kind == "opamp" and r.label in t3.index]
    figures.ksweep(t3, k_rows, out / "table3_cmrr.png", caption)
    parts.append(f"![Table 3{kind}](table3_cmrr.png)\n")
    if any(len(s["noise_ratios"]) > 1 for s in benchmarks.values()):
        t4 = tables.table4(df, benchmarks)
        if rdf is not None:
            names = {
                f"{b} r={r:g}": f"{b} r={r:g} ({rules[b]})"
                for b, bspec in benchmarks.items()
                if b in rules
                for r in bspec["noise_ratios"]
            }
            t4 = tables.with_rule(t4, tables.table4(rdf, benchmarks), names)
        parts.append(_write(t4, out, "table4_noise", f"Table 4{kind}: noise ratio"))
        for b, bspec in benchmarks.items():
            paper_name = published.column(b, bspec)
            if len(bspec["noise_ratios"]) > 1 and paper_name in published.TABLE4:
                figures.noise_curves(df, b, paper_name, out / f"table4_{b}.png", caption)
                parts.append(f"![Table 4{kind}, {b}](table4_{b}.png)\n")
    faith = [b for b, s in benchmarks.items() if published.column(b, s) == "FaithEval"]
    if faith:
        t5 = tables.table5(df, faith)
        if rdf is not None and set(faith) <= set(rules):
            rule = " / ".join(dict.fromkeys(rules[b] for b in faith))
            names = {s: f"{s} ({rule})" for s in ("Avg", *published.TABLE5["columns"][:3])}
            t5 = tables.with_rule(t5, tables.table5(rdf, faith), names)
        parts.append(
            _write(
                t5,
                out,
                "table5_faitheval",
                f"Table 5{kind}: FaithEval" + ("" if real else "-like"),
            )
        )
    if real:
        compared = tables.comparison(df, benchmarks)
        if rdf is not None:
            on = ["model", "benchmark", "noise"]
            compared = beside(compared, tables.comparison(rdf, benchmarks), on, rules)
        compared.to_csv(out / "comparison.csv", index=False)
        md = "### Beside the published numbers (Δ = ours − paper)\n\n"
        md += compared.to_markdown(index=False) + "\n"
        (out / "comparison.md").write_text(md)
        parts.append(md)
    attn, label_of = {}, labels.label_of(rows)
    for a in attention:  # seeds: first seed's map per label (maps are per model)
        attn.setdefault(label_of[a["model"]], a)
    shown = [r for r in rows if r.label in attn]
    n_examples = attention[0]["n_examples"]
    attn_caption = f"preset {spec['preset']}, seed(s) {seeds}, mean over {n_examples} examples"
    fig5 = [r.label for r in shown if r.kind != "opamp"]
    fig5 += [r.label for r in shown if r.kind == "opamp" and r.k == FIG5_K][:1]
    figures.golden_share(
        attn,
        fig5,
        out / "fig5_attention.png",
        f"Fig. 5{kind}: base, QLoRA, OpAmp ({attn_caption})",
    )
    figures.golden_share(
        attn,
        [r.label for r in shown if r.kind == "opamp"],
        out / "fig6_attention_k.png",
        f"Fig. 6{kind}: across K ({attn_caption})",
    )
    share_rows = [
        "| model | mean golden share | golden doc gets most attention | uniform |",
        "|---|---|---|---|",
    ]
    share_rows += [
        f"| {lab} | {attn[lab]['mean_golden_share']:.3f} | "
        f"{attn[lab]['golden_is_top']:.3f} | {attn[lab]['uniform_share']:.3f} |"
        for lab in (r.label for r in shown)
    ]
    parts.append(f"![Fig. 5{kind}](fig5_attention.png)\n\n![Fig. 6{kind}](fig6_attention_k.png)\n")
    parts.append(
        "### Golden attention share (last prompt token, normalised over documents)\n\n"
        + "\n".join(share_rows)
        + "\n"
    )
    (out / "README.md").write_text("\n".join(parts))
