"""The rules that produced the papers' published numbers, by name (``published_rule:`` in config).

Our standard metrics (``metrics.METRICS``, docs/papers.md §0) are one consistent set across the
grid. A published column was scored by its authors' or its benchmark's own code, which may differ;
to put our number beside a published one we score our predictions by that column's rule as well.
Each ``Rule`` names the code its logic follows (``source``), and scores one prediction against its
record: ``RULES[name].score(prediction, record) -> float`` in [0, 1].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from zoomattn.evaluation import metrics


@dataclass(frozen=True)
class Rule:
    name: str
    score: Callable[[str, dict], float]
    source: str  # the repository and function whose logic this follows
    summary: str  # the rule in one line, for the reference doc and the fidelity table


_RULES = [
    Rule(
        "squad_em",
        lambda pred, rec: metrics.exact_match(pred, rec["answers"]),
        "SQuAD v1.1 evaluate-v1.1.py, exact_match_score (normalisation as LongBench's)",
        "normalised prediction equals a normalised gold answer",
    ),
    Rule(
        "longbench_f1",
        lambda pred, rec: metrics.token_f1(pred, rec["answers"]),
        "THUDM/LongBench metrics.py, qa_f1_score (best over gold answers)",
        "token F1 after LongBench normalisation, best over gold answers",
    ),
    Rule(
        "faitheval",
        metrics.faitheval,
        "SalesforceAIResearch/FaithEval README, the valid-phrase rule",
        "unanswerable/inconsistent: a valid phrase occurs; counterfactual: letter or choice text",
    ),
]
RULES: dict[str, Rule] = {r.name: r for r in _RULES}
