import random
from collections import Counter

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
