"""The custom attentions on bf16 inputs (CPU): probes and references in fp32, LKG-RALM's probe and
estimator scores in fp32. OpAmp's are in tests/methods/opamp/test_bf16.py, rectified attention's
in tests/methods/rectify/test_kernel_bf16.py."""

import pytest
import torch

from tests.attention.test_math import _qkv, left_padding_mask
from tests.attention.test_relevance import SCALE, SEGMENTS, N, _padding_mask
from tests.attention.test_relevance import _qkv as _relevance_qkv
from zoomattn.attention.math import attention_probs, last_row_probs, last_row_scores
from zoomattn.attention.relevance import (
    call_mask,
    fusion_bias,
    relevance_attention,
    relevance_last_row,
)
from zoomattn.methods.lkg.estimator import ScoreHead, aux_losses

# --- probes (attention.math) ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_probes_of_half_precision_inputs_compute_in_fp32(dtype):
    """A half-precision softmax rounds each probability (rows summed to 1 within ~3e-3 in bf16);
    the probes upcast, so they are the fp32 computation on the same values."""
    q, k, _ = (t * 3 for t in _qkv())
    q, k = q.to(dtype), k.to(dtype)
    mask = left_padding_mask([7, 5], 7)
    probs, row = attention_probs(q, k, mask), last_row_probs(q, k, mask)
    assert probs.dtype == row.dtype == torch.float32
    assert torch.equal(probs, attention_probs(q.float(), k.float(), mask))
    torch.testing.assert_close(row, probs[:, :, -1])
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4, 7), atol=1e-6, rtol=0)
    scores = last_row_scores(q, k, mask)
    assert scores.dtype == torch.float32
    torch.testing.assert_close(scores, last_row_scores(q.float(), k.float(), mask), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_fully_masked_row_stays_finite_and_uniform_in_half_precision(dtype):
    """In fp16, finfo.min plus a negative score overflows to −inf, so a padding row's mass went to
    whichever keys did not overflow (NaN if none); in bf16 the row was uniform but rounded."""
    q, k, _ = _qkv()
    q, k = (q * 8).to(dtype), (-k * 8).to(dtype)  # large scores of both signs
    mask = left_padding_mask([7, 4], 7)  # rows 0-2 of the second sequence see no key
    probs = attention_probs(q, k, mask)
    assert torch.isfinite(probs).all()
    torch.testing.assert_close(probs[1, :, :3].float(), torch.full((4, 3, 7), 1 / 7))


# --- LKG-RALM: relevance fusion and the estimator ------------------------------------------------


def test_bf16_relevance_last_row_is_an_fp32_row_summing_to_one_and_zero_on_padding():
    """The probe computes scores, bias and softmax in fp32: in bf16 its rows summed to 1 only
    within ~2e-3 and were ~4e-3 off (relative) the exact row."""
    q, k, _, log_alpha = _relevance_qkv(d=64)
    q, k = (q * 2).bfloat16(), (k * 2).bfloat16()
    mask = _padding_mask()
    bias = fusion_bias(SEGMENTS, SEGMENTS, log_alpha, call_mask(mask, N, N, "cpu"))
    row = relevance_last_row(q, k, mask, SCALE, [1, 2], bias)
    exact = relevance_last_row(q.double(), k.double(), mask, SCALE, [1, 2], bias.double())
    assert row.dtype == torch.float32
    torch.testing.assert_close(row.double(), exact, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(row.sum(-1), torch.ones(2, 4), atol=1e-6, rtol=0)
    assert (row[1, :, :3] == 0).all()


def test_bf16_fused_heads_stay_finite_on_padding_rows():
    q, k, v, log_alpha = _relevance_qkv()
    q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    mask = _padding_mask()
    bias = fusion_bias(SEGMENTS, SEGMENTS, log_alpha, call_mask(mask, N, N, "cpu"))
    out = relevance_attention(q, k, v, mask, SCALE, [1, 2], bias)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()


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
