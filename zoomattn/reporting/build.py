"""Building the OpAmp report: tables (CSV + Markdown) and figures from the metric files alone."""

from __future__ import annotations

from pathlib import Path

from zoomattn.reporting import figures, published, tables


def _write(t, out: Path, name: str, title: str) -> str:
    shown = tables.visible(t)
    shown.to_csv(out / f"{name}.csv", index_label="model")
    md = f"### {title}\n\n" + shown.to_markdown() + "\n"
    (out / f"{name}.md").write_text(md)
    return md


def base_table(base_metrics: dict) -> str:
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


def build_report(
    spec: dict, evals: list[dict], attention: list[dict], base_metrics: dict, out: Path
) -> None:
    benchmarks = spec["benchmarks"]
    seeds = ", ".join(map(str, spec["seeds"]))
    caption = f"preset {spec['preset']}, seeds {seeds}, 95% bootstrap CI"
    df = tables.scores_frame(evals)
    df.to_csv(out / "scores.csv", index=False)
    parts = [
        f"# OpAmp part: {caption}\n",
        f"Published columns: {published.SOURCE}. Our "
        "benchmarks are synthetic analogues; compare trends, not values.\n",
        base_table(base_metrics),
    ]
    t3 = tables.table3(df, benchmarks)
    parts.append(_write(t3, out, "table3_cmrr", "Table 3 analogue: CMRR sweep"))
    figures.ksweep(t3, out / "table3_cmrr.png", caption)
    parts.append("![Table 3 analogue](table3_cmrr.png)\n")
    if any(len(s["noise_ratios"]) > 1 for s in benchmarks.values()):
        parts.append(
            _write(
                tables.table4(df, benchmarks), out, "table4_noise", "Table 4 analogue: noise ratio"
            )
        )
        for b, paper_name in (("coqa_like", "CoQA"), ("quac_like", "QuAC")):
            if b in benchmarks and len(benchmarks[b]["noise_ratios"]) > 1:
                figures.noise_curves(df, b, paper_name, out / f"table4_{b}.png", caption)
                parts.append(f"![Table 4 analogue, {b}](table4_{b}.png)\n")
    faith = [b for b, s in benchmarks.items() if s["family"] == "faitheval"]
    if faith:
        parts.append(
            _write(
                tables.table5(df, faith[0]),
                out,
                "table5_faitheval",
                "Table 5 analogue: FaithEval-like",
            )
        )
    attn = {}
    for a in attention:  # seeds: first seed's map per label (maps are per model)
        attn.setdefault(tables.model_label(a["model"]), a)
    labels = sorted(attn, key=tables.label_order)
    n_examples = attention[0]["n_examples"]
    attn_caption = f"preset {spec['preset']}, seed(s) {seeds}, mean over {n_examples} examples"
    fig5 = [lab for lab in labels if not lab.startswith("K=")] + (
        ["K=10"] if "K=10" in attn else []
    )
    figures.golden_share(
        attn,
        fig5,
        out / "fig5_attention.png",
        f"Fig. 5 analogue: base, QLoRA, OpAmp ({attn_caption})",
    )
    figures.golden_share(
        attn,
        [lab for lab in labels if lab.startswith("K=")],
        out / "fig6_attention_k.png",
        f"Fig. 6 analogue: across K ({attn_caption})",
    )
    share_rows = [
        "| model | mean golden share | golden doc gets most attention | uniform |",
        "|---|---|---|---|",
    ]
    share_rows += [
        f"| {lab} | {attn[lab]['mean_golden_share']:.3f} | "
        f"{attn[lab]['golden_is_top']:.3f} | {attn[lab]['uniform_share']:.3f} |"
        for lab in labels
    ]
    parts.append(
        "![Fig. 5 analogue](fig5_attention.png)\n\n![Fig. 6 analogue](fig6_attention_k.png)\n"
    )
    parts.append(
        "### Golden attention share (last prompt token, normalised over documents)\n\n"
        + "\n".join(share_rows)
        + "\n"
    )
    (out / "README.md").write_text("\n".join(parts))
