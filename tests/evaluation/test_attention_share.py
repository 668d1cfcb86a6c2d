import numpy as np
import pytest
from transformers import AutoModelForCausalLM

from zoomattn.data.records import make_record
from zoomattn.data.tasks import single_doc
from zoomattn.data.world import ATTRIBUTES
from zoomattn.evaluation.attention_share import (
    answer_gap,
    answer_positions,
    document_shares,
    document_spans,
    golden_attention,
)


def test_document_spans_cover_exactly_each_documents_tokens(tokenizer, sampler):
    rec = single_doc(sampler, 0.8)
    ids, spans = document_spans(tokenizer, rec)
    for (a, b), doc in zip(spans, rec["documents"], strict=True):
        assert tokenizer.decode(ids[a:b]) == doc


def test_shares_sum_to_one_and_summary_is_per_position(base_dir, tokenizer, sampler):
    model = AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="zoomattn").eval()
    recs = [single_doc(sampler, 0.8) for _ in range(12)]
    assert np.isclose(document_shares(model, tokenizer, recs[0]).sum(), 1.0)
    summary = golden_attention(model, tokenizer, recs)
    assert summary["n_documents"] == 5 and len(summary["by_position"]) == 5
    assert sum(p["n_golden_here"] for p in summary["by_position"]) == 12
    assert 0.0 < summary["mean_golden_share"] < 1.0


def _record(world, placement="vanilla"):
    """The answer is written in the golden document and in a distractor."""
    other, entity = world.ordinary[:2]
    value = ATTRIBUTES["country"][0]
    return make_record(
        id="r0",
        family="single",
        question=f"what is the country of {entity} ?",
        answers=[value],
        documents=[f"the country of {other} is {value} .", f"the country of {entity} is {value} ."],
        golden=[1],
        placement=placement,
    )


@pytest.mark.parametrize("placement", ["vanilla", "reverse"])
def test_answer_positions_are_the_answer_tokens_of_the_golden_document_only(
    world, tokenizer, placement
):
    rec = _record(world, placement)
    ids, positions = answer_positions(tokenizer, rec)
    tokens = tokenizer.convert_ids_to_tokens(ids)
    value = rec["answers"][0]
    assert [tokens[p] for p in positions] == value.split()
    occurrences = [i for i, t in enumerate(tokens) if t == value.split()[0]]
    assert len(occurrences) == 2 and positions[0] == occurrences[1]  # the golden one only


def test_answer_gap_skips_records_without_the_answer_in_a_golden_document(
    world, base_dir, tokenizer
):
    model = AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="zoomattn").eval()
    absent = {**_record(world), "answers": [ATTRIBUTES["country"][1]]}
    out = answer_gap(model, tokenizer, [_record(world), absent])
    assert out["answer_gap_examples"] == 1
    assert out["answer_gap_ci_low"] <= out["answer_gap"] <= out["answer_gap_ci_high"]
    assert answer_gap(model, tokenizer, [absent]) == {"answer_gap": None, "answer_gap_examples": 0}


def test_golden_attention_takes_the_answer_gap_of_its_first_records_from_the_same_forward(
    base_dir, tokenizer, sampler
):
    model = AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="zoomattn").eval()
    recs = [single_doc(sampler, 0.8) for _ in range(6)]
    both = golden_attention(model, tokenizer, recs, answer_gap_examples=4)
    assert both == golden_attention(model, tokenizer, recs) | answer_gap(model, tokenizer, recs[:4])
    assert both["answer_gap_examples"] == 4
    assert "answer_gap" not in golden_attention(model, tokenizer, recs)
