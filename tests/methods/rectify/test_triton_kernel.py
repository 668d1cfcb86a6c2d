"""The fused Triton rectified attention (methods/rectify/triton_kernel.py) against the materialised
formula, values and gradients of q, u, k, v: on the CPU through Triton's interpreter
(tests/conftest.py sets TRITON_INTERPRET=1 where CUDA is absent), tiny shapes with 16×16 tiles so
that every sequence spans several tiles, one of them ragged; and where dispatch sends it (inside
the model: ``test_triton_in_model.py``)."""

import pytest
import torch

from tests.attention.test_tile_ranges import scattered_mask
from tests.methods.rectify.test_kernel import _inputs, left_padding_mask, right_padding_mask
from tests.spies import record_returns
from tests.triton_interpreter import (
    SPANS,
    interpreter_or_skip,
    kernel_switches,
    one_way,
    switch_cases,
    with_switches,
)
from zoomattn.attention import kernels
from zoomattn.methods.rectify import kernel as rectify_kernel
from zoomattn.methods.rectify.kernel import (
    G_VARIANTS,
    Rectifier,
    rectified_attention,
    rectified_attention_materialised,
)

interpreter_or_skip("tests/gpu/test_rectify_triton_on_cuda.py")
from zoomattn.methods.rectify import triton_kernel  # noqa: E402
from zoomattn.methods.rectify.triton_kernel import fused_rectified_attention  # noqa: E402

# every test both ways: a padding causal mask as bytes or as each row's span of keys, and dK/dV's
# tiles as [queries, keys] or as [keys, queries]; or with one as shipped where it cannot matter
padding_spans, kv_keys_as_rows, spans_as_shipped, kv_as_shipped = kernel_switches(triton_kernel)


def switches_pairwise(name: str, values: tuple) -> pytest.MarkDecorator:
    """A model-scale test's cases over both switches and a two-valued ``name``: four runs in
    which every pair of the three takes each of its four value pairs (the orthogonal array L4)
    and the defaults (both on) meet ``values[0]``, where the full product takes eight; the
    kernel-scale tests above run every switch with every case."""
    first, second = values
    cases = [(True, True, first), (True, False, second), (False, True, second),
             (False, False, first)]  # fmt: skip
    return with_switches((name,), cases)


N = 24  # 16 + 8: two query tiles and two key tiles, the second ragged
# name: (B, H, H_kv, L, S, padding lengths or None: left padding, right where the name says so);
# GQA throughout (2 query heads per KV head)
SCENARIOS = {
    "padded": (2, 2, 1, N, N, [N, 13]),  # 11 fully masked (padding) rows in the second sequence
    "right_padded": (2, 2, 1, N, N, [N, 13]),  # training's batches: 11 padded rows see 13 keys
    "causal_prefill": (1, 2, 1, N, N, None),
    "decoding_step": (1, 2, 1, 1, N, None),
}


def _scenario(name, dtype):
    b, h, hkv, n_q, n_k, lengths = SCENARIOS[name]
    padding_mask = right_padding_mask if name.startswith("right") else left_padding_mask
    mask = None if lengths is None else padding_mask(lengths, n_q)
    return _inputs(b, h, hkv, n_q, n_k, d=16, dtype=dtype), mask


def _values_and_grads(fn, inputs):
    out = fn(*inputs)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out.dtype)
    return out, torch.autograd.grad((out * weight).sum(), inputs)


def _assert_fused_is_materialised(g, inputs, mask, causal=None, reference_mask=None, tiles=None):
    """fp32 values and gradients, every row (padding rows too: both give them 0)."""
    fused = _values_and_grads(
        lambda *t: fused_rectified_attention(*t, g, mask, causal=causal, tiles=tiles), inputs
    )
    reference_mask = mask if reference_mask is None else reference_mask
    reference = _values_and_grads(
        lambda *t: rectified_attention_materialised(*t, g, reference_mask), inputs
    )
    assert fused[0].dtype == torch.float32 and torch.isfinite(fused[0]).all()
    torch.testing.assert_close(fused[0], reference[0], atol=1e-5, rtol=1e-5)
    for name, a, b in zip("quvk", fused[1], reference[1], strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"d{n}: {m}")


# every g with padding (g's code in the kernel), every scenario with the method's g (the masking,
# causal and decoding code): the pairs that reach each part of the kernel; each under both dK/dV
# layouts, and under both readings of the mask where it has one
FP32_CASES = switch_cases(
    triton_kernel,
    [(g, "padded") for g in G_VARIANTS] + [("max", s) for s in SCENARIOS if s != "padded"],
    lambda name, scenario: SCENARIOS[scenario][-1] is not None,
)


@with_switches(("name", "scenario"), FP32_CASES)
def test_fused_equals_materialised_in_fp32_values_and_gradients(name, scenario):
    inputs, mask = _scenario(scenario, torch.float32)
    _assert_fused_is_materialised(Rectifier(name, 3.0), inputs, mask)


@spans_as_shipped  # the layouts are the subject
def test_fused_at_an_unequal_dk_dv_tile_equals_materialised_in_fp32():
    """dK/dV at 16 queries × 32 keys (the CUDA table's tile with KV_KEYS_AS_ROWS off), where the
    other tests run 16 × 16: each layout's values and gradients."""
    inputs, mask = _scenario("padded", torch.float32)
    tiles = {**triton_kernel._tiles(16, torch.device("cpu")), "kv": (16, 32, 1, 1)}
    _assert_fused_is_materialised(Rectifier("max", 3.0), inputs, mask, tiles=tiles)


@spans_as_shipped  # no mask
def test_fused_identity_g_at_xi_zero_equals_materialised():
    inputs, mask = _scenario("causal_prefill", torch.float32)
    _assert_fused_is_materialised(Rectifier("max", 0.0), inputs, mask)


@spans_as_shipped  # no mask
def test_fused_causal_queries_over_a_longer_cache_are_offset_by_s_minus_l():
    """causal=True with L < S (chunked prefill over a cache): query i sees keys ≤ i + S − L."""
    inputs = _inputs(1, 2, 1, 8, N, d=16, dtype=torch.float32)
    offset_causal = torch.ones(8, N, dtype=torch.bool).tril(N - 8)[None, None]
    _assert_fused_is_materialised(Rectifier("max", 3.0), inputs, None, True, offset_causal)


@kv_as_shipped  # no backward
@pytest.mark.parametrize("fused_decoding", [True, False])
def test_rectified_attention_runs_the_fused_kernel_where_dispatch_says_fused(
    fused_decoding, on_cuda_under_fused, monkeypatch
):
    """Prefill through the kernel; a decoding step (one query) through it too, or with
    FUSED_DECODING off through the block-wise path, recorded as declined."""
    monkeypatch.setattr(rectify_kernel, "FUSED_DECODING", fused_decoding)
    g = Rectifier("sigmoid", 3.0)
    for scenario in ("padded", "decoding_step"):
        (q, u, k, v), mask = _scenario(scenario, torch.float32)
        with torch.no_grad():
            out = rectified_attention(q, u, k, v, g, mask)
            reference = rectified_attention_materialised(q, u, k, v, g, mask)
        torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)
    if fused_decoding:
        assert on_cuda_under_fused == [(N, True), (1, False)]
        assert kernels.paths_run() == {"rectify": "fused"}
    else:
        assert on_cuda_under_fused == [(N, True)]
        assert kernels.paths_run() == {"rectify": "fused+reference (decoding)"}


@kv_as_shipped  # no backward
@pytest.mark.parametrize("name", ["max", "sigmoid"])
def test_a_xi_beyond_the_kernels_largest_is_declined_by_the_dispatch_and_refused_by_the_kernel(
    name, on_cuda_under_fused
):
    """The kernel's smooth max-min takes e^a for |a| ≤ ξ beside e^{−|x|}, accurate in fp32 up to
    ``MAX_XI``: past it the block-wise path runs, recorded as declined, and a direct call of the
    kernel is an error. g = tanh, which has no e^a, takes any ξ."""
    (q, u, k, v), mask = _scenario("padded", torch.float32)
    g = Rectifier(name, 2 * rectify_kernel.MAX_XI)
    with torch.no_grad():
        out = rectified_attention(q, u, k, v, g, mask)
        reference = rectified_attention_materialised(q, u, k, v, g, mask)
        torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)
        assert on_cuda_under_fused == []
        assert kernels.paths_run() == {"rectify": "reference (xi > 64)"}
        with pytest.raises(ValueError, match=f"xi ≤ 64 for g {name}"):
            fused_rectified_attention(q, u, k, v, g, mask)
        for taken in (Rectifier(name, rectify_kernel.MAX_XI), Rectifier("tanh", g.xi)):
            torch.testing.assert_close(  # at the bound, and tanh at any ξ: the kernel
                rectified_attention(q, u, k, v, taken, mask),
                rectified_attention_materialised(q, u, k, v, taken, mask), atol=1e-5, rtol=1e-5,
            )  # fmt: skip
    assert on_cuda_under_fused == [(N, True), (N, True)]


@spans_as_shipped  # the kernel never runs
@kv_as_shipped
def test_fused_setting_keeps_the_blockwise_path_on_the_cpu():
    (q, u, k, v), mask = _scenario("padded", torch.float32)
    g = Rectifier("max", 3.0)
    with torch.no_grad():
        blockwise = rectified_attention(q, u, k, v, g, mask, block=8)
        with kernels.using("fused"):
            out = rectified_attention(q, u, k, v, g, mask, block=8)
            assert kernels.paths_run() == {"rectify": "reference"}
    assert torch.equal(out, blockwise)


@spans_as_shipped  # refused before a launch
@kv_as_shipped
def test_fused_rejects_float64_a_mask_of_the_wrong_shape_and_head_dim_over_128_naming_them():
    (q, u, k, v), mask = _scenario("padded", torch.float32)
    g = Rectifier("max", 3.0)
    with pytest.raises(ValueError, match="float64"):
        fused_rectified_attention(q.double(), u.double(), k.double(), v.double(), g)
    with pytest.raises(ValueError, match="mask"):
        fused_rectified_attention(q, u, k, v, g, mask[:, :, :, :-1])
    with pytest.raises(ValueError, match="mask"):
        fused_rectified_attention(q, u, k, v, g, mask.float())
    wide = [t.repeat_interleave(9, dim=-1) for t in (q, u, k, v)]  # D = 144
    with pytest.raises(ValueError, match="head dim"):
        fused_rectified_attention(*wide, g)


@spans_as_shipped  # a mask that is not padding: its bytes either way
def test_fused_with_a_scattered_mask_and_empty_tiles_equals_materialised():
    inputs = _inputs(2, 2, 1, N, N, d=16, dtype=torch.float32)
    _assert_fused_is_materialised(Rectifier("max", 3.0), inputs, scattered_mask(N, N))


@spans_as_shipped  # not padding
@kv_as_shipped  # no backward
def test_fused_row_whose_first_tile_allows_nothing_keeps_its_true_maximum():
    """Row 1 allows only key 20, in the second key tile its query tile visits (row 0 allows key
    0), and every score is −150: its running maximum must come from that tile, not from the
    empty first one (a maximum of 0 there would make exp(−150) vanish and the row 0)."""
    d, n = 16, 32
    q = torch.full((1, 1, 16, d), -37.5)  # q·k·s = −37.5 · 16 · 16^−½ = −150
    u = torch.zeros_like(q)
    k = torch.ones(1, 1, n, d)
    v = torch.randn(1, 1, n, d, generator=torch.Generator().manual_seed(0))
    mask = torch.zeros(1, 1, 16, n, dtype=torch.bool)
    mask[0, 0, 0, 0] = mask[0, 0, 1, 20] = True
    mask[0, 0, 2:, :] = True
    g = Rectifier("max", 3.0)
    with torch.no_grad():
        out = fused_rectified_attention(q, u, k, v, g, mask)
        reference = rectified_attention_materialised(q, u, k, v, g, mask)
    torch.testing.assert_close(out[0, 0, 1], v[0, 0, 20])
    torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)


@one_way(SPANS, True)
@kv_as_shipped  # the mask is read as either layout takes it
@pytest.mark.parametrize("scenario", ["padded", "right_padded"])
def test_a_padding_mask_reaches_the_kernels_as_key_spans_once_per_mask(monkeypatch, scenario):
    """With PADDING_SPANS, forward and backward get mode 2 (a mask of one row broadcast over the
    batch included), and the mask is examined once while the same tensor comes back unedited."""
    common = record_returns(monkeypatch, triton_kernel, "_common")
    examined = record_returns(monkeypatch, triton_kernel, "padding_spans")
    inputs, mask = _scenario(scenario, torch.float32)
    g = Rectifier("max", 3.0)
    # row 1's mask broadcast over both batch rows, then the batch's own, which the in-place edit
    # below then changes: the same tensor as the last call's, found anew by its version alone
    for one_row_mask in (mask[1:], mask):
        for _ in range(2):  # two layers of one forward
            out = fused_rectified_attention(*inputs, g, one_row_mask)
            reference = rectified_attention_materialised(*inputs, g, one_row_mask.expand_as(mask))
            ok = one_row_mask.expand_as(mask).any(-1, keepdim=True)
            torch.testing.assert_close(out.where(ok, 0.0), reference.where(ok, 0.0))
            out.sum().backward()
    assert [spec["HAS_MASK"] for *_, spec in common] == [2] * 8 and len(examined) == 2
    mask[0, 0, -1, 0] = False  # edited in place: examined again, and no longer padding
    fused_rectified_attention(*inputs, g, mask).sum().backward()
    assert len(examined) == 3 and [spec["HAS_MASK"] for *_, spec in common[-2:]] == [1, 1]


@kv_as_shipped  # the ranges are found as either layout takes them
def test_the_tiles_a_mask_leaves_are_found_once_per_mask_and_tile_table(monkeypatch):
    """Every layer of a forward passes the same mask: its tile ranges (a few reductions over the
    [B, L, S] mask) are found by the first and reused, found again after an in-place edit or for
    another tile table, and each call's values are the formula's."""
    found = record_returns(monkeypatch, triton_kernel, "tile_ranges")
    inputs, mask = _scenario("padded", torch.float32)
    g = Rectifier("max", 3.0)

    def layer(tiles=None):
        out = fused_rectified_attention(*inputs, g, mask, tiles=tiles)
        ok = mask.any(-1, keepdim=True)
        want = rectified_attention_materialised(*inputs, g, mask)
        torch.testing.assert_close(out.where(ok, 0.0), want.where(ok, 0.0))
        out.sum().backward()

    layer(), layer()
    assert len(found) == 1
    mask[1, 0, -1, :3] = False  # edited in place: found again
    layer()
    assert len(found) == 2
    layer({**triton_kernel._tiles(16, torch.device("cpu")), "kv": (16, 32, 1, 1)})
    assert len(found) == 3
