"""The one normalised record every builder produces, synthetic or real.

=============  ================  ===========================================================
field          type              meaning
=============  ================  ===========================================================
id             str               unique within its split
family         str               task family (single, multihop, conversational, long, ...)
subset         str               the dataset's own subset ("" when it has none)
documents      list[str]         the retrieved context, in the order the model reads it
golden         list[int]         indices into ``documents`` of the ones holding the answer
question       str               the current question (a conversation's last user turn)
history        list[[str, str]]  earlier (question, answer) turns of a conversation
answers        list[str]         gold answers; the first one is the training target
answer_groups  list[list[str]]   per QA pair (one disambiguation of the question), its
                                 short-answer aliases: ALCE's STR-EM counts a pair found when
                                 any alias is; ``[]`` when the dataset has none (ASQA has)
options        list[str]         answer choices of a multiple-choice task, else empty
instruction    str               the task's instruction, read before the documents ("" if none)
noise_ratio    float             share of noise among the documents (1: all noise, no golden)
placement      str               where the question sits: after the documents (``vanilla``) or
                                 before them (``reverse``, Attention rectification §5.2)
=============  ================  ===========================================================
"""

from __future__ import annotations

FIELDS = {
    "id": str,
    "family": str,
    "subset": str,
    "documents": list,
    "golden": list,
    "question": str,
    "history": list,
    "answers": list,
    "answer_groups": list,
    "options": list,
    "instruction": str,
    "noise_ratio": float,
    "placement": str,
}
PLACEMENTS = ("vanilla", "reverse")


def arrow_features():
    """The schema as ``datasets`` features (imported here: datasets takes ~2 s to import, and the
    workflow reads builder names at parse time)."""
    from datasets import Features, Sequence, Value

    return Features(
        {
            "id": Value("string"),
            "family": Value("string"),
            "subset": Value("string"),
            "documents": Sequence(Value("string")),
            "golden": Sequence(Value("int64")),
            "question": Value("string"),
            "history": Sequence(Sequence(Value("string"))),
            "answers": Sequence(Value("string")),
            "answer_groups": Sequence(Sequence(Value("string"))),
            "options": Sequence(Value("string")),
            "instruction": Value("string"),
            "noise_ratio": Value("float64"),
            "placement": Value("string"),
        }
    )


class RecordError(ValueError):
    """A record that breaks the schema; the message names where it came from and the field."""


def make_record(
    *,
    id: str,
    family: str,
    question: str,
    answers: list[str],
    answer_groups: list[list[str]] = (),
    documents: list[str] = (),
    golden: list[int] = (),
    subset: str = "",
    history: list = (),
    options: list[str] = (),
    instruction: str = "",
    noise_ratio: float = 0.0,
    placement: str = "vanilla",
) -> dict:
    return {
        "id": id,
        "family": family,
        "subset": subset,
        "documents": list(documents),
        "golden": [int(g) for g in golden],
        "question": question,
        "history": [list(t) for t in history],
        "answers": list(answers),
        "answer_groups": [list(g) for g in answer_groups],
        "options": list(options),
        "instruction": instruction,
        "noise_ratio": float(noise_ratio),
        "placement": placement,
    }


def check_record(record: dict, where: str) -> dict:
    """Raise RecordError naming ``where`` (file and record) and the field unless ``record`` fits."""
    for name, kind in FIELDS.items():
        if name not in record:
            raise RecordError(f"{where}: field {name!r} missing")
        value = record[name]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        if not isinstance(value, kind):
            raise RecordError(
                f"{where}: field {name!r} is {type(value).__name__}, not {kind.__name__}"
            )
    extra = sorted(set(record) - set(FIELDS))
    if extra:
        raise RecordError(f"{where}: unknown fields {extra}")
    for name in ("documents", "answers", "options"):
        if not all(isinstance(x, str) for x in record[name]):
            raise RecordError(f"{where}: field {name!r} must hold strings only")
    groups = record["answer_groups"]
    if not all(isinstance(g, list) and all(isinstance(a, str) for a in g) for g in groups):
        raise RecordError(f"{where}: field 'answer_groups' must hold lists of strings")
    if not record["answers"]:
        raise RecordError(f"{where}: field 'answers' is empty")
    bad = [g for g in record["golden"] if not 0 <= g < len(record["documents"])]
    if bad:
        raise RecordError(
            f"{where}: field 'golden' has {bad}, outside the {len(record['documents'])} documents"
        )
    if any(not (isinstance(t, list) and len(t) == 2) for t in record["history"]):
        raise RecordError(f"{where}: field 'history' must hold [question, answer] pairs")
    ratio = record["noise_ratio"]
    if not 0.0 <= ratio <= 1.0 or (ratio == 1.0 and record["golden"]):
        raise RecordError(
            f"{where}: field 'noise_ratio' {ratio} is not in [0, 1] (1 only with no golden doc)"
        )
    return record
