import numpy as np
import pytest
from transformers import AutoModelForCausalLM

from zoomattn.data.records import make_record
from zoomattn.data.world import ATTRIBUTES
from zoomattn.evaluation.rectification import answer_gap, answer_positions, score_margins


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


def test_score_margins_cover_every_example_layer_and_head_and_xi_auto_is_half_the_median(
    world, base_dir, tokenizer
):
    model = AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="zoomattn").eval()
    out = score_margins(model, tokenizer, [_record(world), _record(world, "reverse")])
    margins = np.array(out["margins"])
    assert margins.shape == (2, 4, 4) and (margins > 0).all()  # SMALL_MODEL: 4 layers, 4 heads
    assert out["median"] == pytest.approx(float(np.median(margins)), abs=1e-3)
    assert out["xi_auto"] == pytest.approx(out["median"] / 2, abs=1e-3)
