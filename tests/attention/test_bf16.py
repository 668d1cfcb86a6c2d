"""The shared probes and references on half-precision inputs (CPU) compute in fp32. The methods'
kernels on bf16 are tested in their folders (tests/methods/<method>/)."""

import pytest
import torch

from tests.attention.test_math import _qkv, left_padding_mask
from zoomattn.attention.math import attention_probs, last_row_probs, last_row_scores

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
