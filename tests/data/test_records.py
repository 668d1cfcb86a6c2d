"""The record schema (data/records.py): the ``answer_groups`` field ALCE's STR-EM reads."""

import pytest
from datasets import Dataset

from zoomattn.data.records import RecordError, arrow_features, check_record, make_record


def record(**fields):
    return make_record(id="r/0", family="open", question="q", answers=["a"], **fields)


def test_answer_groups_default_to_empty_and_are_copied_as_lists():
    assert record()["answer_groups"] == []
    groups = (("Ali Daei", "Daei"), ("Ronaldo",))
    assert record(answer_groups=groups)["answer_groups"] == [["Ali Daei", "Daei"], ["Ronaldo"]]
    assert check_record(record(answer_groups=[["x"], []]), "here")


@pytest.mark.parametrize(
    "groups,message",
    [
        ([["x", 3]], "field 'answer_groups' must hold lists of strings"),
        (["x"], "field 'answer_groups' must hold lists of strings"),
        ("x", "field 'answer_groups' is str, not list"),
    ],
)
def test_check_record_refuses_answer_groups_that_are_not_lists_of_strings(groups, message):
    bad = dict(record(), answer_groups=groups)
    with pytest.raises(RecordError, match=f"file.json record 0: {message}"):
        check_record(bad, "file.json record 0")


def test_a_record_without_answer_groups_is_refused():
    old = {k: v for k, v in record().items() if k != "answer_groups"}
    with pytest.raises(RecordError, match="field 'answer_groups' missing"):
        check_record(old, "old record")


def test_answer_groups_survive_the_arrow_round_trip():
    rows = [record(answer_groups=[["Ali Daei", "Daei"], ["Ronaldo"]]), record()]
    back = Dataset.from_list(rows, features=arrow_features()).to_list()
    assert [r["answer_groups"] for r in back] == [[["Ali Daei", "Daei"], ["Ronaldo"]], []]
    assert back == rows
