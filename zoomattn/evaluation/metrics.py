"""Answer metrics as docs/papers.md §0 defines them, and a bootstrap interval for their mean.

EM (OpAmp): the normalised prediction equals a normalised gold answer. PM: LongBench's token F1.
contains (rectification's EM): the prediction contains a gold answer; str_em: the share of gold
answers it contains (ASQA; the published columns' rules are in official.py).
Acc: for a multiple-choice record (``options``), the option the reply commits to; otherwise EM.
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


# Reading a multiple-choice reply. Options are shown as "A. text", "B. text", ... (A for
# options[0]). A letter "mention" is a single letter standing alone: at the start of the reply or
# after "answer (is)", "option (is)", "choice (is)". It is *delimited* when bracketed ("(B)"),
# alone on its line ("B", "b."), or followed by ".):;," and a space ("B. text", "b) text"); it is
# *bare* when followed by a space and more text ("B the red door", "A man...").
_LEAD = re.compile(r"[\s*\"'`]*")
_MARKER = re.compile(
    r"\b(?:answer|option|choice)\b(?:\s+(?:is|was|would be|should be|will be))?\s*:?\s*", re.I
)
_MENTION = re.compile(r"(?P<open>[(\[])?(?P<letter>[A-Za-z])(?P<close>[)\]])?(?P<after>.*)", re.S)
_ENDS_LINE = re.compile(r"[.):;,*]*[ \t]*(?:\n|$)")
_DELIMITER = re.compile(r"[.):;,]\s")


def _mention(text: str) -> tuple[str, str, bool] | None:
    """(letter, the text after it, delimited?) when ``text`` starts with a letter mention."""
    m = _MENTION.match(text[_LEAD.match(text).end() :])
    if not m:
        return None
    letter, after = m["letter"], m["after"]
    if m["close"]:  # "(B)", "B)", "[B]"
        return letter, after.strip(), True
    if m["open"]:
        return None  # "(Bob"
    if _ENDS_LINE.match(after) or _DELIMITER.match(after):
        return letter, after.strip(" \t\n.):;,"), True
    if after[:1].isspace():
        return letter, after.strip(), False
    return None  # part of a word: "The", "A.M.", "B-52"


def _quoted_option(text: str, option_texts: list[str]) -> int | None:
    """The option whose normalised text ``text`` is or begins with (the longest such)."""
    t = normalize_answer(text)
    hits = [i for i, o in enumerate(option_texts) if o and (t == o or t.startswith(o + " "))]
    return max(hits, key=lambda i: len(option_texts[i])) if hits else None


def _letter_choices(reply: str, option_texts: list[str]) -> list[int | None]:
    """The option each letter mention commits to (None where it contradicts its own text)."""
    starts = [(0, False)] + [(m.end(), True) for m in _MARKER.finditer(reply)]
    choices = []
    for start, after_marker in starts:
        found = _mention(reply[start:])
        if not found:
            continue
        letter, rest, delimited = found
        index = ord(letter.upper()) - 65
        if not 0 <= index < len(option_texts):
            continue
        quoted = _quoted_option(rest, option_texts)
        if not delimited:
            # A bare letter may be a word ("A man...", "the answer is a dog"): it counts when it is
            # upper case and either follows a marker or is followed by an option's text, and the
            # letter and its text together are not themselves an option's text ("A Tale of...").
            if not letter.isupper() or (quoted is None and not after_marker):
                continue
            if normalize_answer(f"{letter} {rest}") in option_texts:
                continue
        choices.append(index if quoted in (None, index) else None)
    return choices


def names_a_letter(prediction: str, options: list[str]) -> bool:
    """Whether the reply names an option by its letter (consistent or not)."""
    return bool(_letter_choices(prediction.strip(), [normalize_answer(o) for o in options]))


def chosen_option(prediction: str, options: list[str]) -> int | None:
    """Index of the option a reply commits to, or None (no choice, or a contradictory one).

    Letters first, read before normalising (LongBench normalisation deletes "a", which would
    make an empty reply match option A): a leading "B", "(B)", "B.", "b", "B) text", or "Answer: B",
    "the answer is B", "Option B", "the correct option is (B)". A letter followed by another
    option's text ("B) <text of A>"), or letters that disagree, commit to nothing. Without a
    letter: the option whose normalised text equals the reply, or what follows its first
    "answer is" / "Answer:".
    """
    reply = prediction.strip()
    option_texts = [normalize_answer(o) for o in options]
    choices = set(_letter_choices(reply, option_texts))
    if choices:
        return choices.pop() if len(choices) == 1 else None
    marker = _MARKER.search(reply)
    for text in (reply, reply[marker.end() :] if marker else ""):
        t = normalize_answer(text)
        if t and t in option_texts:
            return option_texts.index(t)
    return None


def choice_accuracy(prediction: str, record: dict) -> float:
    """Multiple choice (``options``): the reply commits to the gold option (``answers[0]`` is its
    text; ``chosen_option`` reads the reply). Without options: EM."""
    options = record.get("options") or []
    if not options:
        return exact_match(prediction, record["answers"])
    gold = record["answers"][0]
    if gold not in options:
        raise ValueError(
            f"record {record.get('id')!r}: gold answer {gold!r} is none of its options {options}"
        )
    return float(chosen_option(prediction, options) == options.index(gold))


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
    """The share of the gold answers the prediction contains (whole words), over the flat list.
    Not ALCE's STR-EM, which counts QA pairs (any alias) by substring: ``official.alce_str_em``."""
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
