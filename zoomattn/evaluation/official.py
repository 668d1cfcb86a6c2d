"""The rules that produced the papers' published numbers, by name (``published_rule:`` in config).

Our standard metrics (``metrics.METRICS``, docs/papers.md §0) are one consistent set across the
grid. A published column was scored by its authors' or its benchmark's own code, which may differ;
to put our number beside a published one we score our predictions by that column's rule as well.
Each ``Rule`` names the code its logic follows (``source``), and scores one prediction against its
record: ``RULES[name].score(prediction, record) -> float`` in [0, 1].

The rules reproduce their sources' behaviour, quirks included (each quirk is named where it is
implemented), since the published numbers were produced with them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from zoomattn.evaluation import metrics

# SQuAD's normalize_answer, which OpAmp's and ALCE's scripts copy: lower-case, delete punctuation,
# drop a/an/the, squeeze whitespace. LongBench's (metrics.normalize_answer) is the same function.
normalize = metrics.normalize_answer


@dataclass(frozen=True)
class Rule:
    name: str
    score: Callable[[str, dict], float]
    source: str  # the repository and function whose logic this follows
    summary: str  # the rule in one line, for the reference doc and the fidelity table


# --- OpAmp (wuhy68/OpampAdapter, evaluation/Benchmark/evaluate_benchmark_api.py) -------------


def _opamp_em_one(prediction: str, gold: str) -> bool:
    """exact_match_score(strict=False): every gold token is a character substring of the
    normalised prediction, or every prediction token one of the normalised gold. An empty
    prediction therefore matches any gold (``all`` of no tokens), as in the source."""
    p, g = normalize(prediction), normalize(gold)
    return all(t in p for t in g.split()) or all(t in g for t in p.split())


def opamp_em(prediction: str, record: dict) -> float:
    """Best over the gold answers, and over all of them joined by spaces."""
    golds = record["answers"]
    return float(any(_opamp_em_one(prediction, g) for g in [*golds, " ".join(golds)]))


def levenshtein(a: str, b: str) -> int:
    """Character edit distance (insert, delete, substitute, each costing 1)."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def _opamp_pm_one(prediction: str, gold: str) -> float:
    """partial_match_score: 1 - Levenshtein / longer length, on normalised strings (1 if both
    are empty)."""
    p, g = normalize(prediction), normalize(gold)
    longest = max(len(p), len(g))
    return 1.0 - levenshtein(p, g) / longest if longest else 1.0


def opamp_pm(prediction: str, record: dict) -> float:
    """Best over the gold answers (the joined golds are tried for EM only)."""
    return max(_opamp_pm_one(prediction, g) for g in record["answers"])


def opamp_em_substring(prediction: str, record: dict) -> float:
    """The EM of the latest evaluate_benchmark.py (the other version of the authors' script):
    some gold, lower-cased and stripped, is a substring of the lower-cased, stripped reply (no
    other normalisation). Its other score there is token F1 (``longbench_f1``)."""
    reply = prediction.lower().strip()
    return float(any(g.lower().strip() in reply for g in record["answers"]))


def faitheval_opamp(prediction: str, record: dict) -> float:
    """OpAmp's FaithEval scoring (evaluation/Faitheval/evaluate_faith.py): counterfactual is
    correct when the answer key occurs in the stripped reply, case-sensitively (so any capital
    "A" in a reply counts for key A); unanswerable/inconsistent use FaithEval's default valid
    phrases, as our ``faitheval`` rule does. The key is the option letter the prompt shows
    (``answers[1]``, the option's position); where FaithEval's file labels options by ARC digits
    the authors' script compared the digit, which their letter prompt never asks for."""
    if record["subset"] == "counterfactual":
        return float(record["answers"][1] in prediction.strip())
    return metrics.faitheval(prediction, record)


# --- MuDAF (its eval/eval.py, run by scripts/eval.sh with --do_preprocess --default_eos) -------

MUDAF_EOS = ("</s>", "\n", "</", "\\")  # eval.py's DEFAULT_EOS, cut in this order


def mudaf_output(prediction: str) -> str:
    """The reply as MuDAF's eval.py preprocess(default_eos) leaves it: cut before the first
    occurrence of each end marker in turn."""
    for symbol in MUDAF_EOS:
        prediction = prediction.split(symbol)[0]
    return prediction


def mudaf_f1(prediction: str, record: dict) -> float:
    """LongBench's qa_f1_score, best over the golds, on the reply cut at its first end marker."""
    return metrics.token_f1(mudaf_output(prediction), record["answers"])


# --- ALCE (princeton-nlp/ALCE, eval.py) ---------------------------------------------------------


def exact_presence(short_answers: list[str], context: str) -> bool:
    """Some normalised short answer is a substring of the normalised context."""
    text = normalize(context)
    return any(normalize(a) in text for a in short_answers)


def _remove_citations(text: str) -> str:
    """ALCE's remove_citations: drop "[n" markers, " |" and "]"."""
    return re.sub(r"\[\d+", "", re.sub(r" \[\d+", "", text)).replace(" |", "").replace("]", "")


def alce_output(prediction: str) -> str:
    """The reply as ALCE's main() scores it: stripped, cut at the first newline, "<|im_end|>"
    removed, citations removed."""
    first_line = prediction.strip().split("\n")[0].replace("<|im_end|>", "")
    return _remove_citations(first_line)


def alce_str_em(prediction: str, record: dict) -> float:
    """compute_str_em for one item: the share of QA pairs (``answer_groups``) some alias of
    which the output contains. A record without groups counts each answer as its own pair."""
    groups = record.get("answer_groups") or [[a] for a in record["answers"]]
    output = alce_output(prediction)
    return sum(exact_presence(g, output) for g in groups) / len(groups)


def alce_contains(prediction: str, record: dict) -> float:
    """exact_presence over the gold answers, on the whole reply."""
    return float(exact_presence(record["answers"], prediction))


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
    Rule(
        "opamp_em",
        opamp_em,
        "wuhy68/OpampAdapter evaluation/Benchmark/evaluate_benchmark_api.py, "
        "exact_match_score(strict=False), max over golds and the joined golds",
        "every gold token is a substring of the prediction, or every prediction token of the "
        "gold (normalised; an empty prediction matches)",
    ),
    Rule(
        "opamp_pm",
        opamp_pm,
        "wuhy68/OpampAdapter evaluation/Benchmark/evaluate_benchmark_api.py, "
        "partial_match_score, max over golds",
        "1 - character Levenshtein distance / longer length, normalised, best over golds",
    ),
    Rule(
        "opamp_em_substring",
        opamp_em_substring,
        "wuhy68/OpampAdapter evaluation/Benchmark/evaluate_benchmark.py (latest version), "
        "exact_match_score(strict=False)",
        "some lower-cased gold is a substring of the lower-cased reply",
    ),
    Rule(
        "mudaf_f1",
        mudaf_f1,
        "MuDAF eval/eval.py (scripts/eval.sh: --do_preprocess --default_eos), qa_f1_score",
        "LongBench token F1, best over golds, on the reply cut at its first newline, '</s>', "
        "'</' or backslash",
    ),
    Rule(
        "faitheval_opamp",
        faitheval_opamp,
        "wuhy68/OpampAdapter evaluation/Faitheval/evaluate_faith.py (and evalue.py)",
        "counterfactual: the answer letter occurs in the reply (case-sensitive substring); "
        "unanswerable/inconsistent: FaithEval's valid phrases",
    ),
    Rule(
        "alce_str_em",
        alce_str_em,
        "princeton-nlp/ALCE eval.py, compute_str_em with exact_presence (output first line, "
        "citations removed)",
        "share of QA pairs some short-answer alias of which is a normalised substring",
    ),
    Rule(
        "alce_contains",
        alce_contains,
        "princeton-nlp/ALCE eval.py, exact_presence",
        "some normalised gold answer is a substring of the normalised prediction",
    ),
    Rule(
        "mc_acc",
        metrics.choice_accuracy,
        "multiple-choice accuracy (metrics.choice_accuracy): the option the reply commits to",
        "the option named by a leading letter, 'answer is X', 'Option X', or its exact text",
    ),
]
RULES: dict[str, Rule] = {r.name: r for r in _RULES}
