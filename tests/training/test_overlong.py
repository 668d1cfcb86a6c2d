"""Training examples over finetune.max_length: left out, truncated, or shortened by negatives."""

import pytest

from zoomattn.data.tasks import training_mix
from zoomattn.training.batching import IGNORE, encode_example, scored_tokens
from zoomattn.training.overlong import fit_examples, truncate, without_document


@pytest.fixture(scope="module")
def records(world):
    return training_mix(world, {"single": 1.0}, 8, 0.9, 4, seed=5)


def _prompt_length(example):
    return sum(label == IGNORE for label in example["labels"])


def test_drop_leaves_an_over_long_example_out_and_keeps_the_rest_whole(tokenizer, records):
    encoded = [encode_example(tokenizer, r) for r in records]
    limit = sorted(len(e["input_ids"]) for e in encoded)[len(encoded) // 2]
    kept_records, kept, dropped = fit_examples(tokenizer, records, limit, "drop")
    assert dropped == sum(len(e["input_ids"]) > limit for e in encoded) > 0
    assert kept == [e for e in encoded if len(e["input_ids"]) <= limit]
    assert len(kept_records) == len(kept)


def test_truncate_keeps_the_head_and_the_answer_tokens_that_fit(tokenizer, records):
    full = encode_example(tokenizer, records[0])
    limit = _prompt_length(full) + 1  # the prompt and the answer's first token
    kept_records, kept, dropped = fit_examples(tokenizer, records[:1], limit, "truncate")
    assert dropped == 0 and kept_records == records[:1]
    assert kept[0]["input_ids"] == full["input_ids"][:limit]
    assert kept[0]["labels"] == full["labels"][:limit]
    assert scored_tokens(kept) == 1 < scored_tokens([full])


def test_truncate_leaves_out_an_example_whose_answer_is_cut_whole(tokenizer, records):
    full = encode_example(tokenizer, records[0])
    assert truncate(full, _prompt_length(full)) is None  # nothing left to score
    _, kept, dropped = fit_examples(tokenizer, records[:1], _prompt_length(full), "truncate")
    assert kept == [] and dropped == 1


def test_drop_negatives_removes_the_last_non_golden_documents_until_the_example_fits(
    tokenizer, records
):
    record = next(r for r in records if len(r["documents"]) - len(r["golden"]) >= 3)
    two_fewer = without_document(record, _negatives(record)[-1])
    two_fewer = without_document(two_fewer, _negatives(two_fewer)[-1])
    limit = len(encode_example(tokenizer, two_fewer)["input_ids"])
    kept_records, kept, dropped = fit_examples(tokenizer, [record], limit, "drop_negatives")
    assert dropped == 0 and kept_records == [two_fewer]
    assert kept == [encode_example(tokenizer, two_fewer)]
    golden_docs = [record["documents"][g] for g in record["golden"]]
    assert [two_fewer["documents"][g] for g in two_fewer["golden"]] == golden_docs
    assert len(two_fewer["documents"]) == len(record["documents"]) - 2


def test_drop_negatives_leaves_out_an_example_too_long_with_its_golden_documents_alone(
    tokenizer, records
):
    golden_only = {**records[0]}
    while _negatives(golden_only):
        golden_only = without_document(golden_only, _negatives(golden_only)[0])
    limit = len(encode_example(tokenizer, golden_only)["input_ids"]) - 1
    _, kept, dropped = fit_examples(tokenizer, records[:1], limit, "drop_negatives")
    assert kept == [] and dropped == 1


def test_removing_a_document_shifts_the_golden_indices_after_it():
    record = {"documents": ["a", "g1", "b", "g2"], "golden": [1, 3], "noise_ratio": 0.5}
    out = without_document(record, 2)
    assert out["documents"] == ["a", "g1", "g2"] and out["golden"] == [1, 2]
    assert out["noise_ratio"] == pytest.approx(1 / 3)


def test_an_unknown_overlong_value_is_refused_naming_the_key(tokenizer, records):
    with pytest.raises(ValueError, match="finetune.overlong: one of drop, truncate"):
        fit_examples(tokenizer, records, 10, "cut")


def _negatives(record):
    return [i for i in range(len(record["documents"])) if i not in record["golden"]]
