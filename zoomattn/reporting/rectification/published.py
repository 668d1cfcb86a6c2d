"""Published numbers of the attention-rectification paper (docs/papers.md §2: Llama-3.1-8B-Instruct,
rank-64 update, gold documents + the first 3 DPR-retrieved non-gold documents, paper scale).

Rows are keyed by our Table 1 row labels ("vanilla" is the base model without fine-tuning, "LoRA",
"ξ=0", ...), columns by the paper's benchmark names and the query placement (reverse: the query
before the documents; vanilla: after them). Our synthetic benchmarks are analogues of these, not the
same tasks: the report prints the two side by side and never mixes them into one number.
"""

from __future__ import annotations

from zoomattn.reporting.common.published_rule import Published
from zoomattn.reporting.common.tables import paper_column

COLUMNS = ("NQ", "TriviaQA", "HotpotQA", "2wiki", "ASQA")
PLACEMENTS = ("reverse", "vanilla")  # the paper's column order within a benchmark
MODEL = "Llama-3.1-8B-Instruct"

TABLE1 = {  # NQ rev, NQ van, TQA rev, TQA van, Hotpot rev, Hotpot van, 2wiki rev, 2wiki van,
    #         ASQA rev, ASQA van, mean (EM as "contains"; ASQA: short answers found)
    "vanilla": [52.4, 46.7, 52.1, 45.6, 61.4, 54.3, 53.7, 52.1, 42.0, 41.8, 50.2],
    "LoRA": [65.7, 62.6, 72.6, 71.3, 86.1, 85.6, 95.3, 96.4, 42.3, 42.2, 72.0],
    "ξ=0": [65.8, 64.5, 72.9, 72.3, 86.0, 86.2, 95.3, 96.4, 41.4, 41.9, 72.3],
    "ξ=1": [64.9, 64.4, 73.9, 73.1, 86.6, 86.1, 95.6, 96.5, 44.3, 44.3, 73.0],
    "ξ=3": [67.7, 64.2, 74.1, 73.1, 87.3, 86.3, 97.6, 97.2, 47.8, 46.4, 74.2],
    "ξ=5": [67.6, 64.8, 74.5, 73.7, 87.1, 86.1, 97.3, 97.5, 47.2, 46.1, 74.2],
    "ξ=10": [66.9, 66.4, 74.1, 73.4, 87.2, 85.8, 97.9, 97.4, 47.3, 46.2, 74.3],
}
XI_ROWS = ("ξ=0", "ξ=1", "ξ=3", "ξ=5", "ξ=10")  # the paper's ξ sweep, in order

SOURCE = f"published, {MODEL}, paper scale (attention-rectification paper, Table 1)"

# How each column was scored (§6: "EM" as containment, ASQA's share of short answers found, as
# ALCE scores them); the paper states no decoding and no code is public.
_ALCE = "the paper's §6 metrics, as princeton-nlp/ALCE eval.py scores them"
SCORING = {col: Published("alce_contains", None, _ALCE) for col in COLUMNS[:-1]}
SCORING["ASQA"] = Published("alce_str_em", None, _ALCE)

# Spellings a benchmark's `published:` key may use for a paper column.
ALIASES = {
    "nq": "NQ",
    "naturalquestions": "NQ",
    "tqa": "TriviaQA",
    "triviaqa": "TriviaQA",
    "hotpot": "HotpotQA",
    "hotpotqa": "HotpotQA",
    "2wiki": "2wiki",
    "2wikimultihopqa": "2wiki",
    "asqa": "ASQA",
}

MARGIN_QUOTE = (
    "“we can observe that most of the margins of Llama lies about 6, so with ξ=3, (margin between "
    "(-3,3)), the model can effectively distinguish irrelevant tokens, and larger values like ξ=5 "
    "or ξ=10 also performs good as we show in Table 1.” (paper, §6.3, on its Fig. 5: the margin "
    "is the p90 − p10 spread of the attention scores)"
)
FIG3_NOTE = (
    "The paper's Fig. 3 (answer-token attention gap, × 1000) is a chart only: its text gives no "
    "numbers, so there is nothing to compare ours with. It claims the trend only: “the "
    "rectification helps to recognize the answer and filter out noisy information” (and leaves "
    "ASQA out: long-form, its answer is not written in the documents)."
)
FIG4_NOTE = (
    "The paper's Fig. 4 (g variants at ξ = 3) is a chart only: its text gives no numbers, so there "
    "is nothing to compare ours with. Its claim, the trend to look for: “simply use tanh(x) or "
    "tanh(x)+x has suboptimal performance and replacing tanh with sigmoid(x)-0.5 also helps the "
    "performance”."
)


def column(spec: dict) -> str | None:
    """The paper column a configured benchmark is (real data) or mirrors (synthetic), if any."""
    return paper_column(spec, ALIASES)


def lookup(row: str, paper_column: str, placement: str) -> float | None:
    """The published number of one of our cells, or None where the paper has none."""
    if row not in TABLE1 or paper_column not in COLUMNS or placement not in PLACEMENTS:
        return None
    return TABLE1[row][2 * COLUMNS.index(paper_column) + PLACEMENTS.index(placement)]


def mean(row: str) -> float | None:
    return TABLE1[row][-1] if row in TABLE1 else None
