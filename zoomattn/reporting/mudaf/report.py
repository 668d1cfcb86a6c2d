"""Building the MuDAF report (docs/papers.md §3) from the metric files alone.

Table 2 (Vanilla-SFT / MuDAF-weak / MuDAF), Table 4 (head-count sweep), Fig. 3 (the base's
retrieval heads), Fig. 4 (head masking), Figs. 5/6 (target heads before/after), App. C (whole-layer
effect) and the retrieval heads of every model of the grid: each as CSV + Markdown and PNG,
collected in README.md. Published numbers stay in tables of their own; every claim is computed.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from zoomattn.reporting.common.published_rule import beside, rule_evals, rules_by_benchmark
from zoomattn.reporting.common.tables import (
    Row,
    cell,
    describe_seeds,
    scores_frame,
    select,
    wide,
    write_table,
)
from zoomattn.reporting.mudaf import figures, sections
from zoomattn.reporting.mudaf import heads as heads_of
from zoomattn.reporting.mudaf import published as paper
from zoomattn.reporting.mudaf.heads import Cell, mudaf_cells

KINDS = ("evals", "heads", "masking", "selections")
BASE_ROW = "base (no fine-tune)"
STRONG = 8  # the paper's head count: Table 2's MuDAF row is the strong cell closest to it


def roles(cells: list[Cell]) -> dict[str, str]:
    """Table 2's runs: Vanilla-SFT (heads 0), MuDAF-weak, MuDAF (a strong selection, n = 8 or the
    closest; the paper's weighted selection first)."""
    strong = sorted(
        (c for c in cells if c.heads and c.selection != "weak"),
        key=lambda c: (abs(c.heads - STRONG), c.selection != "weighted", c.heads),
    )
    found = {
        "Vanilla-SFT": [c.run for c in cells if c.heads == 0],
        "MuDAF-weak": [c.run for c in cells if c.heads and c.selection == "weak"],
        "MuDAF": [c.run for c in strong],
    }
    return {role: runs[0] for role, runs in found.items() if runs}


def _asked(spec: dict) -> set[int] | None:
    """Head counts the config's strong-selection entries ask for (None: no methods block)."""
    methods = (spec.get("mudaf") or {}).get("methods")
    if not methods:
        return None
    out: set[int] = set()
    for entry, v in methods.items():
        v = v or {}
        if v.get("method", entry) == "mudaf" and v.get("selection", "weighted") != "weak":
            heads = v.get("heads", STRONG)
            out |= set(heads if isinstance(heads, list) else [heads])
    return out


def sweep_rows(spec: dict, cells: list[Cell]) -> list[tuple[Row, int, int]]:
    """Table 4: (row, n asked, n trained) for the heads-0 run and every strong-selection run by
    head count. A count asked above the model's heads is a row pointing at the run that trained
    the clipped count, never a run of its own."""
    runs: dict[tuple[int, str], str] = {}
    for c in cells:
        if c.heads == 0 or c.selection != "weak":
            runs.setdefault((c.heads, c.selection if c.heads else "weighted"), c.run)
    entries = [(h, h, sel, run) for (h, sel), run in runs.items()]
    asked = _asked(spec)
    for n, t in ((int(k), int(v)) for k, v in (spec.get("clipped_heads") or {}).items()):
        if asked is None or n in asked:
            entries += [(n, t, sel, run) for (h, sel), run in runs.items() if h == t and h != n]
    out = []
    for n, t, sel, run in sorted(entries, key=lambda e: (e[0], e[2] != "weighted", e[2])):
        label = f"n={n}" + (f" → {t} (clipped: the model has {t} heads)" if n != t else "")
        out.append((Row(label + ("" if sel == "weighted" else f" [{sel}]"), run, "sweep"), n, t))
    return out


def published_table(table: dict) -> pd.DataFrame:
    t = pd.DataFrame.from_dict(table, orient="index", columns=[*paper.COLUMNS, "Avg."])
    t.index.name = "row"
    return t


def comparison(long: pd.DataFrame, benchmarks: dict, table: dict) -> pd.DataFrame:
    """Every cell the paper reports: ours, published, Δ = ours − published (printed precision)."""
    rows = []
    for r in long.itertuples():
        col = paper.column(benchmarks.get(r.benchmark, {}))
        pub = paper.lookup(table, r.row, col)
        if pub is None:
            continue
        ours = round(r.score, 1)
        line = {"row": r.row, "benchmark": r.benchmark, "paper column": col, "ours": ours}
        line |= {"ci_low": round(r.ci_low, 1), "ci_high": round(r.ci_high, 1), "published": pub}
        rows.append(line | {"Δ": round(ours - pub, 1)})
    cols = ["row", "benchmark", "paper column", "ours", "ci_low", "ci_high", "published", "Δ"]
    return pd.DataFrame(rows, columns=cols)


def row_means(long: pd.DataFrame, n_columns: int) -> dict[str, float]:
    """Each row's mean over the benchmarks, only where it has them all (as the paper's Avg.)."""
    g = long.groupby("row", sort=False)["score"]
    return {r: s.mean() for r, s in g if s.notna().sum() == n_columns}


class Report:
    """The README's parts and the files beside it."""

    def __init__(self, spec: dict, evals: list[dict], out: Path):
        self.spec, self.out = spec, Path(out)
        self.benchmarks = dict((spec.get("mudaf") or {}).get("benchmarks") or {})
        self.df = scores_frame(spec, evals)
        self.by_rule = scores_frame(spec, rule_evals(evals))  # scored by the published rules
        self.rules = rules_by_benchmark(evals)
        for b in dict.fromkeys(self.df["benchmark"]):
            self.benchmarks.setdefault(b, {})
        placements = list(dict.fromkeys(self.df["placement"])) or ["vanilla"]
        self.columns = [(b, p) for b in self.benchmarks for p in placements]
        self.many_placements = len(placements) > 1
        self.real = any("source" in s for s in self.benchmarks.values())
        self.kind = "" if self.real else " analogue"
        seeds = ", ".join(map(str, spec.get("seeds", [])))
        self.caption = f"preset {spec.get('preset', '?')}, seeds {seeds}, 95% bootstrap CI"
        self.heads_caption = (
            f"preset {spec.get('preset', '?')}, seeds {seeds}; retrieval scores and masking: one "
            "measurement per model, no CI" + ("" if self.real else "; synthetic analogue data")
        )
        self.parts: list[str] = []

    def scores(self, long: pd.DataFrame, name: str, title: str, note: str) -> str:
        shown = wide(long, self.columns, mean=True)
        if not self.many_placements:
            shown.columns = [c if c == "mean" else c.rsplit(" ", 1)[0] for c in shown.columns]
        return write_table(long, shown, self.out, name, title, note)

    def compared(self, long: pd.DataFrame, table: dict, name: str, title: str) -> str:
        compared = comparison(long, self.benchmarks, table)
        pairs = dict.fromkeys(zip(long["row"], long["run"], strict=True))
        rows = [Row(label, run, "") for label, run in pairs]
        by_rule = comparison(select(self.by_rule, rows, self.columns), self.benchmarks, table)
        compared = beside(compared, by_rule, ["row", "benchmark"], self.rules)
        compared.to_csv(self.out / f"{name}.csv", index=False)
        ours = [cell(*v) for v in compared[["ours", "ci_low", "ci_high"]].to_numpy()]
        shown = compared.assign(ours=ours).drop(columns=["ci_low", "ci_high"])
        if not self.real:
            names = {"benchmark": "benchmark (ours, analogue)", "paper column": "paper's benchmark"}
            shown = shown.rename(columns=names | {"published": f"paper's ({paper.MODEL})"})
        side = "the paper's own benchmarks" if self.real else "ours on synthetic analogues"
        body = (
            shown.to_markdown(index=False, floatfmt=".1f") if len(shown) else "No cell in common."
        )
        md = f"### {title} (Δ = ours − published; {side}; published = {paper.MODEL})\n\n{body}\n"
        (self.out / f"{name}.md").write_text(md)
        return md

    def published(self, table: dict, name: str, what: str) -> str:
        pub = published_table(table)
        pub.to_csv(self.out / f"{name}.csv")
        md = f"### {what}, {paper.SOURCE}\n\n" + pub.to_markdown(floatfmt=".1f") + "\n"
        (self.out / f"{name}.md").write_text(md)
        return md


def _diff(means: dict, a: str, b: str) -> str:
    return f"{means[a] - means[b]:+.1f}" if a in means and b in means else "–"


def _table2(r: Report, role_runs: dict) -> None:
    rows = [Row(BASE_ROW, r.spec.get("base", "base"), "base")]
    rows += [
        Row(role, role_runs[role], "role") for role in paper.OURS_IN_TABLE2 if role in role_runs
    ]
    t2 = select(r.df, rows, r.columns)
    missing = [role for role in paper.OURS_IN_TABLE2 if role not in role_runs]
    which = ", ".join(f"{role}: run {run}" for role, run in role_runs.items())
    note = f"{r.caption}. {which}; mean over our benchmarks where a row has them all." + (
        f" Not in this grid: {', '.join(missing)}." if missing else ""
    )
    title = f"Table 2{r.kind}: Vanilla-SFT, MuDAF-weak and MuDAF by benchmark"
    r.parts.append(r.scores(t2, "table2", title, note) if len(t2) else "No Table 2 evaluations.\n")
    means, pub = row_means(t2, len(r.columns)), {k: v[-1] for k, v in paper.TABLE2.items()}
    r.parts.append(
        "Computed, mean over our benchmarks: "
        + "; ".join(
            f"{a} − {b} {_diff(means, a, b)} (paper {_diff(pub, a, b)} Avg.)"
            for a, b in (("MuDAF", "Vanilla-SFT"), ("MuDAF-weak", "Vanilla-SFT"))
        )
        + f"; MuDAF − base {_diff(means, 'MuDAF', BASE_ROW)}. {paper.TABLE2_NOTE}\n"
    )
    r.parts.append(r.published(paper.TABLE2, "table2_published", "Table 2"))
    r.parts.append(r.compared(t2, paper.TABLE2, "table2_comparison", "Table 2 beside the paper's"))


def _table4(r: Report, cells: list[Cell], role_runs: dict) -> None:
    sweep = sweep_rows(r.spec, cells)
    t4 = select(r.df, [row for row, _, _ in sweep], r.columns)
    counts = {row.label: (n, t) for row, n, t in sweep}
    t4.insert(2, "n", [counts[lab][0] for lab in t4["row"]])
    t4.insert(3, "trained", [counts[lab][1] for lab in t4["row"]])
    clipped = {int(k): v for k, v in (r.spec.get("clipped_heads") or {}).items()}
    note = f"{r.caption}. n = 0 is Vanilla-SFT; strong selection (weighted unless marked)." + (
        " Clipped: "
        + ", ".join(f"n={n} trains {t} heads (all the model has)" for n, t in clipped.items())
        + "; such a row repeats the run that trained it."
        if clipped
        else ""
    )
    title = f"Table 4{r.kind}: MuDAF by number of target heads"
    if not len(t4):
        r.parts.append("### Table 4\n\nNo evaluations of the head-count sweep.\n")
        return
    r.parts.append(r.scores(t4, "table4", title, note))
    labels = list(dict.fromkeys(t4["row"]))
    ref_rows = [Row(BASE_ROW, r.spec.get("base", "base"), "base")]
    if "MuDAF-weak" in role_runs:
        ref_rows.append(Row("MuDAF-weak", role_runs["MuDAF-weak"], "weak"))
    refs = select(r.df, ref_rows, r.columns)
    figures.head_sweep(t4, labels, refs, r.out / "table4_heads.png", f"{title} ({r.caption})")
    r.parts.append(f"![Table 4{r.kind}: score vs target heads](table4_heads.png)\n")
    means = {k: v for k, v in row_means(t4, len(r.columns)).items() if "clipped" not in k}
    best = max(means, key=means.get) if means else None
    pub_best = max(paper.TABLE4, key=lambda k: paper.TABLE4[k][-1])
    r.parts.append(
        (f"Computed: best mean over our benchmarks at {best} ({means[best]:.1f}); " if best else "")
        + f"the paper's best Avg. at {pub_best} ({paper.TABLE4[pub_best][-1]}). "
        + f"{paper.TABLE4_NOTE}\n"
    )
    r.parts.append(r.published(paper.TABLE4, "table4_published", "Table 4"))
    r.parts.append(r.compared(t4, paper.TABLE4, "table4_comparison", "Table 4 beside the paper's"))


def build_report(spec: dict, inputs: dict[str, list], out: Path) -> None:
    heads, masking, selections = inputs["heads"], inputs["masking"], inputs["selections"]
    r = Report(spec, inputs["evals"], out)
    cells, base = mudaf_cells(spec), spec.get("base", "base")
    role_runs = roles(cells)
    hb, sb = {h["model"]: h for h in heads}, {s["model"]: s for s in selections}
    many = len(spec.get("seeds", [])) > 1
    seed_note = describe_seeds(spec.get("seeds", []))
    scale_note = (
        "The benchmarks are the paper's own: the comparison tables give Δ = ours − published."
        if r.real
        else "Our benchmarks are synthetic analogues of the paper's (tiny/smoke scale, small "
        "models trained here): compare trends, not values."
    )
    mapped = [f"{b} → {paper.column(s)}" for b, s in r.benchmarks.items() if paper.column(s)]
    rh = (spec.get("mudaf") or {}).get("retrieval_heads") or {}
    some = hb.get(base) or (heads[0] if heads else {})
    who = (
        f"{some.get('n_examples', rh.get('examples', '?'))} questions of "
        f"{some.get('benchmark', rh.get('benchmark', '?'))}, attended: passage mass > "
        f"{some.get('threshold', rh.get('threshold', '?'))}"
    )
    r.parts += [
        f"# MuDAF part: {r.caption}\n",
        f"Rows: **{BASE_ROW}** is MuDAF's base model ({base}). **Vanilla-SFT** (n = 0) fine-tunes "
        "it on the CLM loss alone; **MuDAF n=k** adds the contrastive loss on k target heads drawn "
        "by their retrieval score in the base (weighted: the paper's strategy); **MuDAF-weak** on "
        "heads scoring below 0.1. Scores ×100.\n",
        f"{seed_note} {scale_note} Paper columns our benchmarks map to: "
        f"{', '.join(mapped) or 'none'}. Published numbers ({paper.MODEL}, paper scale) are in "
        f"tables of their own. Retrieval scores: {who}.\n",
        f"## Tables 2 and 4{r.kind}\n",
    ]
    if not mapped:
        r.parts.append("No benchmark names a paper column (`published:`): no Δ to compute.\n")
    _table2(r, role_runs)
    _table4(r, cells, role_runs)
    sections.fig3(r, hb.get(base), base, who)
    first = {role: next(c.model for c in cells if c.run == run) for role, run in role_runs.items()}
    sections.fig4(r, masking, base, {BASE_ROW: base} | first)
    runs = [role_runs[k] for k in ("MuDAF", "MuDAF-weak") if k in role_runs]
    base_heads = hb.get(base)
    sections.fig56(
        r, heads_of.target_heads(cells, runs, base_heads, hb, sb, many), "MuDAF-weak" in role_runs
    )
    summary, per_layer, deltas = heads_of.layer_effect(cells, base_heads, hb, sb, many)
    panels = sections.delta_panels(deltas, cells, role_runs, base_heads, hb)
    sections.appendix_c(r, summary, per_layer, panels)
    sections.across(r, spec, heads)
    missing = [f"{c.model} (selection)" for c in cells if c.heads and c.model not in sb]
    missing += [f"{m} (retrieval heads)" for m in [base, *(c.model for c in cells)] if m not in hb]
    if missing:
        r.parts.append(f"Inputs missing (their rows are left out): {', '.join(missing)}.\n")
    (r.out / "README.md").write_text("\n".join(r.parts))
