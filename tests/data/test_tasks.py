import random
from collections import Counter

import pytest

from zoomattn.data import tasks
from zoomattn.data.world import CONFLICT, UNKNOWN, FactSampler


def _asked(rec):
    words = rec["question"].split()
    return words[3], words[-2]  # "what is the {attribute} of ... {entity} ?"


def test_single_doc_golden_states_the_answer_and_noise_does_not(sampler):
    for _ in range(50):
        rec = tasks.single_doc(sampler, 0.8)
        attribute, entity = _asked(rec)
        fact = f"the {attribute} of {entity} is {rec['answers'][0]} ."
        assert len(rec["documents"]) == 5
        assert [i for i, d in enumerate(rec["documents"]) if fact in d] == rec["golden"]
        noise = [d for i, d in enumerate(rec["documents"]) if i not in rec["golden"]]
        assert not any(f"of {entity} is" in d for d in noise)


def test_golden_position_is_spread_over_all_positions(world):
    s = FactSampler(world, random.Random(1))
    positions = Counter(tasks.single_doc(s, 0.8)["golden"][0] for _ in range(500))
    assert set(positions) == set(range(5))
    assert min(positions.values()) > 60  # uniform would be 100 each


def test_noise_holds_hard_negatives_with_the_asked_attribute(world):
    s = FactSampler(world, random.Random(2))
    hard = 0
    for _ in range(100):
        rec = tasks.single_doc(s, 0.9)
        attribute, _ = _asked(rec)
        noise = [d for i, d in enumerate(rec["documents"]) if i not in rec["golden"]]
        hard += sum(f"the {attribute} of" in d for d in noise)
    assert hard > 300  # about half of 900 noise documents


def test_multihop_needs_both_golden_documents(sampler):
    rec = tasks.multihop(sampler, 0.8)
    first = rec["question"].split()[-2]
    bridge_doc, fact_doc = (rec["documents"][i] for i in rec["golden"])
    docs = {bridge_doc, fact_doc}
    bridge = next(d for d in docs if f"the friend of {first} is" in d)
    friend = bridge.split(f"the friend of {first} is ")[1].split()[0]
    assert any(f"of {friend} is {rec['answers'][0]}" in d for d in docs)
    assert len(rec["documents"]) == 10


def test_conversational_question_refers_back_to_the_entity_of_earlier_turns(sampler):
    rec = tasks.conversational(sampler, 0.5)
    assert rec["question"].startswith("what is its ")
    entity = rec["history"][0][0].split()[-2]
    golden = rec["documents"][rec["golden"][0]]
    assert f"of {entity} is {rec['answers'][0]}" in golden
    assert "question : what is its" in tasks.render_prompt(rec)


def test_faitheval_subsets_have_their_expected_answers(sampler, world):
    cf = tasks.counterfactual(sampler)
    attribute, entity = _asked(cf)
    assert cf["answers"][0] != world.famous[entity][attribute]
    un = tasks.unanswerable(sampler)
    attribute, entity = _asked(un)
    assert un["answers"] == [UNKNOWN]
    assert not any(f"the {attribute} of {entity} is" in d for d in un["documents"])
    inc = tasks.inconsistent(sampler)
    assert inc["answers"] == [CONFLICT] and len(inc["golden"]) == 2


def test_training_mix_is_deterministic_and_follows_weights(world):
    mix = {"single": 0.7, "multihop": 0.3}
    a = tasks.training_mix(world, mix, 300, 0.9, 8, seed=5)
    assert a == tasks.training_mix(world, mix, 300, 0.9, 8, seed=5)
    families = Counter(r["family"] for r in a)
    assert 150 < families["single"] < 270 and families["multihop"] > 40
    assert max(r["noise_ratio"] for r in a) < 0.9


def test_every_rendered_prompt_is_in_the_tokenizer_vocabulary(world, tokenizer):
    spec = {"family": "long", "chunks": 6}
    recs = tasks.benchmark_examples(world, "x", spec, 0.0, 20, seed=0)
    recs += tasks.training_mix(
        world,
        {
            k: 1.0
            for k in (
                "single",
                "multihop",
                "conversational",
                "long",
                "unanswerable",
                "inconsistent",
                "closed_book",
            )
        },
        100,
        0.9,
        6,
        1,
    )
    for rec in recs:
        ids = tokenizer(tasks.render_prompt(rec) + " " + rec["answers"][0])["input_ids"]
        assert tokenizer.unk_token_id not in ids


# --- LKG-RALM's robustness sets (retrieved_examples) ---------------------------------------------


def _retrieved(world, family, n_passages, share, seed):
    """The one record of ``retrieved_examples`` at ``seed`` and the texts of its golden documents
    before any cut or replacement: ``distractor_qa`` replayed from the same seed."""
    (rec,) = tasks.retrieved_examples(world, "x", family, 1, n_passages, share, seed)
    n_distractors = max(n_passages - (2 if family == "multihop" else 1), 0)
    source = tasks.distractor_qa(FactSampler(world, random.Random(seed)), family, n_distractors)
    return rec, {source["documents"][g] for g in source["golden"]}


def _at(rec, texts):
    return [i for i, d in enumerate(rec["documents"]) if d in texts]


def test_retrieved_examples_hold_exactly_n_passages_with_the_golden_text_at_golden(world):
    for family, n_golden in (("single", 1), ("multihop", 2)):
        for n_passages in (1, 2, 5, 12):
            for seed in range(10):
                rec, golden = _retrieved(world, family, n_passages, 0.0, seed)
                assert len(rec["documents"]) == n_passages
                assert len(rec["golden"]) == min(n_golden, n_passages)
                assert rec["golden"] == _at(rec, golden)
                assert rec["noise_ratio"] == pytest.approx(1 - len(rec["golden"]) / n_passages)
    (rec,) = tasks.retrieved_examples(world, "x", "single", 1, 3, 0.0, seed=0)
    attribute, entity = _asked(rec)
    assert (
        rec["documents"][rec["golden"][0]]
        == f"the {attribute} of {entity} is {rec['answers'][0]} ."
    )
    assert all(f"the {attribute} of " in d for d in rec["documents"])  # hard negatives
    recs = tasks.retrieved_examples(world, "x", "single", 3, 3, 0.0, seed=0)
    assert [r["id"] for r in recs] == ["x-0", "x-1", "x-2"]
    assert {r["placement"] for r in recs} == {"vanilla"}


def test_retrieved_examples_spread_the_golden_passage_over_all_positions(world):
    recs = tasks.retrieved_examples(world, "x", "single", 300, 4, 0.0, seed=1)
    positions = Counter(r["golden"][0] for r in recs)
    assert set(positions) == {0, 1, 2, 3} and min(positions.values()) > 45  # uniform: 75


def test_retrieved_examples_replace_exactly_round_share_times_n_passages(world):
    for family in ("single", "multihop"):
        # Python's round: halves go to the even neighbour (10 x 0.25 -> 2, 10 x 0.75 -> 8)
        cases = ((10, 0.3, 3), (3, 0.5, 2), (7, 0.2, 1), (10, 0.25, 2), (10, 0.75, 8), (6, 1.0, 6))
        for n_passages, share, replaced in cases:
            for seed in range(10):
                clean, golden = _retrieved(world, family, n_passages, 0.0, seed)
                rec, _ = _retrieved(world, family, n_passages, share, seed)
                pairs = zip(clean["documents"], rec["documents"], strict=True)
                changed = [i for i, (a, b) in enumerate(pairs) if a != b]
                assert len(changed) == replaced
                assert rec["golden"] == [g for g in clean["golden"] if g not in changed]
                assert rec["golden"] == _at(rec, golden)
                named = {w for d in [rec["question"], *golden] for w in d.split()}
                for i in changed:  # irrelevant: about none of the question's entities
                    assert rec["documents"][i].split()[3] not in named
                assert rec["noise_ratio"] == pytest.approx(1 - len(rec["golden"]) / n_passages)


def test_retrieved_examples_can_replace_the_golden_passages_too(world):
    kept = Counter()
    for seed in range(100):
        rec, golden = _retrieved(world, "multihop", 4, 0.5, seed)
        assert rec["golden"] == _at(rec, golden)
        kept[len(rec["golden"])] += 1
    assert set(kept) == {0, 1, 2}  # 2 of 4 replaced: both, one or neither golden passage goes


def test_retrieved_examples_with_no_passages_are_closed_book(world):
    recs = tasks.retrieved_examples(world, "x", "multihop", 5, 0, 0.5, seed=0)
    for rec in recs:
        assert rec["documents"] == [] and rec["golden"] == [] and rec["noise_ratio"] == 0.0
        assert rec["question"].startswith("what is the ") and rec["answers"]


def test_retrieved_examples_with_share_one_leave_no_golden_passage(world):
    for family in ("single", "multihop"):
        for seed in range(10):
            rec, golden = _retrieved(world, family, 5, 1.0, seed)
            assert len(rec["documents"]) == 5 and rec["golden"] == []
            assert rec["noise_ratio"] == 1.0 and _at(rec, golden) == []


def test_retrieved_examples_are_seeded(world):
    a = tasks.retrieved_examples(world, "x", "single", 10, 6, 0.5, seed=9)
    assert a == tasks.retrieved_examples(world, "x", "single", 10, 6, 0.5, seed=9)
    assert a != tasks.retrieved_examples(world, "x", "single", 10, 6, 0.5, seed=10)


def test_retrieved_examples_reject_a_share_outside_zero_one(world):
    with pytest.raises(ValueError, match="irrelevant share"):
        tasks.retrieved_examples(world, "x", "single", 1, 5, 1.5, seed=0)
    with pytest.raises(ValueError, match="passages >= 0"):
        tasks.retrieved_examples(world, "x", "single", 1, -1, 0.0, seed=0)


@pytest.mark.parametrize(
    ("family", "ratio", "documents"),
    [
        ("single", 0.0, 1),
        ("single", 0.5, 2),
        ("single", 0.9, 10),
        ("multihop", 0.5, 4),
        ("multihop", 0.9, 20),
    ],
)
def test_noisy_examples_hold_the_noise_ratios_document_count(world, family, ratio, documents):
    # docs/papers.md §0: round(n_golden / (1 - r)) documents in all, the golden ones among them
    records = tasks.noisy_examples(world, "set", family, 6, ratio, seed=1)
    golden = 2 if family == "multihop" else 1
    assert {len(r["documents"]) for r in records} == {documents}
    assert all(len(r["golden"]) == golden for r in records)
    assert all(r["noise_ratio"] == pytest.approx((documents - golden) / documents) for r in records)


def test_noisy_mix_draws_noise_ratios_below_the_maximum_and_is_seeded(world):
    records = tasks.noisy_mix(world, {"single": 0.5, "multihop": 0.5}, 200, 0.9, seed=3)
    assert records == tasks.noisy_mix(world, {"single": 0.5, "multihop": 0.5}, 200, 0.9, seed=3)
    counts = Counter(len(r["documents"]) for r in records)
    assert max(counts) <= 20 and min(counts) == 1 and len(counts) > 5
    assert {r["family"] for r in records} == {"single", "multihop"}
