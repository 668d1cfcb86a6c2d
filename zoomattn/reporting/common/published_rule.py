"""Our score under a published column's own rule, read from the evaluation files, and how each
paper scored and decoded its columns (``Published``, kept with each paper's numbers).

An evaluation whose benchmark names a ``published_rule`` (config) carries, beside its standard
score, the block ``published_rule: {rule, score, ci_low, ci_high, n, subsets?}``; every evaluation
carries its ``decoding`` (absent in files written before decoding was recorded: those were greedy).
``rule_evals`` turns each evaluation with a block into one that reads like a standard evaluation
scored by the rule, so a report computes the rule's cell, seed mean and interval with the very
code that computes the standard one.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

BLOCK = "published_rule"
BLOCK_KEYS = ("rule", "score", "ci_low", "ci_high")


@dataclass(frozen=True)
class Published:
    """How a paper scored one published column: ``rule`` (a name of ``evaluation.official.RULES``),
    the authors' decoding (``temperature`` 0 = greedy, None = not stated; one pass) and where we
    read both (``source``)."""

    rule: str
    temperature: float | None
    source: str
    max_new_tokens: int | None = None

    @property
    def decoding(self) -> str:
        if self.temperature is None:
            return "not stated"
        text = "greedy" if self.temperature == 0 else f"sampled T={self.temperature:g}, one pass"
        return text + (f", {self.max_new_tokens} new tokens" if self.max_new_tokens else "")


def block_of(e: dict) -> dict | None:
    """The evaluation's published-rule block, checked; None where its benchmark names no rule."""
    block = e.get(BLOCK)
    if block is None:
        return None
    missing = [k for k in BLOCK_KEYS if k not in (block or {})]
    if missing:
        where = f"{e.get('model', '?')} on {e.get('benchmark', '?')}/{e.get('split', '?')}"
        raise ValueError(f"evaluation of {where}: {BLOCK} block lacks {', '.join(missing)}")
    return block


def rule_eval(e: dict) -> dict | None:
    """The evaluation as scored by its published rule (metric = the rule's name), or None."""
    block = block_of(e)
    if block is None:
        return None
    scores = {k: block[k] for k in ("score", "ci_low", "ci_high")}
    return {**e, **scores, "metric": block["rule"], "n": block.get("n", e.get("n"))} | {
        "subsets": block.get("subsets") or {}
    }


def rule_evals(evals: list[dict]) -> list[dict]:
    """The evaluations that carry a published-rule block, each as scored by that rule."""
    return [r for r in map(rule_eval, evals) if r is not None]


def decoding_text(decoding: dict | None) -> str:
    """Our decoding in a few words: "greedy" or "sampled T=0.5, top-p 0.9 ×3 seeds"."""
    d = decoding or {}
    temperature = float(d.get("temperature") or 0.0)
    if temperature == 0:
        return "greedy"
    text = f"sampled T={temperature:g}"
    top_p = d.get("top_p")
    if top_p is not None and float(top_p) < 1:
        text += f", top-p {float(top_p):g}"
    seeds = d.get("seeds") or []
    return text + (f" ×{len(seeds)} seeds" if len(seeds) > 1 else ", one pass")


def decoding_differs(expected: Published, decoding: dict | None) -> bool:
    """Whether our decoding is not the authors' (greedy vs sampled, or another temperature); the
    number of sampled passes does not count: ours averages them, an estimate of the same mean."""
    if expected.temperature is None:
        return False
    return float((decoding or {}).get("temperature") or 0.0) != float(expected.temperature)


def rules_by_benchmark(evals: list[dict]) -> dict[str, str]:
    """benchmark -> the published rule its evaluations scored (names joined if files disagree)."""
    found: dict[str, list[str]] = {}
    for e in evals:
        if (block := block_of(e)) is not None and block["rule"] not in found.get(
            e["benchmark"], []
        ):
            found.setdefault(e["benchmark"], []).append(block["rule"])
    return {b: " / ".join(names) for b, names in found.items()}


def beside(
    compared: pd.DataFrame, by_rule: pd.DataFrame, on: list[str], rules: dict[str, str]
) -> pd.DataFrame:
    """A report's comparison table with the same comparison under the published rules appended:
    ``rule``, ``ours (rule)`` and ``Δ (rule)`` (``by_rule``: the comparison computed on
    ``rule_evals``). Unchanged where no evaluation scored a published rule."""
    if by_rule.empty or compared.empty:
        return compared
    extra = by_rule[[*on, "ours", "Δ"]].rename(columns={"ours": "ours (rule)", "Δ": "Δ (rule)"})
    out = compared.merge(extra, on=on, how="left")
    out[["ours (rule)", "Δ (rule)"]] = out[["ours (rule)", "Δ (rule)"]].astype(object).fillna("–")
    # an OpAmp subset's line names its benchmark "faitheval / counterfactual"
    rule = out["benchmark"].map(lambda b: rules.get(str(b).split(" / ")[0], "–"))
    out.insert(len(compared.columns), "rule", rule)
    return out
