import pytest
import torch

from tests.methods.rectify.test_kernel import right_padding_mask
from zoomattn.attention import kernels
from zoomattn.attention.math import (
    attention_probs,
    last_row_probs,
    plain_mask,
    repeat_kv,
    right_padded_causal,
    row_dot,
    sdpa,
)


def _qkv(b=2, h=4, hkv=2, n=7, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, h, n, d, generator=g),
        torch.randn(b, hkv, n, d, generator=g),
        torch.randn(b, hkv, n, d, generator=g),
    )


def left_padding_mask(lengths, n):
    """Boolean [B, 1, n, n] causal mask with left padding, as transformers' sdpa_mask builds it."""
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    rows = []
    for length in lengths:
        keep = torch.arange(n) >= n - length
        rows.append(causal & keep[None, :])
    return torch.stack(rows)[:, None]


@pytest.mark.parametrize("padded", [False, True])
def test_fused_sdpa_equals_materialised_softmax_with_gqa(padded):
    q, k, v = _qkv()
    mask = left_padding_mask([7, 4], 7) if padded else None
    ref = attention_probs(q, k, mask) @ repeat_kv(v, 4)
    out = sdpa(q, k, v, mask)
    valid = slice(None) if not padded else slice(3, None)  # padded query rows are don't-care
    torch.testing.assert_close(out[1, :, valid], ref[1, :, valid], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[0], ref[0], atol=1e-5, rtol=1e-5)


def test_last_row_equals_the_last_row_of_the_matrix():
    q, k, _ = _qkv()
    mask = left_padding_mask([7, 5], 7)
    torch.testing.assert_close(last_row_probs(q, k, mask), attention_probs(q, k, mask)[:, :, -1])
    assert torch.allclose(last_row_probs(q, k, mask).sum(-1), torch.ones(2, 4))


def test_single_decoding_step_attends_to_every_cached_key():
    q, k, v = _qkv(n=5)
    out = sdpa(q[:, :, -1:], k, v)
    ref = torch.softmax(q[:, :, -1:] @ repeat_kv(k, 4).transpose(-1, -2) / 8**0.5, -1) @ repeat_kv(
        v, 4
    )
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_a_masked_grouped_call_on_cuda_repeats_the_kv_heads_instead_of_asking_sdpa_for_gqa():
    """CUDA's memory-efficient kernel (the one that takes masks) has no GQA: asked for it, SDPA
    would fall back to the math kernel and its N×N scores."""
    from types import SimpleNamespace

    from zoomattn.attention.math import gqa_for_kernel

    k = v = torch.randn(1, 2, 5, 4)
    on_cuda = SimpleNamespace(shape=(1, 4, 5, 4), device=SimpleNamespace(type="cuda"))
    mask = torch.ones(1, 1, 5, 5, dtype=torch.bool)
    k2, v2, grouped = gqa_for_kernel(on_cuda, k, v, mask)
    assert not grouped and k2.shape[1] == v2.shape[1] == 4
    assert torch.equal(k2[:, 1], k[:, 0]) and torch.equal(k2[:, 2], k[:, 1])
    assert gqa_for_kernel(on_cuda, k, v, None)[2]  # unmasked: flash has GQA
    assert gqa_for_kernel(torch.randn(1, 4, 5, 4), k, v, mask)[2]  # the CPU kernel has it too


@pytest.mark.parametrize("heads", [1, 4, 8])
def test_row_dot_a_few_heads_at_a_time_equals_the_whole_in_fp32(heads):
    torch.manual_seed(0)
    a = torch.randn(2, 6, 5, 16, dtype=torch.bfloat16)
    b = torch.randn(2, 5, 6, 16, dtype=torch.bfloat16).transpose(1, 2)  # strided, as dO may be
    whole = (a.float() * b.float()).sum(-1)
    got = row_dot(a, b, heads=heads)
    assert got.dtype == torch.float32 and got.is_contiguous() and got.shape == (2, 6, 5)
    torch.testing.assert_close(got, whole, atol=0, rtol=0)


def test_row_dot_with_b_lo_takes_b_as_computed_in_fp32_and_leaves_b_as_it_was():
    """``b_lo``, b's rounding error in bf16, restores b as computed in fp32 (to bf16's own error
    on the residual, ~2⁻¹⁷ of b): the rectification backward's Δ from its forward's output."""
    torch.manual_seed(0)
    a = torch.randn(2, 6, 5, 16, dtype=torch.bfloat16)
    exact = torch.randn(2, 6, 5, 16, dtype=torch.float32)
    b = exact.to(torch.bfloat16)
    b_lo = (exact - b.float()).to(torch.bfloat16)
    kept = b.clone()
    want = (a.double() * exact.double()).sum(-1)
    got = row_dot(a, b, heads=4, b_lo=b_lo)
    rounded = row_dot(a, b, heads=4)
    assert torch.equal(b, kept)
    error, rounded_error = ((x.double() - want).abs().max() for x in (got, rounded))
    assert error < rounded_error / 64  # bf16 keeps 2⁻⁹ of the residual: ~1/256 of b's error


# --- plain SDPA under ``attention_kernels: {plain: fused}``: right padding run as causal --------
# (fixture ``plain_fused_as_on_cuda``: tests/attention/conftest.py)


def _q(dtype=torch.float32, d=8):
    return torch.zeros(2, 4, 7, d, dtype=dtype)


def test_only_a_causal_boolean_mask_with_at_most_right_padding_reads_as_right_padded():
    assert right_padded_causal(right_padding_mask([7, 4], 7))
    assert right_padded_causal(right_padding_mask([7, 7], 7))  # no padding: causal itself
    assert right_padded_causal(right_padding_mask([4], 7))  # one row, broadcast over a batch
    assert not right_padded_causal(left_padding_mask([7, 4], 7))
    both = right_padding_mask([7, 5], 7) & left_padding_mask([7, 6], 7)
    assert not right_padded_causal(both)
    passages = right_padding_mask([7], 7).clone()
    passages[..., 4:, 1:3] = False  # a structured mask
    assert not right_padded_causal(passages)
    assert not right_padded_causal(right_padding_mask([7, 0], 7))  # a row of padding alone
    assert not right_padded_causal(right_padding_mask([7, 4], 7)[:, :, -1:])  # a decoding step
    assert not right_padded_causal(right_padding_mask([7, 4], 7).float())  # not boolean
    assert not right_padded_causal(right_padding_mask([7, 4], 7).expand(2, 3, 7, 7))  # per head


def test_fused_alone_leaves_plain_sdpa_on_its_mask_and_the_reference_setting_records_nothing():
    mask, q = right_padding_mask([7, 4], 7), _q(torch.bfloat16)
    with kernels.using(kernels.REFERENCE):
        assert plain_mask(mask, q) is mask and kernels.paths_run() == {}
    with kernels.using(kernels.FUSED):
        assert plain_mask(mask, q) is mask and kernels.paths_run() == {}
    with kernels.using({"plain": "fused"}):  # on the CPU: the reference, recorded
        assert plain_mask(mask, q) is mask
        assert kernels.paths_run() == {"plain": "reference"}


def test_on_cuda_only_what_its_flash_kernel_takes_runs_causal(monkeypatch):
    """Without a mask a GQA call needs flash (fp16/bf16, head dim ≤ 256): elsewhere CUDA would
    fall to the math kernel's N×N scores, so the mask stays (the real rule, not the fixture's)."""
    choose, cuda = kernels.choose, torch.device("cuda")
    monkeypatch.setattr(kernels, "choose", lambda m, device, *a: choose(m, cuda, *a))
    mask = right_padding_mask([7, 4], 7)
    with kernels.using({"plain": "fused"}):
        assert plain_mask(mask, _q(torch.bfloat16)) is None
        assert plain_mask(mask, _q(torch.float16, d=256)) is None
        assert plain_mask(mask, _q(torch.float32)) is mask
        assert plain_mask(mask, _q(torch.bfloat16, d=512)) is mask
        assert kernels.paths_run() == {"plain": "fused+reference (no flash kernel)"}


@pytest.mark.usefixtures("plain_fused_as_on_cuda")
def test_right_padding_runs_causal_and_any_other_mask_keeps_it_recorded_with_the_reason():
    right, left = right_padding_mask([7, 4], 7), left_padding_mask([7, 4], 7)
    assert plain_mask(right, _q()) is None
    assert plain_mask(left, _q()) is left
    assert kernels.paths_run() == {"plain": "fused+reference (not right padding)"}


@pytest.mark.usefixtures("plain_fused_as_on_cuda")
def test_right_padded_sdpa_run_causal_gives_every_real_row_its_output_and_gradients():
    """Real rows: the masked call's values, and q/k/v gradients of a loss on them; the padded rows
    (which no loss reads) then differ, so the mask was indeed dropped."""
    mask, real = right_padding_mask([7, 4], 7), torch.tensor([[True] * 7, [True] * 4 + [False] * 3])

    def run(setting):
        q, k, v = (t.requires_grad_() for t in _qkv())
        with kernels.using(setting):
            out = sdpa(q, k, v, mask)
            (out * real[:, None, :, None]).square().sum().backward()
            ran = kernels.paths_run()
        return ran, out.detach(), q.grad, k.grad, v.grad

    causal, masked = run({"plain": "fused"}), run(kernels.REFERENCE)
    assert (causal[0], masked[0]) == ({"plain": "fused"}, {})
    causal, masked = causal[1:], masked[1:]
    for got, want in zip(causal[1:], masked[1:], strict=True):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    real_rows = real[:, None, :, None].expand_as(causal[0])
    torch.testing.assert_close(causal[0][real_rows], masked[0][real_rows], atol=1e-6, rtol=1e-5)
    assert not torch.allclose(causal[0][~real_rows], masked[0][~real_rows])
