"""The MuDAF report's sections on the head files (``mudaf.build_report`` calls them): Fig. 3 (the
base's retrieval heads), Fig. 4 (masking), Figs. 5/6 (target heads before/after), App. C (the
whole-layer effect) and the retrieval heads of every model of the grid. Each appends its Markdown
to ``r.parts`` and writes its CSV, Markdown and PNG under ``r.out``; every claim is computed."""

from __future__ import annotations

import numpy as np
import pandas as pd

from zoomattn.reporting.mudaf import figures
from zoomattn.reporting.mudaf import heads as heads_of
from zoomattn.reporting.mudaf import published as paper
from zoomattn.reporting.mudaf.retrieval_figures import (
    plot_masking,
    plot_retrieval_curve,
    plot_retrieval_heatmap,
)

BASE_ROW = "base (no fine-tune)"


def _table(r, df: pd.DataFrame, name: str, title: str, note: str, fmt=".3f") -> str:
    """CSV as is, Markdown with ``fmt`` numbers."""
    df.to_csv(r.out / f"{name}.csv", index=False)
    body = df.to_markdown(index=False, floatfmt=fmt) if len(df) else "No rows."
    md = f"### {title}\n\n{note}\n\n{body}\n"
    (r.out / f"{name}.md").write_text(md)
    return md


def fig3(r, h: dict | None, base: str, who: str) -> None:
    r.parts.append(f"## Fig. 3{r.kind}: the base model's retrieval heads\n")
    if h is None:
        r.parts.append(f"No retrieval-head scores of the base model ({base}). {paper.FIG3_NOTE}\n")
        return
    title = f"Fig. 3{r.kind}: retrieval score of every head of {base}, ranked ({r.heads_caption})"
    plot_retrieval_curve(h, r.out / "fig3_retrieval_heads.png", title)
    plot_retrieval_heatmap(h, r.out / "fig3_heatmap.png", title.replace("ranked by F1", "F1 map"))
    ranking = pd.DataFrame(h["ranking"], columns=["rank", "layer", "head", "f1", "em"])
    ranking.to_csv(r.out / "fig3_ranking.csv", index=False)
    top = ranking.head(max(1, round(heads_of.TOP_SHARE * len(ranking))))
    listed = ", ".join(f"{t.layer}-{t.head} ({t.f1:.2f})" for t in top.itertuples())
    strong = int((ranking["f1"] >= heads_of.STRONG_F1).sum())
    r.parts.append(
        f"{r.heads_caption}; {who}. Computed: top 5% ({len(top)} heads, "
        f"layer-head (F1)): {listed}; mean F1 {h['mean_f1']:.3f}, max {h['max_f1']:.3f}; "
        f"{strong} of {len(ranking)} heads score F1 ≥ {heads_of.STRONG_F1}. {paper.FIG3_NOTE} "
        f"{paper.RETRIEVAL_SCORE_NOTE}\n\n"
        f"![Fig. 3{r.kind}](fig3_retrieval_heads.png)\n\n![Fig. 3{r.kind}: map](fig3_heatmap.png)\n"
    )


def fig4(r, masking: list[dict], base: str, named: dict[str, str]) -> None:
    """``named``: label -> model of MuDAF's rows, drawn together when masked."""
    r.parts.append(f"## Fig. 4{r.kind}: masking the top-k retrieval heads vs k random heads\n")
    if not masking:
        r.parts.append(f"No masking experiment in the inputs. {paper.FIG4_NOTE}\n")
        return
    mb = {m["model"]: m for m in masking}
    pre = f"Fig. 4{r.kind}: score with heads masked ({r.heads_caption})"
    if base in mb:
        plot_masking({BASE_ROW: mb[base]}, r.out / "fig4_masking.png", f"{pre}, {base}")
        r.parts.append(f"![Fig. 4{r.kind}: the base model](fig4_masking.png)\n")
    else:
        r.parts.append(f"The base model ({base}) was not masked.\n")
    shown = {label: mb[m] for label, m in named.items() if m in mb}
    if len(shown) > 1:
        plot_masking(shown, r.out / "fig4_masking_mudaf.png", f"{pre}, MuDAF's models")
        r.parts.append(f"![Fig. 4{r.kind}: MuDAF's models](fig4_masking_mudaf.png)\n")
    t = heads_of.masking_table(r.spec, masking)
    view = t.drop_duplicates("model")[["study", "model", "baseline"]].set_index("model")
    view["baseline"] = view["baseline"].map("{:.1f}".format)
    for k, g in t.groupby("k", sort=False):
        g = g.set_index("model")
        cells = g["top"].map("{:.1f}".format) + " / " + g["random_mean"].map("{:.1f}".format)
        view[f"k={k}: top / random"] = cells.reindex(view.index, fill_value="–")
    view = view.rename(columns={"baseline": "unmasked"}).reset_index()
    t.to_csv(r.out / "fig4_masking.csv", index=False)
    worse = t.groupby("model", sort=False)[["drop_top", "drop_random"]].apply(
        lambda g: bool((g["drop_top"] > g["drop_random"]).all())
    )
    only_base = "" if len(mb) > 1 else "Only the base model was masked: no comparison of models. "
    note = (
        f"{r.heads_caption}. Scores ×100 ({', '.join(map(str, dict.fromkeys(t['metric'])))}, "
        f"{masking[0].get('n_examples', '?')} examples, no CI; random: mean of the draws). "
        f"Computed: masking the top-k heads costs more than k random heads at every k for "
        f"{int(worse.sum())} of {len(worse)} masked models. {only_base}{paper.FIG4_NOTE}"
    )
    md = f"### Fig. 4{r.kind}: unmasked, top-k and random masking per model\n\n{note}\n\n"
    md += view[["study", *view.columns.drop("study")]].to_markdown(
        index=False, disable_numparse=True
    )
    md += "\n"
    (r.out / "fig4_masking.md").write_text(md)
    r.parts.append(md)


def fig56(r, df: pd.DataFrame, weak: bool) -> None:
    r.parts.append(
        f"## Figs. 5/6{r.kind}: target heads in the base, after MuDAF, after Vanilla-SFT\n"
    )
    if df.empty:
        r.parts.append(
            "No target heads to show (needs the selections and the retrieval-head scores of the "
            f"base, of MuDAF and of Vanilla-SFT). {paper.FIG5_NOTE}\n"
        )
        return
    claims = []
    eps = heads_of.EPS
    for cell, g in df.groupby("cell", sort=False):
        corr = g["base"].corr(g["delta_mudaf"]) if len(g) > 2 else float("nan")
        corr = "" if pd.isna(corr) else f"; correlation of base score and MuDAF gain {corr:+.2f}"
        claims.append(
            f"{cell}: {int((g['delta_mudaf'] > eps).sum())} of {len(g)} target heads gain after "
            f"MuDAF (mean Δ {g['delta_mudaf'].mean():+.3f}), "
            f"{int((g['delta_vanilla_sft'] > eps).sum())} after Vanilla-SFT (mean Δ "
            f"{g['delta_vanilla_sft'].mean():+.3f}){corr}"
        )
    note = (
        f"{r.heads_caption}. Retrieval score = mean F1 over the scored questions; rank 1 = the "
        f"model's best head. Computed: {'; '.join(claims)}. {paper.FIG5_NOTE} {paper.FIG6_NOTE}"
        + ("" if weak else " No MuDAF-weak cell in this grid: no Fig. 6.")
    )
    title = f"Figs. 5/6{r.kind}: retrieval score of each target head ({r.heads_caption})"
    r.parts.append(_table(r, df, "fig56_target_heads", title, note))
    figures.target_heads(df, r.out / "fig56_target_heads.png", title)
    r.parts.append(f"![Figs. 5/6{r.kind}](fig56_target_heads.png)\n")


APPC_NAMES = {"selected": "selected heads", "same_layer": "other heads of selected layers"}
APPC_NAMES |= {"other_layers": "heads of the other layers"}


def appendix_c(r, summary: pd.DataFrame, per_layer: pd.DataFrame, panels: list) -> None:
    r.parts.append(f"## App. C{r.kind}: the whole-layer effect\n")
    if summary.empty:
        r.parts.append(
            "No MuDAF cell with target heads has both a selection and retrieval-head scores "
            f"(or the base has none). {paper.APPC_NOTE}\n"
        )
        return
    wider = summary["same_layer_mudaf"] - summary["other_layers_mudaf"] > heads_of.EPS
    above = summary["same_layer_mudaf"] - summary["same_layer_sft"] > heads_of.EPS
    note = (
        f"{r.heads_caption}. Δ = retrieval score (mean F1) after − in the base; Vanilla-SFT's Δ "
        "is on the same heads (the heads-0 run of the same seed). Computed: the other heads of "
        f"selected layers gain more than the heads of the other layers in {int(wider.sum())} of "
        f"{len(summary)} MuDAF cells, and more than under Vanilla-SFT in {int(above.sum())} of "
        f"{len(summary)}. "
        f"{paper.APPC_NOTE}"
    )
    names = {
        f"{g}_{k}": f"{APPC_NAMES[g]}: {v}"
        for g in heads_of.GROUPS
        for k, v in (("n", "n"), ("mudaf", "Δ MuDAF"), ("sft", "Δ Vanilla-SFT"))
    }
    title = "App. C: mean retrieval-score change by head group"
    r.parts.append(_table(r, summary.rename(columns=names), "appc_layers", title, note))
    title = "App. C, per layer: the non-selected heads' mean change"
    note = "improved_share: the share of the layer's non-selected heads whose score rose."
    r.parts.append(_table(r, per_layer, "appc_per_layer", title, note))
    if panels:
        title = f"App. C{r.kind}: Δ retrieval score vs the base, selected heads boxed"
        title += f" ({r.heads_caption})"
        figures.delta_maps(panels, r.out / "appc_delta.png", title)
        r.parts.append(f"![App. C{r.kind}: change per head](appc_delta.png)\n")


def across(r, spec: dict, heads: list[dict]) -> None:
    r.parts.append("## Across methods: retrieval heads of every model of the grid\n")
    df = heads_of.across_methods(spec, heads)
    if df.empty:
        r.parts.append("No retrieval-head scores in the inputs.\n")
        return
    best = df.loc[df["top5_mean_f1"].idxmax()] if df["top5_mean_f1"].notna().any() else None
    per_study = df.groupby("study", sort=False)["mean_f1"].mean()
    note = (
        f"{r.heads_caption}. The papers never compare these. Retrieval score = mean F1 over "
        f"{heads[0].get('n_examples', '?')} questions of {heads[0].get('benchmark', '?')} (no "
        "CI); top-5% heads: those of the model's "
        f"base (its own for a base); Δ: against that base; n_f1_ge_0.3: heads with F1 ≥ "
        f"{heads_of.STRONG_F1}. Computed: mean F1 by study "
        + ", ".join(f"{s} {v:.3f}" for s, v in per_study.items())
        + (
            f"; highest top-5% mean F1: {best['model']} ({best['top5_mean_f1']:.3f})."
            if best is not None
            else "."
        )
    )
    r.parts.append(_table(r, df, "across_methods", "Retrieval heads by model", note))
    title = f"Retrieval heads of every model ({r.heads_caption})"
    figures.across_methods(df, r.out / "across_methods.png", title)
    r.parts.append("![Across methods](across_methods.png)\n")


def delta_panels(deltas: dict, cells, role_runs: dict, base: dict | None, hb: dict) -> list:
    """App. C's maps: the strong and weak cells' first models, and Vanilla-SFT of the strong's
    seed with the strong selection boxed."""
    panels = []
    for role in ("MuDAF", "MuDAF-weak"):
        model = next(
            (c.model for c in cells if c.run == role_runs.get(role) and c.model in deltas), None
        )
        if model is None:
            continue
        panels.append(deltas[model])
        sft = hb.get(heads_of.sft_model(cells, next(c.seed for c in cells if c.model == model)))
        if role == "MuDAF" and sft is not None and base is not None:
            d = np.asarray(sft["f1"], dtype=float) - np.asarray(base["f1"], dtype=float)
            panels.append(
                (
                    f"Vanilla-SFT ({sft['model']}; {deltas[model][0]}'s heads boxed)",
                    d,
                    deltas[model][2],
                )
            )
    return panels
