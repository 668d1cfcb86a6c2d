"""FaithEval (``Salesforce/FaithEval-{unanswerable,inconsistent,counterfactual}-v1.0``).

Real format: one hub repo per subset, ``test`` split only, parquet at
``data/test-00000-of-00001.parquet`` (every ``data/test-*.parquet`` shard is read, in name order).
Columns read: ``question`` and ``context`` (str) in all three; counterfactual (ARC-Challenge based,
multiple choice) also ``choices`` (``{"label": [...], "text": [...]}``) and ``answerKey`` (the
label of the choice the counterfactual context supports). Labels may be letters or ARC's digits
("1".."4") and ``answerKey`` either form: both are matched. The other columns (``id``/``qid``,
``answers``, ``answer``, ``num of options``) are not needed and not read: unanswerable and
inconsistent are scored against fixed phrase lists, not the ``answers`` column.

Records: family "faitheval", subset the subset, id ``faitheval_<subset>/test/<row>``, one document
(the ``context`` as the official prompt gives it: the inconsistent context, which holds several
passages, is not split, its delimiter being unconfirmed); golden ``[0]`` (counterfactual: the
context supports the answer; inconsistent: it holds the conflicting answers) or ``[]``
(unanswerable). ``instruction`` is the official prompt header and task-specific line (GitHub
README Quick Start), verbatim; the prompt template adds ``Context:`` / ``Question:`` /
``Answer:``. Answers:
- unanswerable: the default (non-strict) valid phrases, "unknown" first;
- inconsistent: the default valid phrases, "conflict" first;
- counterfactual: ``[choice text, letter]``, the letter being the option's position (A for
  ``options[0]``) whatever the file's labels; ``options`` the choice texts in file order.
``faitheval_correct`` is the scoring rule.
"""

from __future__ import annotations

import random
import re
import string
from functools import partial
from pathlib import Path

from zoomattn.data.records import make_record
from zoomattn.data.sources.chat_faith_options import (
    choice_option,
    kept_indices,
    noise_ratio_option,
)
from zoomattn.data.sources.common import (
    Builder,
    SourceError,
    check_options,
    field,
    has_phrase,
    need_file,
    read_parquet,
    str_list,
)
from zoomattn.evaluation.metrics import chosen_option, names_a_letter

SUBSETS = ("unanswerable", "inconsistent", "counterfactual")
HUB_IDS = {s: f"Salesforce/FaithEval-{s}-v1.0" for s in SUBSETS}

# The official prompt (README Quick Start), verbatim: header, then the task-specific line
# (empty for counterfactual, which the README does not cover), then Context/Question/Answer.
PROMPT_HEADER = (
    "You are an expert in retrieval question answering. \n"
    "Please respond with the exact answer only. Do not be verbose or provide extra information."
)
TASK_PROMPTS = {
    "unanswerable": "If there is no information available from the context, "
    "the answer should be 'unknown'. ",
    "inconsistent": "If there is conflict information or multiple answers from the context, "
    "the answer should be 'conflict'.",
    "counterfactual": "",
}
# Official valid phrases: a normalised prediction containing one is correct. Default
# (strict_match = False) lists; the strict list is the first phrase alone.
VALID_PHRASES = {
    "unanswerable": ["unknown", "no answer", "no information", "not", "unclear"],
    "inconsistent": [
        "conflict",
        "multiple answers",
        "disagreement",
        "inconsistent",
        "contradictory",
        "contradiction",
        "inconsistency",
        "two answers",
        "2 answers",
        "conflicting",
    ],
}
LETTERS = string.ascii_uppercase


def faitheval_instruction(subset: str) -> str:
    return "\n".join(p for p in (PROMPT_HEADER, TASK_PROMPTS[subset]) if p)


_PUNCT = set(string.punctuation) | {"\u2018", "\u2019", "\u00b4", "`"}
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def _normalize(s: str) -> str:
    """FaithEval's normalize_answer: "_" -> space, lower-case, punctuation (and curly quotes,
    acute accent, backtick) -> space, drop a/an/the, squeeze whitespace."""
    s = "".join(" " if ch in _PUNCT else ch for ch in s.replace("_", " ").lower())
    return " ".join(_ARTICLES.sub(" ", s).split())


def faitheval_correct(prediction: str, record: dict, strict: bool = False) -> bool:
    """FaithEval's scoring of one prediction for a record of this module.

    unanswerable / inconsistent (official README rule): correct when the normalised prediction
    contains one of the valid phrases as a substring (so "not" also matches "cannot"); ``strict``
    uses the strict list ("unknown" / "conflict"). counterfactual (no official snippet; the common
    rule of FaithEval evaluations): correct when the reply commits to the gold option as
    multiple-choice accuracy reads it ("B", "(B) wood", "Answer: B", "b", the option's text;
    ``metrics.chosen_option``), or names no letter and contains the gold choice text (normalised,
    on word boundaries). A letter followed by another option's text is wrong.
    """
    subset = record["subset"]
    pred = _normalize(prediction)
    if subset in VALID_PHRASES:
        phrases = VALID_PHRASES[subset][:1] if strict else VALID_PHRASES[subset]
        return any(_normalize(p) in pred for p in phrases)
    if subset == "counterfactual":
        options, letter = record["options"], record["answers"][1]
        if chosen_option(prediction, options) == LETTERS.index(letter):
            return True
        return not names_a_letter(prediction, options) and has_phrase(
            pred, _normalize(record["answers"][0])
        )
    raise ValueError(f"record {record.get('id')!r}: subset {subset!r} is not a FaithEval subset")


def _answer_index(labels: list[str], key: str, where: str) -> int:
    """Position of ``answerKey`` among the labels, matching letters and ARC digits alike."""
    candidates = [key]
    if key.isdigit() and 1 <= int(key) <= len(LETTERS):
        candidates.append(LETTERS[int(key) - 1])
    elif len(key) == 1 and key in LETTERS:
        candidates.append(str(LETTERS.index(key) + 1))
    for candidate in candidates:
        if candidate in labels:
            return labels.index(candidate)
    raise SourceError(f"{where}: field 'answerKey' {key!r} is none of the choice labels {labels}")


def _choices(where: str, row: dict) -> tuple[list[str], list[str]]:
    """(options, answers) of a counterfactual row: the choice texts, [gold text, gold letter]."""
    choices = field(row, "choices", where, dict)
    at = f"{where} choices"
    labels = field(choices, "label", at, list)
    if not all(isinstance(x, str | int) and not isinstance(x, bool) for x in labels):
        raise SourceError(f"{at}: field 'label' must be a list of strings")
    labels = [str(x).strip() for x in labels]
    texts = str_list(choices, "text", at)
    if len(texts) < 2 or len(labels) != len(texts):
        raise SourceError(
            f"{at}: fields 'label' and 'text' must list the same choices (at least 2), got "
            f"{len(labels)} labels and {len(texts)} texts"
        )
    if len(texts) > len(LETTERS):
        raise SourceError(f"{at}: field 'text' has {len(texts)} choices, more than letters")
    key = field(row, "answerKey", where, (str, int))
    i = _answer_index(labels, str(key).strip(), where)
    return texts, [texts[i], LETTERS[i]]


def build_faitheval(subset: str, root: Path, options: dict, rng: random.Random) -> list[dict]:
    """FaithEval ``subset`` records (see the module docstring).

    Options: ``subset`` (optional; must be the builder's own), ``split`` (only ``test``),
    ``noise_ratio`` (only 0: the contexts are used as they are), ``limit``.
    """
    name = f"faitheval_{subset}"
    check_options(options, {"subset", "split", "noise_ratio", "limit"}, name)
    choice_option(options, "subset", {subset}, name, subset)
    choice_option(options, "split", {"test"}, name, "test")
    if noise_ratio_option(options, name) != 0.0:
        raise SourceError(f"{name}: option 'noise_ratio' must be 0 (FaithEval adds no noise)")
    paths = sorted((Path(root) / "data").glob("test-*.parquet"))
    if not paths:
        need_file(root, "data/test-00000-of-00001.parquet")
    rows = [item for path in paths for item in read_parquet(path)]
    parsed = []
    for where, row in rows:
        question, context = field(row, "question", where, str), field(row, "context", where, str)
        if subset == "counterfactual":
            choices, answers = _choices(where, row)
        else:
            choices, answers = [], list(VALID_PHRASES[subset])
        parsed.append((question, context, choices, answers))
    records = []
    for i in kept_indices(len(parsed), options, rng, name):
        question, context, choices, answers = parsed[i]
        records.append(
            make_record(
                id=f"{name}/test/{i}",
                family="faitheval",
                subset=subset,
                documents=[context],
                golden=[] if subset == "unanswerable" else [0],
                question=question,
                answers=answers,
                options=choices,
                instruction=faitheval_instruction(subset),
            )
        )
    return records


BUILDERS = {
    f"faitheval_{subset}": Builder(
        build=partial(build_faitheval, subset),
        hub_id=HUB_IDS[subset],
        allow_patterns=("data/test-*.parquet",),
    )
    for subset in SUBSETS
}
