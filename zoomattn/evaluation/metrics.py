"""Answer metrics as docs/papers.md §0 defines them, and a bootstrap interval for their mean.

EM (OpAmp): the normalised prediction equals a normalised gold answer. PM: LongBench's token F1.
contains (rectification's EM): the prediction contains a gold answer; str_em: the share of gold
answers it contains (ASQA).
Acc: for a multiple-choice record (``options``), the chosen letter or option text; otherwise EM.
faitheval: FaithEval's official rule (data/sources/chat_faith_faitheval.py). A metric scores one
prediction against its record: ``METRICS[name](prediction, record) -> float``.
"""

from __future__ import annotations

import re
import string
from collections import Counter

import numpy as np

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(s: str) -> str:
    """LongBench normalisation: lower-case, drop punctuation and a/an/the, squeeze spaces."""
    return " ".join(_ARTICLES.sub(" ", s.lower().translate(_PUNCT)).split())


def exact_match(prediction: str, answers: list[str]) -> float:
    p = normalize_answer(prediction)
    return float(any(p == normalize_answer(a) for a in answers))


def token_f1(prediction: str, answers: list[str]) -> float:
    """LongBench qa_f1_score, best over gold answers."""
    best = 0.0
    pred = normalize_answer(prediction).split()
    for a in answers:
        gold = normalize_answer(a).split()
        common = sum((Counter(pred) & Counter(gold)).values())
        if common:
            precision, recall = common / len(pred), common / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


_LETTER = re.compile(r"^\W*([A-Z])(?:\W|$)")


def choice_accuracy(prediction: str, record: dict) -> float:
    """Multiple choice: the reply names the gold letter ("B", "(B) ...", "B. text"), or equals
    the gold option's text. Letters are compared before normalising: LongBench normalisation
    deletes "a", which would make an empty reply match option A."""
    options = record.get("options") or []
    if not options:
        return exact_match(prediction, record["answers"])
    gold_text = record["answers"][0]
    letter = chr(65 + options.index(gold_text)) if gold_text in options else None
    chosen = _LETTER.match(prediction.strip())
    if chosen and letter:
        return float(chosen.group(1) == letter)
    return float(normalize_answer(prediction) == normalize_answer(gold_text))


def faitheval(prediction: str, record: dict) -> float:
    from zoomattn.data.sources.chat_faith import faitheval_correct

    return float(faitheval_correct(prediction, record))


def _contains(prediction: str, answer: str) -> bool:
    """The normalised answer occurs in the normalised prediction as whole words."""
    return f" {normalize_answer(answer)} " in f" {normalize_answer(prediction)} "


def contains_answer(prediction: str, answers: list[str]) -> float:
    """Attention rectification's EM: the prediction contains a gold answer (normalised)."""
    return float(any(_contains(prediction, a) for a in answers))


def answer_recall(prediction: str, answers: list[str]) -> float:
    """ASQA's STR-EM over a flat answer list: the share of gold short answers the prediction
    contains (ALCE groups them per disambiguated question; our records keep one flat list)."""
    return sum(_contains(prediction, a) for a in answers) / len(answers)


METRICS = {
    "em": lambda pred, rec: exact_match(pred, rec["answers"]),
    "contains": lambda pred, rec: contains_answer(pred, rec["answers"]),
    "str_em": lambda pred, rec: answer_recall(pred, rec["answers"]),
    "pm": lambda pred, rec: token_f1(pred, rec["answers"]),
    "acc": choice_accuracy,
    "faitheval": faitheval,
}


def bootstrap_ci(scores, n_resamples: int = 1000, seed: int = 0, level: float = 0.95):
    """Percentile bootstrap interval of the mean, resampling examples with replacement."""
    x = np.asarray(scores, dtype=float)
    if len(x) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n_resamples, len(x)))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def summarize(scores: list[float]) -> dict:
    lo, hi = bootstrap_ci(scores)
    return {
        "score": float(np.mean(scores)) if scores else float("nan"),
        "ci_low": lo,
        "ci_high": hi,
        "n": len(scores),
    }
