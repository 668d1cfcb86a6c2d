import math

import pytest
import torch

from zoomattn.methods.lkg.estimator import (
    PassageEstimator,
    ScoreHead,
    aux_losses,
    guidance,
    passage_entropy,
)

E1 = math.e - 1  # log(1 + (e − 1)) = 1
LN2 = math.log(2)


def _close(got: torch.Tensor, want) -> None:
    torch.testing.assert_close(got, torch.tensor(want, dtype=got.dtype), atol=1e-6, rtol=0)


def test_guidance_follows_eq5_layer_by_layer_from_alpha_init():
    """β = 0.2, α^{-1} = 1, step = log(1+H)·log(1+r)·log(1+c).
    layer 0: p0 H = r = c = e−1 -> step 1     -> α = 0.2·1 + 0.8·1          = 1.0
             p1 H = c = e−1, r = 1 -> ln 2    -> α = 0.2·ln2 + 0.8           = 0.938629
    layer 1: p0 H = r = c = 1 -> (ln 2)^3     -> α = 0.2·0.333025 + 0.8·1.0  = 0.866605
             p1 r = 0 -> step 0               -> α = 0.8·0.938629            = 0.750903"""
    r = torch.tensor([[[E1, 1.0], [1.0, 0.0]]])  # [B=1, Lyr=2, P=2]
    c = torch.tensor([[[E1, E1], [1.0, E1]]])
    h = torch.tensor([[[E1, E1], [1.0, E1]]])
    alpha = guidance(r, c, h, beta=0.2, alpha_init=1.0)
    want = [[1.0, 0.2 * LN2 + 0.8], [0.2 * LN2**3 + 0.8, 0.8 * (0.2 * LN2 + 0.8)]]
    torch.testing.assert_close(alpha, torch.tensor([want]))
    _close(alpha[0], [[1.0, 0.938629], [0.866605, 0.750903]])


def test_guidance_without_entropy_uses_log2_for_every_layer():
    """w/o ELS: H = 1, log(1 + H) = ln 2, same r and c as above.
    layer 0: p0 ln2·1·1 = 0.693147      -> α = 0.138629 + 0.8            = 0.938629
             p1 ln2·ln2·1 = 0.480453    -> α = 0.096091 + 0.8            = 0.896091
    layer 1: p0 (ln2)^3 = 0.333025      -> α = 0.066605 + 0.8·0.938629   = 0.817508
             p1 r = 0                   -> α = 0.8·0.896091              = 0.716873"""
    r = torch.tensor([[[E1, 1.0], [1.0, 0.0]]])
    c = torch.tensor([[[E1, E1], [1.0, E1]]])
    alpha = guidance(r, c, torch.ones_like(r), beta=0.2, alpha_init=1.0)
    want = [[0.938629, 0.896091], [0.817508, 0.716873]]
    _close(alpha[0], want)


def test_guidance_starts_from_alpha_init():
    """One layer with a zero step: α = (1 − β)·α_init = 0.5·0.4."""
    zero = torch.zeros(1, 1, 3)
    _close(guidance(zero, zero, zero, beta=0.5, alpha_init=0.4), [[[0.2] * 3]])


def test_passage_entropy_is_normalised_by_log_n_and_averaged_over_heads():
    """Passages: tokens 0-3 (n 4), 4-5 (n 2), 6 (n 1). Head 0: uniform over passage 0 (H 1),
    one-hot in passage 1 (0); head 1: one-hot in passage 0 (0), uniform over passage 1 (1).
    One-token passage: 0. Mean over heads: 0.5, 0.5, 0."""
    in_passage = torch.zeros(1, 3, 7, dtype=torch.bool)
    in_passage[0, 0, :4] = in_passage[0, 1, 4:6] = in_passage[0, 2, 6] = True
    probs = torch.zeros(1, 2, 3, 7)
    probs[0, 0, 0, :4] = 0.25
    probs[0, 0, 1, 4] = 1.0
    probs[0, 1, 0, 2] = 1.0
    probs[0, 1, 1, 4:6] = 0.5
    probs[0, :, 2, 6] = 1.0
    _close(passage_entropy(probs, in_passage), [[0.5, 0.5, 0.0]])


def test_passage_entropy_renormalises_within_the_passage():
    """Row (0.2, 0.2, 0.6 outside): uniform over the 2-token passage -> 1. Row (0.5, 0.5, 0, 0)
    over a 4-token passage: ln 2 / ln 4 = 0.5."""
    in_passage = torch.tensor([[[True, True, False, False], [True, True, True, True]]])
    probs = torch.tensor([[[[0.2, 0.2, 0.6, 0.0], [0.5, 0.5, 0.0, 0.0]]]])
    _close(passage_entropy(probs, in_passage), [[1.0, 0.5]])


def test_passage_entropy_gradient_is_finite_with_zero_probabilities():
    probs = torch.tensor([[[[1.0, 0.0, 0.0]]]], requires_grad=True)
    passage_entropy(probs, torch.ones(1, 1, 3, dtype=torch.bool)).sum().backward()
    assert torch.isfinite(probs.grad).all()


def _aux_example():
    """Row 0: two passages over two layers; row 1: no passage (values that would be infinite)."""
    r = torch.tensor([[[0.8, 0.4], [0.5, 0.5]], [[0.0, 1.0], [0.0, 1.0]]], requires_grad=True)
    c = torch.tensor([[[0.5, 0.9], [0.5, 0.5]], [[1.0, 0.0], [1.0, 0.0]]], requires_grad=True)
    alpha = torch.tensor([[0.75, 0.25], [0.0, 0.0]], requires_grad=True)
    labels = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    agreement = torch.tensor([[1.0, 0.5], [0.0, 1.0]])
    valid = torch.tensor([[True, True], [False, False]])
    return r, c, alpha, labels, agreement, valid


def test_aux_losses_by_hand_and_rows_without_passages_add_nothing():
    """relevance: mean(−ln .8, −ln .6, ln 2, ln 2) = (0.223144 + 0.510826 + 2·0.693147)/4
    = 0.530066; confidence: BCE(.5, 1) = ln 2, BCE(.9, .5) = −(.5 ln .9 + .5 ln .1) = 1.203973,
    layer 1: ln 2 twice -> (3·0.693147 + 1.203973)/4 = 0.820854; diversity: p = (.75, .25),
    H = .75·0.287682 + .25·1.386294 = 0.562335 -> −0.562335."""
    r, c, alpha, labels, agreement, valid = _aux_example()
    losses = aux_losses(r, c, alpha, labels, agreement, valid)
    assert losses["relevance"].item() == pytest.approx(0.530066, abs=1e-5)
    assert losses["confidence"].item() == pytest.approx(0.820854, abs=1e-5)
    assert losses["diversity"].item() == pytest.approx(-0.562335, abs=1e-5)
    sum(losses.values()).backward()
    for t in (r, c, alpha):
        assert torch.isfinite(t.grad).all()
        assert (t.grad[1] == 0).all()  # the row without passages


def test_aux_losses_of_a_batch_without_passages_are_zero_not_nan():
    r, c, alpha, labels, agreement, valid = _aux_example()
    losses = aux_losses(r, c, alpha, labels, agreement, torch.zeros_like(valid))
    assert all(v.item() == 0.0 for v in losses.values())
    sum(losses.values()).backward()
    assert torch.isfinite(r.grad).all() and torch.isfinite(alpha.grad).all()


def test_diversity_skips_rows_with_one_passage():
    r, c, alpha, labels, agreement, _ = _aux_example()
    valid = torch.tensor([[True, False], [True, True]])
    alpha = torch.tensor([[0.9, 0.1], [0.5, 0.5]])  # row 1: uniform, H = ln 2
    assert aux_losses(r, c, alpha, labels, agreement, valid)["diversity"].item() == pytest.approx(
        -LN2
    )


def test_estimator_scores_are_probabilities_per_layer_and_passage_and_dropout_only_trains():
    torch.manual_seed(0)
    est = PassageEstimator(hidden=12, adapter_dim=6, score_dim=4, dropout=0.5)
    e_p, e_q = torch.randn(2, 3, 5, 12), torch.randn(2, 3, 12)
    est.eval()
    r, c = est(e_p, e_q)
    assert r.shape == c.shape == (2, 3, 5)
    assert ((r > 0) & (r < 1) & (c > 0) & (c < 1)).all()
    torch.testing.assert_close(est(e_p, e_q)[0], r)  # no dropout in eval
    # passage i's score depends on passage i and the question only
    e_p2 = e_p.clone()
    e_p2[:, :, 0] = torch.randn(2, 3, 12)
    r2, _ = est(e_p2, e_q)
    torch.testing.assert_close(r2[..., 1:], r[..., 1:])
    assert not torch.allclose(r2[..., 0], r[..., 0])
    est.train()
    assert not torch.allclose(est(e_p, e_q)[0], r)


def test_bf16_estimator_scores_are_fp32_and_keep_a_gradient_where_bf16_sigmoid_is_one():
    """σ of a bf16 logit ≥ ~6.2 rounds to exactly 1: the BCE of a wrong, confident estimate then
    clamps at 100 and its gradient is 0. The score heads return fp32 whatever their dtype (the
    fusion bias's log α comes from them)."""
    head = ScoreHead(adapter_dim=4, score_dim=4).bfloat16()
    with torch.no_grad():
        head.offset.fill_(8.0)  # logit 8: σ = 0.99966, 1.0 in bf16
    a_question = torch.zeros(1, 1, 4, dtype=torch.bfloat16)
    a_passages = torch.zeros(1, 1, 2, 4, dtype=torch.bfloat16)
    r = head(a_passages, a_question)
    assert r.dtype == torch.float32 and (r < 1).all()
    labels, valid = torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool)
    loss = aux_losses(r, r, r[:, -1], labels, labels, valid)["relevance"]
    (grad,) = torch.autograd.grad(loss, head.offset)
    assert loss.item() == pytest.approx(8.0, abs=0.01)  # −log(1 − σ(8)) ≈ 8, not 100
    assert grad.item() == pytest.approx(1.0, abs=0.01)  # ∂/∂logit = σ − label
