"""The FaithEval builders (unanswerable / inconsistent / counterfactual) and their scoring on small
real-format fixtures."""

import json

import pytest

from tests.data.sources.chat_faith_fixtures import (
    COUNTERFACTUAL,
    INCONSISTENT,
    UNANSWERABLE,
    faitheval,
    write_faitheval,
)
from zoomattn.data.sources.chat_faith import faitheval_correct, faitheval_instruction
from zoomattn.data.sources.common import SourceError
from zoomattn.evaluation.metrics import METRICS
from zoomattn.evaluation.official import RULES
from zoomattn.modeling.chat import user_text

# --- FaithEval: content --------------------------------------------------------------------------


def test_faitheval_unanswerable_answers_are_the_official_abstention_phrases(tmp_path):
    write_faitheval(tmp_path, "unanswerable")
    recs = faitheval(tmp_path, "unanswerable")
    assert [r["id"] for r in recs] == [
        "faitheval_unanswerable/test/0",
        "faitheval_unanswerable/test/1",
    ]
    rec = recs[0]
    assert (rec["family"], rec["subset"]) == ("faitheval", "unanswerable")
    assert rec["documents"] == [UNANSWERABLE[0]["context"]] and rec["golden"] == []
    assert rec["question"] == UNANSWERABLE[0]["question"]
    assert rec["answers"] == ["unknown", "no answer", "no information", "not", "unclear"]
    assert rec["instruction"] == (
        "You are an expert in retrieval question answering. \nPlease respond with the exact "
        "answer only. Do not be verbose or provide extra information.\nIf there is no "
        "information available from the context, the answer should be 'unknown'. "
    )


def test_faitheval_inconsistent_keeps_the_context_whole_and_answers_conflict(tmp_path):
    write_faitheval(tmp_path, "inconsistent")
    (rec,) = faitheval(tmp_path, "inconsistent")
    assert rec["documents"] == [INCONSISTENT[0]["context"]] and rec["golden"] == [0]
    assert rec["answers"][0] == "conflict" and "contradictory" in rec["answers"]
    assert rec["instruction"].endswith(
        "\nIf there is conflict information or multiple answers from the context, the answer "
        "should be 'conflict'."
    )


def test_faitheval_counterfactual_answers_hold_choice_text_and_position_letter(tmp_path):
    write_faitheval(tmp_path, "counterfactual")
    recs = faitheval(tmp_path, "counterfactual")
    assert recs[0]["options"] == ["rubber", "wood", "glass", "air"]
    assert recs[0]["answers"] == ["wood", "B"] and recs[0]["golden"] == [0]
    assert recs[1]["answers"] == ["Venus", "B"]  # numeric labels, letter answerKey
    assert recs[2]["answers"] == ["nitrogen", "B"] and len(recs[2]["options"]) == 3
    assert recs[0]["instruction"] == faitheval_instruction("counterfactual")
    assert recs[0]["instruction"].endswith("Do not be verbose or provide extra information.")


def test_faitheval_is_deterministic_and_limit_keeps_a_seeded_sample_in_source_order(tmp_path):
    write_faitheval(tmp_path, "unanswerable", UNANSWERABLE * 5)
    a = faitheval(tmp_path, "unanswerable", limit=4)
    assert a == faitheval(tmp_path, "unanswerable", limit=4) and len(a) == 4
    indices = [int(r["id"].rsplit("/", 1)[1]) for r in a]
    assert indices == sorted(indices)


# --- FaithEval: errors ---------------------------------------------------------------------------


def test_faitheval_options_are_checked(tmp_path):
    write_faitheval(tmp_path, "inconsistent")
    with pytest.raises(SourceError, match="faitheval_inconsistent.*unknown option.*'history'"):
        faitheval(tmp_path, "inconsistent", history=1)
    with pytest.raises(SourceError, match="'subset' is 'unanswerable'"):
        faitheval(tmp_path, "inconsistent", subset="unanswerable")
    with pytest.raises(SourceError, match="'noise_ratio' must be 0"):
        faitheval(tmp_path, "inconsistent", noise_ratio=0.5)
    assert len(faitheval(tmp_path, "inconsistent", subset="inconsistent", noise_ratio=0.0)) == 1


def test_faitheval_missing_file_names_the_expected_path(tmp_path):
    (tmp_path / "counterfactual").mkdir()
    with pytest.raises(SourceError, match=r"data/test-00000-of-00001\.parquet.*file missing"):
        faitheval(tmp_path, "counterfactual")


def test_faitheval_unreadable_parquet_names_the_file(tmp_path):
    path = write_faitheval(tmp_path, "unanswerable")
    path.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(SourceError, match=r"test-00000-of-00001\.parquet: not a readable parquet"):
        faitheval(tmp_path, "unanswerable")


def _edited(rows, index, **changes):
    """A copy of ``rows`` with one row changed; a column set to None is dropped from every row
    (a parquet file has a column for all rows or none)."""
    rows = json.loads(json.dumps(rows))
    rows[index].update(changes)
    gone = {k for k, v in changes.items() if v is None}
    return [{k: v for k, v in r.items() if k not in gone} for r in rows]


@pytest.mark.parametrize(
    "subset, rows, message",
    [
        ("unanswerable", _edited(UNANSWERABLE, 1, context=None), "row 0: field 'context' missing"),
        (
            "unanswerable",
            [dict(r, question=[r["question"]]) for r in UNANSWERABLE],
            "row 0: field 'question' is list, expected str",
        ),
        (
            "counterfactual",
            _edited(COUNTERFACTUAL, 2, answerKey="E"),
            r"row 2: field 'answerKey' 'E' is none of the choice labels",
        ),
        (
            "counterfactual",
            _edited(COUNTERFACTUAL, 2, answerKey=None),
            "row 0: field 'answerKey' missing",
        ),
        (
            "counterfactual",
            [dict(COUNTERFACTUAL[0], choices={"label": ["A", "B"], "text": ["x", "y", "z"]})],
            "row 0 choices: fields 'label' and 'text' must list the same choices",
        ),
        (
            "counterfactual",
            [dict(r, choices=json.dumps(r["choices"])) for r in COUNTERFACTUAL],
            "row 0: field 'choices' is str, expected dict",
        ),
    ],
)
def test_faitheval_bad_record_names_file_record_and_field(tmp_path, subset, rows, message):
    write_faitheval(tmp_path, subset, rows)
    with pytest.raises(SourceError, match=r"test-00000-of-00001\.parquet " + message):
        faitheval(tmp_path, subset)


# --- FaithEval scoring ---------------------------------------------------------------------------


def test_faitheval_correct_uses_the_official_substring_rules(tmp_path):
    write_faitheval(tmp_path, "unanswerable")
    write_faitheval(tmp_path, "inconsistent")
    write_faitheval(tmp_path, "counterfactual")
    un = faitheval(tmp_path, "unanswerable")[0]
    assert faitheval_correct("Unknown.", un)
    assert faitheval_correct("The context does not say.", un)  # 'not' is a valid phrase
    assert faitheval_correct("I cannot tell", un)  # substring: c-a-n-NOT
    assert not faitheval_correct("Bernadette Soubirous", un)
    assert not faitheval_correct("No answer given", un, strict=True)
    assert faitheval_correct("unknown", un, strict=True)
    inc = faitheval(tmp_path, "inconsistent")[0]
    assert faitheval_correct("Conflict", inc) and faitheval_correct("two answers exist", inc)
    assert faitheval_correct("The documents are contradictory.", inc)
    assert not faitheval_correct("Mary Shelley", inc)
    assert not faitheval_correct("contradictory", inc, strict=True)
    cf = faitheval(tmp_path, "counterfactual")[0]  # answers ["wood", "B"]
    assert faitheval_correct("B", cf) and faitheval_correct("(B) wood", cf)
    assert faitheval_correct("B.", cf) and faitheval_correct("Wood", cf)
    assert faitheval_correct("The answer is wood.", cf)
    assert not faitheval_correct("A", cf) and not faitheval_correct("rubber", cf)
    assert not faitheval_correct("Bwoodpecker", cf)
    assert faitheval_correct("Answer: B", cf) and faitheval_correct("b", cf)
    assert not faitheval_correct("B) rubber", cf)  # letter B, text of A
    assert not faitheval_correct("A) wood", cf)  # letter A, text of B
    with pytest.raises(ValueError, match="not a FaithEval subset"):
        faitheval_correct("x", {"id": "r", "subset": "coqa", "answers": ["x"]})


def test_counterfactual_letter_is_the_one_the_prompt_shows_beside_the_gold_choice(tmp_path):
    write_faitheval(tmp_path, "counterfactual")
    for record in faitheval(tmp_path, "counterfactual"):  # letter, digit and mixed labels
        text, letter = record["answers"]
        assert f"{letter}. {text}" in user_text(record)
        assert METRICS["acc"](letter, record) == 1.0
        assert RULES["faitheval_opamp"].score(letter, record) == 1.0
