"""Evaluation's generation passes (zoomattn/evaluation/generate.py) on the small random Llama:
greedy decoding as before issue 21, sampled decoding once per seed, the published rule's block."""

import random

import pytest
import torch
from transformers import AutoModelForCausalLM

from zoomattn.data import tasks
from zoomattn.data.world import FactSampler
from zoomattn.evaluation import metrics
from zoomattn.evaluation.generate import evaluate_records
from zoomattn.evaluation.official import RULES
from zoomattn.modeling.chat import stop_ids
from zoomattn.training.batching import encode_prompt, left_pad

STANDARD_KEYS = {"metric", "score", "ci_low", "ci_high", "n"}
SAMPLED = {"temperature": 1.5, "top_p": 0.95, "seeds": [1, 2, 3]}


@pytest.fixture(scope="module")
def model(base_dir):
    return AutoModelForCausalLM.from_pretrained(base_dir).eval()


@pytest.fixture(scope="module")
def records(world):
    sampler = FactSampler(world, random.Random(0))
    recs = [tasks.distractor_qa(sampler, "single", 2) for _ in range(5)]
    for i, rec in enumerate(recs):
        rec["id"], rec["subset"] = f"r{i}", "even" if i % 2 == 0 else "odd"
    return recs


@pytest.fixture(scope="module")
def hashed():
    """A metric that changes with the prediction's text, so averages over seeds mean something."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(metrics.METRICS, "hashed", lambda pred, rec: sum(map(ord, pred)) % 97)
        yield "hashed"


@pytest.fixture(scope="module")
def sampled(model, tokenizer, records, hashed):
    """(summary, rows) of one sampled evaluation (SAMPLED's three seeds, OpAmp's published rule),
    made once from a seeded RNG and read by several tests."""
    torch.manual_seed(123)
    return evaluate_records(
        model, tokenizer, records, hashed, 2, 6, decoding=SAMPLED, published_rule="opamp_pm"
    )


@torch.no_grad()
def _plain_greedy(model, tok, records, batch_size, max_new_tokens):
    """The greedy loop evaluation ran before decodings were configurable, restated."""
    answers = []
    for i in range(0, len(records), batch_size):
        batch = left_pad(
            [encode_prompt(tok, r) for r in records[i : i + batch_size]], tok.pad_token_id, "cpu"
        )
        out = model.generate(
            **batch,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=stop_ids(tok),
            pad_token_id=tok.pad_token_id,
        )
        new = out[:, batch["input_ids"].shape[1] :]
        answers += [tok.decode(row, skip_special_tokens=True).strip() for row in new]
    return answers


def test_greedy_evaluation_gives_the_plain_greedy_replies_rows_and_summary(
    model, tokenizer, records, hashed
):
    res, rows = evaluate_records(model, tokenizer, records, hashed, 2, 4)
    want = _plain_greedy(model, tokenizer, records, 2, 4)
    assert [r["prediction"] for r in rows] == want
    assert [set(r) for r in rows] == [{"id", "subset", "prediction", "answers", "score"}] * 5
    scores = [metrics.METRICS[hashed](p, rec) for p, rec in zip(want, records, strict=True)]
    assert [r["score"] for r in rows] == scores
    assert {k: res[k] for k in STANDARD_KEYS} == {"metric": hashed, **metrics.summarize(scores)}
    assert set(res) == STANDARD_KEYS | {"subsets", "decoding"}
    assert res["subsets"]["even"] == metrics.summarize(scores[0::2])
    assert res["decoding"] == {"temperature": 0.0, "top_p": 1.0, "seeds": [], "max_new_tokens": 4}


def test_a_greedy_decoding_block_with_one_seed_and_its_own_length_is_one_greedy_pass(
    model, tokenizer, records
):
    greedy = {"temperature": 0, "seeds": [9], "max_new_tokens": 2}
    res, rows = evaluate_records(model, tokenizer, records, "em", 2, 6, decoding=greedy)
    assert [r["prediction"] for r in rows] == _plain_greedy(model, tokenizer, records, 2, 2)
    assert res["decoding"] == {"temperature": 0.0, "top_p": 1.0, "seeds": [9], "max_new_tokens": 2}
    assert not any("predictions" in r for r in rows)


def test_sampled_decoding_is_reproducible_whatever_the_rng_state_before(
    model, tokenizer, records, hashed, sampled
):
    torch.manual_seed(456)  # the first evaluation (sampled) ran after torch.manual_seed(123)
    torch.rand(7)
    again = evaluate_records(
        model, tokenizer, records, hashed, 2, 6, decoding=SAMPLED, published_rule="opamp_pm"
    )
    assert sampled == again


def test_each_seed_is_its_own_pass_and_different_seeds_sample_differently(
    model, tokenizer, records, sampled
):
    _, rows = sampled
    for k, seed in enumerate(SAMPLED["seeds"]):
        alone = {**SAMPLED, "seeds": [seed]}
        _, single = evaluate_records(model, tokenizer, records, "em", 2, 6, decoding=alone)
        assert [r["predictions"][k] for r in rows] == [r["prediction"] for r in single]
    passes = list(zip(*(r["predictions"] for r in rows), strict=True))
    assert len(set(passes)) == 3  # three seeds, three different sets of replies
    assert passes[0] != tuple(_plain_greedy(model, tokenizer, records, 2, 6))


def test_sampled_rows_average_each_score_over_the_seeds(records, hashed, sampled):
    res, rows = sampled
    score, rule = metrics.METRICS[hashed], RULES["opamp_pm"].score
    for row, rec in zip(rows, records, strict=True):
        assert len(row["predictions"]) == 3 and row["prediction"] == row["predictions"][0]
        assert row["score"] == pytest.approx(sum(score(p, rec) for p in row["predictions"]) / 3)
        want = sum(rule(p, rec) for p in row["predictions"]) / 3
        assert row["score_published"] == pytest.approx(want)
    assert res["score"] == pytest.approx(sum(r["score"] for r in rows) / 5)
    assert res["decoding"] == {**SAMPLED, "max_new_tokens": 6}


def test_the_published_block_is_there_exactly_when_a_rule_is_named(model, tokenizer, records):
    plain, plain_rows = evaluate_records(model, tokenizer, records, "em", 2, 4)
    res, rows = evaluate_records(
        model, tokenizer, records, "em", 2, 4, published_rule="longbench_f1"
    )
    assert "published_rule" not in plain and not any("score_published" in r for r in plain_rows)
    assert {k: res[k] for k in STANDARD_KEYS} == {k: plain[k] for k in STANDARD_KEYS}
    rule = RULES["longbench_f1"].score
    published = [rule(r["prediction"], rec) for r, rec in zip(rows, records, strict=True)]
    assert [r["score_published"] for r in rows] == published
    block = res["published_rule"]
    assert set(block) == {"rule", "score", "ci_low", "ci_high", "n", "subsets"}
    assert {k: block[k] for k in ("score", "ci_low", "ci_high", "n")} == metrics.summarize(
        published
    )
    assert block["rule"] == "longbench_f1"
    assert block["subsets"]["odd"] == metrics.summarize(published[1::2])
