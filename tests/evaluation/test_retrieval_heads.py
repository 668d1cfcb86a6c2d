import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from zoomattn.attention.interface import masking_heads
from zoomattn.data import tasks
from zoomattn.evaluation import metrics
from zoomattn.evaluation.attention_share import document_spans
from zoomattn.evaluation.generate import evaluate_records
from zoomattn.evaluation.retrieval_heads import (
    head_scores,
    masking_experiment,
    passage_attention,
    random_heads,
    ranked_heads,
    retrieval_scores,
)

# Two questions, one layer, four heads; threshold 0.3. Hand-computed per-question F1 / EM in the
# comments (A: attended passages, G: golden).
Q1_GOLDEN = [0, 2]
Q1 = [
    [0.40, 0.10, 0.35, 0.10],  # A={0,2}: F1 1; top-2 {0,2}: EM 1
    [0.30, 0.50, 0.10, 0.10],  # 0.30 is not > 0.30, A={1}: F1 0; top-2 {1,0}: EM 0
    [0.20, 0.10, 0.20, 0.20],  # A={}: F1 0; tie at 0.20 -> lower indices {0,2}: EM 1
    [0.31, 0.31, 0.31, 0.31],  # A=all: P 1/2, R 1, F1 2/3; tie -> {0,1}: EM 0
]
Q2_GOLDEN = [1]
Q2 = [  # three passages (P differs between questions)
    [0.50, 0.40, 0.10],  # A={0,1}: P 1/2, R 1, F1 2/3; top-1 {0}: EM 0
    [0.10, 0.80, 0.10],  # A={1}: F1 1; EM 1
    [0.30, 0.30, 0.30],  # all equal to the threshold, A={}: F1 0; tie -> {0}: EM 0
    [0.00, 0.35, 0.65],  # A={1,2}: F1 2/3; top-1 {2}: EM 0
]
WANT_F1 = [(1 + 2 / 3) / 2, (0 + 1) / 2, 0.0, (2 / 3 + 2 / 3) / 2]
WANT_EM = [0.5, 0.5, 0.5, 0.0]


def _masses(*questions):
    """[L=2, H, P] per question: layer 1 holds layer 0's heads in reverse order."""
    return [np.array([q, q[::-1]]) for q in questions]


def test_retrieval_scores_match_hand_computed_f1_and_em():
    f1, em = retrieval_scores(_masses(Q1, Q2), [Q1_GOLDEN, Q2_GOLDEN], threshold=0.3)
    assert f1.shape == em.shape == (2, 4)
    np.testing.assert_allclose(f1, [WANT_F1, WANT_F1[::-1]], atol=1e-12)
    np.testing.assert_allclose(em, [WANT_EM, WANT_EM[::-1]], atol=1e-12)


def test_precision_and_recall_differ_with_three_golden_passages():
    golden = [0, 1, 3]
    heads = [
        [0.50, 0.05, 0.10, 0.40, 0.40],  # A={0,3,4}: P 2/3, R 2/3, F1 2/3; top-3 {0,3,4}: EM 0
        [0.50, 0.35, 0.05, 0.40, 0.30],  # A={0,1,3}: F1 1; top-3 {0,3,1}: EM 1
        [0.40, 0.00, 0.31, 0.31, 0.00],  # A={0,2,3}: P 2/3, R 2/3, F1 2/3; top-3 {0,2,3}: EM 0
        [0.90, 0.00, 0.00, 0.00, 0.00],  # A={0}: P 1, R 1/3, F1 1/2; tie -> {0,1,2}: EM 0
    ]
    f1, em = retrieval_scores([np.array([heads])], [golden], threshold=0.3)
    np.testing.assert_allclose(f1[0], [2 / 3, 1.0, 2 / 3, 0.5], atol=1e-12)
    np.testing.assert_allclose(em[0], [0, 1, 0, 0])


def test_two_golden_of_three_attended_gives_f1_of_unequal_precision_and_recall():
    mass = np.array([[[0.4, 0.0, 0.31, 0.31, 0.0]]])  # G={0,1}, A={0,2,3}: P 1/3, R 1/2
    f1, _ = retrieval_scores([mass], [[0, 1]], threshold=0.3)
    assert f1[0, 0] == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))


def test_a_mass_equal_to_the_threshold_is_not_attended_but_one_just_above_is():
    mass = np.array([[[0.3, 0.1, 0.1]]])
    assert retrieval_scores([mass], [[0]], threshold=0.3)[0][0, 0] == 0.0
    assert retrieval_scores([mass], [[0]], threshold=0.2999)[0][0, 0] == 1.0


def test_em_ignores_the_threshold_and_breaks_ties_towards_the_lower_index():
    tie = np.array([[[0.1, 0.2, 0.2, 0.1]]])  # top-1 by stable sort is passage 1, not 2
    assert retrieval_scores([tie], [[1]], threshold=0.9)[1][0, 0] == 1.0
    assert retrieval_scores([tie], [[2]], threshold=0.9)[1][0, 0] == 0.0


def test_duplicate_golden_indices_count_once():
    mass = np.array([[[0.6, 0.1, 0.5]]])
    f1, em = retrieval_scores([mass], [[2, 0, 2]], threshold=0.3)
    assert f1[0, 0] == 1.0 and em[0, 0] == 1.0


def test_a_question_without_golden_passages_is_an_error_naming_it():
    with pytest.raises(ValueError, match="question 1 has no golden"):
        retrieval_scores(_masses(Q1, Q2), [Q1_GOLDEN, []], threshold=0.3)


@pytest.mark.parametrize(
    "masses, goldens",
    [
        ([], []),  # no question
        (_masses(Q1), [Q1_GOLDEN, Q2_GOLDEN]),  # lengths differ
        (_masses(Q2), [[3]]),  # golden index outside the passages
        ([np.zeros((2, 4, 3)), np.zeros((2, 3, 3))], [[0], [0]]),  # head counts differ
    ],
)
def test_inconsistent_inputs_are_rejected(masses, goldens):
    with pytest.raises(ValueError):
        retrieval_scores(masses, goldens, threshold=0.3)


def test_heads_rank_by_f1_descending_with_ties_in_layer_head_order():
    f1 = np.array([[0.2, 0.9, 0.2], [0.9, 0.1, 0.5]])
    assert ranked_heads(f1) == [(0, 1), (1, 0), (1, 2), (0, 0), (0, 2), (1, 1)]
    assert ranked_heads(f1, 2) == [(0, 1), (1, 0)]


def _model(base_dir, attn="zoomattn"):
    """The small base with large random attention weights: at its init scale every head attends
    almost uniformly and masking heads does not change a single greedy token."""
    model = AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation=attn).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in model.model.layers:
            a = layer.self_attn
            for proj in (a.q_proj, a.k_proj, a.v_proj, a.o_proj):
                proj.weight.copy_(torch.randn(proj.weight.shape, generator=gen) * 0.5)
    return model


def test_passage_attention_equals_the_full_attention_matrix_summed_over_passages(
    base_dir, tokenizer, sampler
):
    rec = tasks.distractor_qa(sampler, "multihop", 4)
    got = passage_attention(_model(base_dir), tokenizer, rec)
    ids, spans = document_spans(tokenizer, rec)
    with torch.no_grad():
        out = _model(base_dir, "eager")(input_ids=torch.tensor([ids]), output_attentions=True)
    full = torch.stack(out.attentions)[:, 0, :, -1]  # [layers, heads, S]: the last query's row
    assert out.attentions[0].shape[-2:] == (len(ids), len(ids))
    want = torch.stack([full[..., a:b].sum(-1) for a, b in spans], dim=-1).numpy()
    assert got.shape == (4, 4, 6)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def _records(sampler, n, prefix="r"):
    recs = [tasks.distractor_qa(sampler, "multihop", 2) for _ in range(n)]
    for i, rec in enumerate(recs):
        rec["id"] = f"{prefix}-{i}"
    return recs


def test_head_scores_are_json_and_consistent_with_retrieval_scores(base_dir, tokenizer, sampler):
    model = _model(base_dir)
    recs = _records(sampler, 3)
    scores = head_scores(model, tokenizer, recs, threshold=0.2)
    assert json.loads(json.dumps(scores)) == scores
    masses = [passage_attention(model, tokenizer, r) for r in recs]
    f1, em = retrieval_scores(masses, [r["golden"] for r in recs], threshold=0.2)
    np.testing.assert_allclose(scores["f1"], f1)
    np.testing.assert_allclose(scores["em"], em)
    assert len(np.unique(f1)) > 3  # the heads differ
    assert (scores["threshold"], scores["n_examples"]) == (0.2, 3)
    assert (scores["layers"], scores["heads"]) == (4, 4)
    ranking = scores["ranking"]
    assert [r["rank"] for r in ranking] == list(range(1, 17))
    assert sorted((r["layer"], r["head"]) for r in ranking) == [
        (i, j) for i in range(4) for j in range(4)
    ]
    assert [r["f1"] for r in ranking] == sorted((r["f1"] for r in ranking), reverse=True)
    assert all(
        r["f1"] == f1[r["layer"], r["head"]] and r["em"] == em[r["layer"], r["head"]]
        for r in ranking
    )
    assert scores["max_f1"] == ranking[0]["f1"] == f1.max()
    assert scores["mean_f1"] == pytest.approx(f1.mean())


def test_head_scores_reject_a_record_without_golden_passages_by_id(base_dir, tokenizer, sampler):
    recs = _records(sampler, 2)
    recs[1]["golden"] = []
    with pytest.raises(ValueError, match="r-1"):
        head_scores(_model(base_dir), tokenizer, recs, threshold=0.2)


def test_random_heads_are_distinct_and_a_function_of_seed_and_k_only():
    a = random_heads(4, 4, 5, draws=3, seed=11)
    assert a == random_heads(4, 4, 5, draws=3, seed=11)
    assert a != random_heads(4, 4, 5, draws=3, seed=12)
    assert random_heads(4, 4, 5, draws=2, seed=11) == a[:2]
    for heads in a:
        assert len(set(heads)) == 5 and all(0 <= i < 4 and 0 <= j < 4 for i, j in heads)


@pytest.fixture
def hashed_metric(monkeypatch):
    """A metric that changes with the prediction, so masking shows in the scores."""
    monkeypatch.setitem(metrics.METRICS, "hashed", lambda pred, rec: sum(map(ord, pred)) % 97)
    return "hashed"


def test_masking_experiment_masks_top_and_reproducible_random_heads(
    base_dir, tokenizer, sampler, hashed_metric
):
    model = _model(base_dir)
    recs = _records(sampler, 3)
    f1 = np.random.default_rng(0).random((4, 4))
    run = dict(ks=[1, 3, 3, 100], draws=2, seed=5, batch_size=2, max_new_tokens=3)
    res = masking_experiment(model, tokenizer, recs, hashed_metric, f1, **run)
    assert json.loads(json.dumps(res)) == res
    assert res["metric"] == hashed_metric
    plain, _ = evaluate_records(model, tokenizer, recs, hashed_metric, 2, 3)
    assert res["baseline"] == plain["score"]
    assert [e["k"] for e in res["k"]] == [1, 3, 16]  # clipped to 16 heads, duplicates dropped
    flat = np.argsort(-f1.ravel())
    for e in res["k"]:
        k = e["k"]
        assert e["top_heads"] == [list(divmod(int(i), 4)) for i in flat[:k]]
        assert len(e["random"]) == len(e["random_heads"]) == 2
        assert e["random_mean"] == pytest.approx(np.mean(e["random"]))
        assert all(len({tuple(h) for h in heads}) == k for heads in e["random_heads"])
    assert res["k"][0]["top_heads"] == [list(np.unravel_index(f1.argmax(), f1.shape))]
    with masking_heads(model, res["k"][1]["top_heads"]):
        top3, _ = evaluate_records(model, tokenizer, recs, hashed_metric, 2, 3)
    assert res["k"][1]["top"] == top3["score"]
    scores = {res["baseline"]} | {x for e in res["k"] for x in (e["top"], *e["random"])}
    assert len(scores) > 3  # masking changes the answers, so equal scores below mean something
    every = res["k"][2]  # all heads masked either way
    assert every["random"] == [every["top"]] * 2

    other = masking_experiment(model, tokenizer, recs, hashed_metric, -f1, **run)
    assert other["k"][0]["top_heads"] != res["k"][0]["top_heads"]
    for a, b in zip(res["k"], other["k"], strict=True):  # same draws, same scores, other f1
        assert (a["random_heads"], a["random"]) == (b["random_heads"], b["random"])


def test_masking_experiment_rejects_f1_of_another_shape(base_dir, tokenizer, sampler):
    with pytest.raises(ValueError, match="shape"):
        masking_experiment(
            _model(base_dir),
            tokenizer,
            _records(sampler, 1),
            "em",
            np.zeros((4, 3)),
            ks=[1],
            draws=1,
            seed=0,
            batch_size=1,
            max_new_tokens=1,
        )
