"""The NarrativeQA and QuALITY builders (long_context_stories.py) on small fixtures written in
each dataset's real layout."""

from __future__ import annotations

from tests.data.sources.long_context_fixtures import (
    ARTICLE,
    build,
    jsonl,
    narrative_row,
    quality_row,
    raises,
    write_parquet,
    write_zip,
)
from zoomattn.data.sources.common import chunk_text
from zoomattn.evaluation.metrics import METRICS
from zoomattn.evaluation.official import RULES
from zoomattn.modeling.chat import user_text

# ---- NarrativeQA -------------------------------------------------------------------------


def test_narrativeqa_full_text_is_cut_to_the_story_markers_and_chunked(tmp_path):
    rows = [
        narrative_row("d1", "Who did Tom live with?", ["his aunt", "His aunt"]),
        narrative_row("d1", "What did Tom paint?", ["the fence", "the fence"]),
        narrative_row("d2", "Where?", ["by the river", "river"], text="CHAPTER I. Short. THE END."),
    ]
    write_parquet(tmp_path / "data" / "test-00000-of-00002.parquet", rows[:2])
    write_parquet(tmp_path / "data" / "test-00001-of-00002.parquet", rows[2:])
    write_parquet(tmp_path / "data" / "train-00000-of-00001.parquet", rows[:1])
    records = build("narrativeqa", tmp_path, chunk_words=8)
    assert [r["id"] for r in records] == [f"narrativeqa/test/{i}" for i in range(3)]
    story = (
        "CHAPTER I. Tom lived by the river with his aunt. He painted the fence one summer. THE END."
    )
    assert records[0]["documents"] == chunk_text(story, 8)
    assert records[0]["answers"] == ["his aunt", "His aunt"] and records[1]["answers"] == [
        "the fence"
    ]
    assert (records[0]["family"], records[0]["golden"]) == ("long", [])
    assert records[0]["instruction"].startswith("You are given a story")
    assert len(build("narrativeqa", tmp_path, split="train")) == 1


def test_narrativeqa_summary_context_and_max_words_filter(tmp_path):
    rows = [
        narrative_row("d1", "Who?", ["Tom"]),
        narrative_row("d2", "Q?", ["a"], text="CHAPTER I. x. THE END."),
    ]
    write_parquet(tmp_path / "data" / "test-00000-of-00001.parquet", rows)
    records = build("narrativeqa", tmp_path, context="summary")
    assert records[0]["documents"] == ["Tom, a boy, lives with his aunt."]
    kept = build("narrativeqa", tmp_path, max_words=5)
    assert [r["id"] for r in kept] == ["narrativeqa/test/1"]


def test_narrativeqa_missing_or_bad_nested_fields_raise(tmp_path):
    row = narrative_row("d1", "Who?", ["Tom"])
    del row["document"]["summary"]
    path = write_parquet(tmp_path / "data" / "test-00000-of-00001.parquet", [row])
    raises(
        [str(path), "'document.summary.text' missing"], "narrativeqa", tmp_path, context="summary"
    )
    row = narrative_row("d1", "Who?", ["Tom"])
    bad = narrative_row("d1", "Who?", ["Tom"])
    bad["answers"] = [{"text": None, "tokens": []}]
    write_parquet(path, [row, bad])
    raises([f"{path} row 1", "'answers[0].text'"], "narrativeqa", tmp_path)
    raises([str(tmp_path / "data"), "file missing"], "narrativeqa", tmp_path, split="validation")


# ---- QuALITY -----------------------------------------------------------------------------


def test_quality_hard_only_keeps_hard_questions_with_text_and_letter_answers(tmp_path):
    rows = [quality_row("Why did Blake go?", 1, True), quality_row("Easy?", 0, False)]
    write_parquet(tmp_path / "data" / "validation-00000-of-00001-77baeb9538209706.parquet", rows)
    (r,) = build("quality", tmp_path, chunk_words=6)
    assert (r["id"], r["family"], r["subset"]) == ("quality/validation/0", "mc", "hard")
    assert r["options"] == ["He was lost.", "He was curious.", "He was paid.", "He was bored."]
    assert r["answers"] == ["He was curious.", "B"]
    assert r["documents"] == chunk_text(ARTICLE, 6) and r["golden"] == []
    assert "letter" in r["instruction"]
    both = build("quality", tmp_path, hard_only=False)
    assert [x["subset"] for x in both] == ["hard", "easy"] and both[1]["answers"][1] == "A"


def test_quality_reads_the_nyu_htmlstripped_dev_file_with_one_based_gold_label(tmp_path):
    question = {
        "question": "Why did Blake go?",
        "question_unique_id": "52845_X_1",
        "options": ["o1", "o2", "o3", "o4"],
        "gold_label": 3,
        "writer_label": 3,
        "validation": [],
        "speed_validation": [],
        "difficult": 1,
    }
    line = {
        "article_id": "52845",
        "title": "T",
        "article": ARTICLE,
        "questions": [question, {**question, "question_unique_id": "52845_X_2", "difficult": 0}],
    }
    write_zip(
        tmp_path / "QuALITY.v1.0.1.zip",
        {"QuALITY.v1.0.1/QuALITY.v1.0.1.htmlstripped.dev": jsonl([line])},
    )
    (r,) = build("quality", tmp_path)
    assert (r["id"], r["answers"]) == ("quality/validation/52845_X_1", ["o3", "C"])


def test_quality_bad_fields_raise_naming_file_row_and_field(tmp_path):
    path = write_parquet(
        tmp_path / "data" / "validation-00000-of-00001.parquet", [quality_row("Q?", 4, True)]
    )
    raises([f"{path} row 0", "'answer'"], "quality", tmp_path)
    row = quality_row("Q?", 0, True)
    del row["hard"]
    write_parquet(path, [row])
    raises([f"{path} row 0", "'hard' missing"], "quality", tmp_path)
    raises(["quality", "'noise_ratio'"], "quality", tmp_path, noise_ratio=0.8)


def test_quality_letter_is_the_one_the_prompt_shows_beside_the_gold_option(tmp_path):
    rows = [quality_row("Why?", answer, True) for answer in range(4)]
    write_parquet(tmp_path / "data" / "validation-00000-of-00001.parquet", rows)
    records = build("quality", tmp_path)
    assert [r["answers"][1] for r in records] == ["A", "B", "C", "D"]
    for record in records:
        text, letter = record["answers"]
        assert f"{letter}. {text}" in user_text(record)
        assert METRICS["acc"](f"({letter.lower()})", record) == 1.0
        assert RULES["mc_acc"].score(f"Answer: {letter}", record) == 1.0
