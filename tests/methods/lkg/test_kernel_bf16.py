"""LKG-RALM's fusion on bf16 inputs (CPU): the probe computes scores, bias and softmax in fp32, and
the fused heads stay finite on padding rows."""

import torch

from tests.methods.lkg.test_kernel import SCALE, SEGMENTS, N, _padding_mask, _qkv
from zoomattn.methods.lkg.kernel import (
    call_mask,
    fusion_bias,
    relevance_attention,
    relevance_last_row,
)


def test_bf16_relevance_last_row_is_an_fp32_row_summing_to_one_and_zero_on_padding():
    """The probe computes scores, bias and softmax in fp32: in bf16 its rows summed to 1 only
    within ~2e-3 and were ~4e-3 off (relative) the exact row."""
    q, k, _, log_alpha = _qkv(d=64)
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
    q, k, v, log_alpha = _qkv()
    q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    mask = _padding_mask()
    bias = fusion_bias(SEGMENTS, SEGMENTS, log_alpha, call_mask(mask, N, N, "cpu"))
    out = relevance_attention(q, k, v, mask, SCALE, [1, 2], bias)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
