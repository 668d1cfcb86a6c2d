"""The papers' qualitative claims (A beats B) tested on our per-example scores.

Each claim uses the paired bootstrap of ``bootstrap.difference_ci``: a side stacks its runs
(seeds, and cells pooled into one side) as rows and concatenates its eval sets as columns,
examples aligned by sorted id. A claim holds when the difference is significant in the claimed
direction, is contradicted when significant the other way, and is "not shown" otherwise. The
published verdict compares the paper's own point numbers (its average over its columns).

Since the published side was scored by each column's own rule, our side takes, for every eval set
whose benchmark names a published rule, the per-example scores under that rule
(``score_published``), and our standard metric elsewhere; ``scored_by`` says which, per benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from zoomattn import grid
from zoomattn.reporting import lkg, mudaf
from zoomattn.reporting.common import bootstrap
from zoomattn.reporting.leaderboard.slices import (
    OPAMP,
    PAPERS,
    base_of,
    block_of,
    cells_of,
    number,
    study_spec,
)
from zoomattn.reporting.lkg import published as paper_lkg
from zoomattn.reporting.mudaf import published as paper_mudaf
from zoomattn.reporting.opamp import published
from zoomattn.reporting.rectification import published as paper_rect
from zoomattn.splits import Split

CLAIM_COLUMNS = ["paper", "table", "claim", "ours", "scored_by", "verdict_ours", "published"]
CLAIM_COLUMNS += ["verdict_published", "difference", "diff_ci_low", "diff_ci_high", "examples"]
VERDICT = {"higher": "holds", "lower": "contradicted", "n.s.": "not shown"}
SATURATION_SLACK = 1.0  # points: the paper's "not much improvement" beyond 8 heads
PLACE_FLIP = ("reverse", "vanilla")  # rectification: the placement claimed better, the other

# ---- sides and tests ---------------------------------------------------------------------------

Set = tuple[str, str]  # (benchmark, split)
Predictions = dict[
    tuple[str, str, str], dict[str, float]
]  # (model, benchmark, split) -> id -> score


@dataclass(frozen=True)
class Scoring:
    """Per-example scores of every eval set: the published rule's where the evaluation scored one,
    our standard metric's elsewhere; ``rules`` / ``metrics``: what each set was scored by."""

    values: Predictions
    rules: dict[tuple[str, str, str], str]
    metrics: dict[tuple[str, str, str], str]

    def scored_by(self, keys) -> str:
        """Which scores a claim's sets used, per benchmark."""
        groups: dict[str, set[str]] = {}
        for k in keys:
            name = (
                f"published rule {self.rules[k]}"
                if k in self.rules
                else f"standard {self.metrics.get(k, '?')} (no published rule)"
            )
            groups.setdefault(name, set()).add(k[1])
        return "; ".join(f"{n}: {', '.join(sorted(b))}" for n, b in sorted(groups.items()))


def scoring(evals: list[dict], predictions: Predictions, by_rule: Predictions | None) -> Scoring:
    """The published rule's scores of each set that has them (``by_rule``), ours elsewhere."""
    by_rule = by_rule or {}
    rules, metrics = {}, {}
    for e in evals:
        key = (e["model"], e["benchmark"], e["split"])
        metrics[key] = e.get("metric", "?")
        if key in by_rule:
            rules[key] = (e.get("published_rule") or {}).get("rule", "?")
    return Scoring({k: by_rule.get(k, v) for k, v in predictions.items()}, rules, metrics)


def _keys(c: Claim) -> set[tuple[str, str, str]]:
    """(model, benchmark, split) of every run of a claim on its sets."""
    return {
        (run[s], *s)
        for side, k in ((c.a, 0), (c.b, 1))
        for run in side.runs
        for s in (p[k] for p in c.pairs)
        if s in run
    }


@dataclass(frozen=True)
class Side:
    """One side of a claim: its runs (each a mapping eval set -> the model evaluated there)."""

    runs: tuple[dict, ...]

    @property
    def empty(self) -> bool:
        return not self.runs


def _side(
    cells: dict[str, dict], sets: list[Set], by_placement: bool = False, served: dict | None = None
) -> Side:
    """The runs of these cells, one per (run, seed); with ``by_placement`` a cell answers only for
    the sets of its own placement, and a run joins its placements' cells; a cell trained on one
    ``dataset`` (rectification's per_dataset) only for the benchmarks ``served`` by it."""
    runs: dict[tuple, dict] = {}
    for m, c in cells.items():
        for b, s in sets:
            if c.get("dataset") not in (None, (served or {}).get(b)):
                continue
            if not by_placement or c.get("placement") == s:
                runs.setdefault((c.get("run"), c.get("seed")), {})[(b, s)] = m
    return Side(tuple(runs.values()))


def _pooled(predictions: dict, side: Side, sets: list[Set], ids: list[list[str]]) -> np.ndarray:
    cols = []
    for s, keep in zip(sets, ids, strict=True):
        scores = [predictions[(run[s], *s)] for run in side.runs]
        cols.append(np.array([[float(x[i]) for i in keep] for x in scores]))
    return np.concatenate(cols, axis=1)


def _matrices(predictions: dict, a: Side, b: Side, pairs: list[tuple[Set, Set]]):
    """[runs, examples] of both sides over the set pairs, examples aligned by sorted id."""
    missing = [
        f"{run.get(s, '?')} on {s[0]}/{s[1]}"
        for side, k in ((a, 0), (b, 1))
        for run in side.runs
        for s in (p[k] for p in pairs)
        if (run.get(s), *s) not in predictions
    ]
    if missing:
        raise ValueError(f"fidelity claims: no predictions of {'; '.join(missing)}")
    ids = []
    for sa, sb in pairs:
        common = set.intersection(
            *[set(predictions[(r[sa], *sa)]) for r in a.runs],
            *[set(predictions[(r[sb], *sb)]) for r in b.runs],
        )
        if not common:
            raise ValueError(f"fidelity claims: no example in common on {sa} and {sb}")
        ids.append(sorted(common))
    return (
        _pooled(predictions, a, [p[0] for p in pairs], ids),
        _pooled(predictions, b, [p[1] for p in pairs], ids),
    )


def _test(predictions, a: Side, b: Side, pairs) -> tuple[float, float, float, int, str]:
    """(Δ, low, high) ×100 of a − b, the examples, and the evidence as text."""
    x, y = _matrices(predictions, a, b, pairs)
    diff, lo, hi = (v * 100 for v in bootstrap.difference_ci(x, y))
    text = f"{x.mean() * 100:.1f} vs {y.mean() * 100:.1f}: Δ {diff:+.1f} [{lo:+.1f}, {hi:+.1f}]"
    return diff, lo, hi, x.shape[1], text + f" ({len(x)} vs {len(y)} runs, {x.shape[1]} examples)"


@dataclass(frozen=True)
class Claim:
    """A claim "a beats b" of one paper table, on these set pairs (a's set, b's set)."""

    table: str
    text: str
    a: Side
    b: Side
    pairs: list[tuple[Set, Set]]
    published: tuple[float, float, str]  # a's published number, b's, what they are


def _judge(paper: str, c: Claim, predictions: dict) -> dict | None:
    """The claim's line; None where one side has no cell in the grid."""
    if c.a.empty or c.b.empty or not c.pairs:
        return None
    diff, lo, hi, n, ours = _test(predictions, c.a, c.b, c.pairs)
    line = {"paper": paper, "table": c.table, "claim": c.text, "ours": ours}
    line["verdict_ours"] = VERDICT[bootstrap.verdict(lo, hi)]
    pub_a, pub_b, what = c.published
    line["published"] = f"{pub_a:.1f} vs {pub_b:.1f} ({what})"
    line["verdict_published"] = "holds" if pub_a > pub_b else "does not hold"
    return line | {"difference": diff, "diff_ci_low": lo, "diff_ci_high": hi, "examples": n}


def _mean(values) -> float:
    return float(np.mean(values))


def _same(sets: list[Set]) -> list[tuple[Set, Set]]:
    return [(s, s) for s in sets]


def _opamp_claims(spec: dict, predictions: dict) -> list[Claim]:
    benchmarks = spec.get("benchmarks") or {}
    cells = cells_of(spec, OPAMP)
    every = grid.split_names({"benchmarks": benchmarks})
    noisy = [s for s in every if Split.parse(s[1]).noise_ratio == 0.9]
    faith = [s for s in every if published.column(s[0], benchmarks[s[0]]) == "FaithEval"]

    def side(method: str, k: float | None, sets: list[Set]) -> Side:
        def keep(c: dict) -> bool:
            return k is None or number((c.get("values") or {}).get("K")) == k

        return _side(
            {m: c for m, c in cells.items() if c.get("method") == method and keep(c)}, sets
        )

    t3, t4, t5 = published.TABLE3, published.TABLE4, published.TABLE5
    at9 = t4["noise_ratios"].index(0.9)
    t4_avg = {
        lab: _mean([t4[c][lab][at9] for c in ("CoQA", "QuAC", "QReCC")]) for lab in t4["CoQA"]
    }
    t4_pub = (t4_avg["K=10"], t4_avg["QLoRA"], "mean of CoQA, QuAC, QReCC at noise 0.9")
    k10, k20, qlora = side("opamp", 10, every), side("opamp", 20, every), side("qlora", None, every)
    return [
        Claim("Table 3", "OpAmp K=10 beats QLoRA", k10, qlora, _same(every),
              (t3["K=10"][0], t3["QLoRA"][0], "Avg")),
        Claim("Table 3", "moderate K (K=10) beats K=20", k10, k20, _same(every),
              (t3["K=10"][0], t3["K=20"][0], "Avg")),
        Claim("Table 4", "K=10 beats QLoRA at noise 0.9", side("opamp", 10, noisy),
              side("qlora", None, noisy), _same(noisy), t4_pub),
        Claim("Table 5", "K=10 hallucinates less than K=20 on FaithEval",
              side("opamp", 10, faith), side("opamp", 20, faith), _same(faith),
              (t5["K=10"][-1], t5["K=20"][-1], "FaithEval Avg")),
    ]  # fmt: skip


def _rect_claims(spec: dict, predictions: dict) -> list[Claim]:
    cells = cells_of(spec, "rectification")
    block = block_of(spec, "rectification")
    sets = grid.split_names(block)
    served = {b: s.get("train") for b, s in block["benchmarks"].items()}
    if block.get("train_scheme") == "per_dataset":  # a set no model trains for: the base only
        sets = [(b, p) for b, p in sets if served[b]]

    def side(keep, at: list[Set] = sets) -> Side:
        chosen = {m: c for m, c in cells.items() if keep(c, c.get("values") or {})}
        return _side(chosen, at, by_placement=True, served=served)

    def xi3(c: dict, v: dict) -> bool:  # Table 1's sweep (g = max) from ξ = 3 on
        return c.get("method") == "rectify" and v.get("g", "max") == "max" and _xi(v) >= 3

    def lora(c: dict, _: dict) -> bool:
        return c.get("method") == "qlora"

    base = Side(({s: base_of(spec, "rectification") for s in sets},))
    flips = [(r, v) for r in sets for v in sets if r[0] == v[0] and (r[1], v[1]) == PLACE_FLIP]
    t1, cols = paper_rect.TABLE1, len(paper_rect.COLUMNS)
    xi_pub = _mean([t1[r][-1] for r in paper_rect.XI_ROWS if float(r[2:]) >= 3])
    by_place = {p: _mean(t1["LoRA"][i : 2 * cols : 2]) for i, p in enumerate(paper_rect.PLACEMENTS)}
    return [
        Claim("Table 1", "LoRA fine-tuning beats the untuned model", side(lora), base,
              _same(sets), (t1["LoRA"][-1], t1["vanilla"][-1], "mean")),
        Claim("Table 1", "ξ ≥ 3 beats LoRA", side(xi3), side(lora), _same(sets),
              (xi_pub, t1["LoRA"][-1], "mean of the ξ = 3, 5, 10 rows vs LoRA's")),
        Claim("Table 1", "the reverse placement beats vanilla (LoRA)",
              side(lora, [r for r, _ in flips]), side(lora, [v for _, v in flips]), flips,
              (by_place["reverse"], by_place["vanilla"], "LoRA, mean per placement")),
    ]  # fmt: skip


def _xi(values: dict) -> float:
    """A cell's numeric ξ (-inf for ``auto``: resolved per base, no sweep value)."""
    xi = number(values.get("xi"))
    return -np.inf if xi is None else xi


def _mudaf_claims(spec: dict, predictions: dict) -> list[Claim | dict]:
    sub = study_spec(spec, "mudaf")
    sets = grid.split_names(sub["mudaf"])
    cells = mudaf.mudaf_cells(sub)
    roles = mudaf.roles(cells)

    def side(keep) -> Side:
        return _side({c.model: sub["cells"][c.model] for c in cells if keep(c)}, sets)

    def heads(n: int) -> Side:  # n target heads by the paper's (weighted) selection
        return side(lambda c: c.heads == n and (n == 0 or c.selection == "weighted"))

    t2, t4 = paper_mudaf.TABLE2, paper_mudaf.TABLE4
    strong = side(lambda c: c.run == roles.get("MuDAF"))
    weak = side(lambda c: c.run == roles.get("MuDAF-weak"))
    out: list[Claim | dict] = [
        Claim("Table 4", "MuDAF n=8 beats Vanilla SFT (n=0)", heads(8), heads(0), _same(sets),
              (t4["n=8"][-1], t4["n=0"][-1], "Avg.")),
        Claim("Table 2", "MuDAF beats MuDAF-weak", strong, weak, _same(sets),
              (t2["MuDAF"][-1], t2["MuDAF-weak"][-1], "Avg.")),
    ]  # fmt: skip
    above = sorted({c.heads for c in cells if c.heads > 8 and c.selection == "weighted"})
    if sets and above and not heads(8).empty and not heads(0).empty:
        out.append(_saturation(predictions, heads, above, _same(sets)))
    return out


def _saturation(predictions: dict, heads, above: list[int], pairs) -> dict:
    """ "n = 8 heads saturates": no n > 8 significantly above n = 8, and n = 8 significantly above
    n = 0 (else not shown). Published: max over n > 8 of Avg. − n=8's ≤ 1 point, n=8 > n=0."""
    g = _test(predictions, heads(8), heads(0), pairs)
    beyond = [(n, _test(predictions, heads(n), heads(8), pairs)) for n in above]
    shown = g[1] > 0 and all(bootstrap.verdict(t[1], t[2]) != "higher" for _, t in beyond)
    ours = f"n=8 − n=0: {g[4]}; " + "; ".join(
        f"n={n} − n=8: Δ {t[0]:+.1f} [{t[1]:+.1f}, {t[2]:+.1f}]" for n, t in beyond
    )
    t4 = paper_mudaf.TABLE4
    over = max(v[-1] for k, v in t4.items() if int(k[2:]) > 8) - t4["n=8"][-1]
    holds = over <= SATURATION_SLACK and t4["n=8"][-1] > t4["n=0"][-1]
    line = {"paper": PAPERS["mudaf"], "table": "Table 4", "claim": "n = 8 heads saturates"}
    line |= {"ours": ours, "verdict_ours": "holds" if shown else "not shown"}
    line["published"] = (
        f"best n>8 Avg. − n=8's: {over:+.1f} (≤ {SATURATION_SLACK:g}); n=8 − n=0: "
        f"{t4['n=8'][-1] - t4['n=0'][-1]:+.1f}"
    )
    line["verdict_published"] = "holds" if holds else "does not hold"
    return line | {"difference": g[0], "diff_ci_low": g[1], "diff_ci_high": g[2], "examples": g[3]}


def _lkg_claims(spec: dict, predictions: dict) -> list[Claim]:
    sets = grid.split_names(block_of(spec, "lkg"))
    cells = cells_of(spec, "lkg")

    def side(label: str) -> Side:  # the cells Table 2 names ``label`` (lkg.row_label)
        chosen = {
            m: c
            for m, c in cells.items()
            if lkg.row_label(c.get("method"), c.get("values") or {}) == label
        }
        return _side(chosen, sets)

    avg = {row: _mean(v) for row, v in paper_lkg.PUBLISHED.items()}
    full, ft = paper_lkg.FULL_ROW, paper_lkg.FT_ROW

    def beats(table: str, text: str, row: str) -> Claim:
        pub = (avg[full], avg[row], "mean of its five columns")
        return Claim(table, text, side(full), side(row), _same(sets), pub)

    out = [
        beats("Tables 1/2", "LKG-RALM beats LoRA fine-tuning", ft),
        beats("Table 2", "w/o RPF collapses (the full method is above it)", "w/o RPF"),
    ]
    for row in ("w/o LPR", "w/o ELS", "w/o Auxiliary Loss"):
        out.append(beats("Table 2", f"{row[4:]} helps (the full method beats {row})", row))
    return out


CLAIMS = {OPAMP: _opamp_claims, "rectification": _rect_claims}
CLAIMS |= {"mudaf": _mudaf_claims, "lkg": _lkg_claims}


def claims(
    spec: dict, evals: list[dict], predictions: Predictions, by_rule: Predictions | None = None
) -> pd.DataFrame:
    """One line per claim of the papers whose cells the grid has (see the module docstring).
    ``predictions``: (model, benchmark, split) -> {example id: score in [0, 1]} by our standard
    metric; ``by_rule``: the same for the sets scored by a published rule (``score_published``);
    ``evals`` name the rule and metric of each set."""
    scores = scoring(evals, predictions, by_rule)
    lines = []
    for study, of in CLAIMS.items():
        present = spec.get("benchmarks") if study == OPAMP else block_of(spec, study)
        models = {base_of(spec, study), *cells_of(spec, study)}
        for c in of(spec, scores.values) if present else []:
            if isinstance(c, dict):  # computed whole (saturation): every set of the study's cells
                keys = [k for k in scores.values if k[0] in models]
                lines.append(c | {"scored_by": scores.scored_by(keys)})
            elif line := _judge(PAPERS[study], c, scores.values):
                lines.append(line | {"scored_by": scores.scored_by(_keys(c))})
    return pd.DataFrame(lines, columns=CLAIM_COLUMNS)
