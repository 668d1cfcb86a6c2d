"""The guided rows' attention apart from flex, chunk by chunk, against the materialised formula;
what its backward keeps. (Through the fused path and the model: test_flex.py.)"""

import pytest
import torch

from zoomattn.attention.math import repeat_kv
from zoomattn.methods.lkg import rows_apart
from zoomattn.methods.lkg.kernel import column_log_alpha

B, H, KV, L, D = 2, 4, 2, 24, 8
SEGMENTS = [-1] + [0] * 7 + [1] * 6 + [-2] * 4 + [-3] * 6  # bos, 2 passages, question, answer


def inputs(dtype, padded: bool):
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, n, L, D, dtype=dtype).requires_grad_() for n in (H, KV, KV))
    log_alpha = torch.randn(B, 2, dtype=torch.float32).requires_grad_()
    segments = torch.tensor([SEGMENTS, SEGMENTS])
    rows = torch.tensor([list(range(14, 24)), list(range(10, 20))])  # the second: passage rows
    mask = None
    if padded:  # batch row 1: left padding of 12, so its row 10 has no key
        mask = torch.ones(L, L, dtype=torch.bool).tril().expand(B, 1, L, L).clone()
        mask[1, :, :, :12] = False
    return q, k, v, mask, rows, segments, log_alpha


def formula(q, k, v, mask, rows, segments, log_alpha):
    """softmax(q·kᵀ/√d + log α by column + mask)·v of the rows, every score materialised; a row
    with no key gives 0."""
    q64, k64, v64 = q.double(), repeat_kv(k.double(), H), repeat_kv(v.double(), H)
    scores = q64 @ k64.transpose(-1, -2) * D**-0.5
    scores = scores + column_log_alpha(segments, log_alpha).double()[:, None, None]
    allowed = torch.ones(L, L, dtype=torch.bool).tril()[None, None] if mask is None else mask
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1).nan_to_num(0.0)
    out = probs @ v64
    return out.gather(2, rows[:, None, :, None].expand(B, H, -1, D))


@pytest.mark.parametrize("chunk_bytes", [None, 3 * 4 * B * H * L], ids=["whole", "3_rows"])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_rows_equal_the_materialised_formula_in_values_and_gradients(
    chunk_bytes, padded, dtype, monkeypatch
):
    """Each chunk of rows (3 of 10: four chunks, the last of one row) gives the formula's values
    and the gradients of q, k, v and log α, with GQA and a row the mask leaves no key; fp32 to
    1e-5, bf16 inputs computed in fp32 to that output's rounding."""
    if chunk_bytes is not None:
        monkeypatch.setattr(rows_apart, "CHUNK_BYTES", chunk_bytes)
        assert len(rows_apart.row_chunks(B, H, 10, L)) == 4
    q, k, v, mask, rows, segments, log_alpha = inputs(dtype, padded)
    out = rows_apart.guided_rows_attention(q, k, v, mask, None, rows, segments, log_alpha)
    expected = formula(q, k, v, mask, rows, segments, log_alpha)
    assert out.dtype == dtype
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=8e-3, rtol=8e-3)
    torch.testing.assert_close(out.double(), expected, **tol)
    if padded:
        assert out[1, :, 0].eq(0).all()  # row 10 of batch row 1: no key
    weight = torch.randn(out.shape, dtype=torch.float64)
    leaves = (q, k, v, log_alpha)
    grads = torch.autograd.grad((out.double() * weight).sum(), leaves)
    expected_grads = torch.autograd.grad((expected * weight).sum(), leaves)
    for name, got, want in zip("q k v log_alpha".split(), grads, expected_grads, strict=True):
        torch.testing.assert_close(got.double(), want.double(), **tol, msg=name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_backward_keeps_the_rows_outputs_and_log_sum_exps_not_their_scores(dtype):
    """What autograd saves beyond the layer's own tensors (q, k, v, the mask) is the gathered q
    rows, the per-column log α, the rows' indices, their fp32 outputs and log-sum-exps: no tensor
    of R·S scores per head, where the materialised softmax kept [B, H, R, S] fp32, and no fp32
    copy of K or V, which it kept for bf16 inputs."""
    q, k, v, mask, rows, segments, log_alpha = inputs(dtype, padded=True)
    layer_held = {t.data_ptr() for t in (q, k, v, mask)}
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = rows_apart.guided_rows_attention(q, k, v, mask, None, rows, segments, log_alpha)
    kept = {t.data_ptr(): t for t in saved if t.data_ptr() not in layer_held}.values()
    r = rows.shape[1]
    assert all(t.numel() < B * H * r * L for t in kept)  # no [R, S] per head
    assert not any(t.shape[-2:] == k.shape[-2:] and t.is_floating_point() for t in kept)
    kept_bytes = sum(t.untyped_storage().nbytes() for t in kept)
    # q rows in their dtype; outputs and log-sum-exps in fp32; indices, log α by column
    assert kept_bytes <= B * H * r * (D * q.element_size() + 4 * D + 4) + 16 * B * (L + r)
    out.float().sum().backward()  # and backward runs from what was kept
    assert log_alpha.grad is not None and log_alpha.grad.abs().sum() > 0


def test_with_log_alpha_frozen_q_k_and_v_get_the_gradients_they_get_beside_a_trained_one():
    """A log α that needs no gradient (an estimator not trained): backward skips its sum over
    the scores, and q, k and v get the same gradients, bit for bit."""
    q, k, v, mask, rows, segments, log_alpha = inputs(torch.float32, padded=True)
    leaves = (q, k, v)
    trained = rows_apart.guided_rows_attention(q, k, v, mask, None, rows, segments, log_alpha)
    want = torch.autograd.grad(trained.sum(), leaves)
    frozen = log_alpha.detach()
    out = rows_apart.guided_rows_attention(q, k, v, mask, None, rows, segments, frozen)
    got = torch.autograd.grad(out.sum(), leaves)
    for name, a, b in zip("qkv", got, want, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0, msg=name)
