import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from zoomattn.attention.math import additive_mask, repeat_kv, sdpa
from zoomattn.methods.rectify.kernel import (
    G_VARIANTS,
    Rectifier,
    rectified_attention,
    rectified_attention_materialised,
    rectified_last_row,
)

LOG3 = math.log(3.0)


# --- g -------------------------------------------------------------------------------------------


def _naive_smooth(a, b):
    """log(eᵃ + eᵇ + 1) − log(e⁻ᵃ + e⁻ᵇ + 1), straight from the formula (moderate inputs only)."""
    return torch.log(a.exp() + b.exp() + 1) - torch.log((-a).exp() + (-b).exp() + 1)


@pytest.mark.parametrize("name", ["max", "sigmoid", "tanh_plus_x"])
def test_g_at_xi_zero_is_exactly_the_identity(name):
    x = torch.linspace(-20, 20, 101, dtype=torch.float64)
    assert torch.equal(Rectifier(name, 0.0)(x), x)


def test_tanh_g_at_xi_zero_is_exactly_zero():
    x = torch.linspace(-20, 20, 101, dtype=torch.float64)
    assert torch.equal(Rectifier("tanh", 0.0)(x), torch.zeros_like(x))


@pytest.mark.parametrize("xi", [0.0, 0.5, 3.0, 10.0])
@pytest.mark.parametrize("name", G_VARIANTS)
def test_g_of_zero_is_zero_for_every_variant_and_xi(name, xi):
    for dtype in (torch.float32, torch.float64):
        assert Rectifier(name, xi)(torch.zeros(3, dtype=dtype)).abs().max().item() == 0.0


@pytest.mark.parametrize("xi", [0.5, 3.0])
def test_max_g_is_the_smooth_max_min_of_xi_tanh_x_and_x(xi):
    x = torch.linspace(-6, 6, 241, dtype=torch.float64)
    expected = _naive_smooth(xi * torch.tanh(x), x)
    torch.testing.assert_close(Rectifier("max", xi)(x), expected, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("xi", [0.5, 3.0])
def test_sigmoid_g_is_the_smooth_max_min_of_2xi_centred_sigmoid_and_x(xi):
    x = torch.linspace(-6, 6, 241, dtype=torch.float64)
    expected = _naive_smooth(2 * xi * (torch.sigmoid(x) - 0.5), x)
    torch.testing.assert_close(Rectifier("sigmoid", xi)(x), expected, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("xi", [0.5, 3.0])
def test_tanh_variants_are_xi_tanh_x_and_xi_tanh_x_plus_x(xi):
    x = torch.linspace(-6, 6, 241, dtype=torch.float64)
    torch.testing.assert_close(Rectifier("tanh", xi)(x), xi * torch.tanh(x))
    torch.testing.assert_close(Rectifier("tanh_plus_x", xi)(x), xi * torch.tanh(x) + x)


@pytest.mark.parametrize("xi", [0.1, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("name", ["max", "sigmoid"])
def test_smooth_g_is_within_log3_of_exact_max_for_positive_and_min_for_negative_x(name, xi):
    x = torch.linspace(-60, 60, 2401, dtype=torch.float64)
    a = xi * torch.tanh(x) if name == "max" else 2 * xi * (torch.sigmoid(x) - 0.5)
    exact = torch.where(x >= 0, torch.maximum(a, x), torch.minimum(a, x))
    gap = (Rectifier(name, xi)(x) - exact).abs()
    assert gap.max().item() <= LOG3 + 1e-12
    # far from 0, a saturates at ±ξ and the gap tends to log(1 + e^-ξ) (the "+1" of the form)
    far = gap[x.abs() > 40]
    torch.testing.assert_close(far, torch.full_like(far, math.log1p(math.exp(-xi))))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", G_VARIANTS)
def test_g_and_its_gradient_stay_finite_for_inputs_up_to_1e4(name, dtype):
    x = torch.tensor([-1e4, -1e3, -100.0, -1.0, 0.0, 1.0, 100.0, 1e3, 1e4], dtype=dtype)
    x.requires_grad_(True)
    y = Rectifier(name, 3.0)(x)
    (grad,) = torch.autograd.grad(y.sum(), x)
    assert torch.isfinite(y).all() and torch.isfinite(grad).all()
    if name != "tanh":  # the x term dominates: g(±1e4) ≈ ±1e4
        assert abs(y[-1].item() - 1e4) <= LOG3 + 3 and abs(y[0].item() + 1e4) <= LOG3 + 3


def test_unknown_g_variant_raises_value_error_naming_it():
    with pytest.raises(ValueError, match="unknown variant 'relu'"):
        Rectifier("relu", 1.0)


@pytest.mark.parametrize("xi", [-1.0, -1e-9, float("nan")])
def test_negative_or_nan_xi_raises_value_error_naming_xi(xi):
    with pytest.raises(ValueError, match="xi"):
        Rectifier("max", xi)


# --- attention -----------------------------------------------------------------------------------


def left_padding_mask(lengths, n):
    """Boolean [B, 1, n, n] causal mask with left padding, as transformers' sdpa_mask builds it."""
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    return torch.stack([causal & (torch.arange(n) >= n - length)[None, :] for length in lengths])[
        :, None
    ]


def right_padding_mask(lengths, n):
    """Boolean [B, 1, n, n] causal mask with right padding (training's batches, ``pad_batch``), as
    transformers builds it: the padded rows see every real key."""
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    return torch.stack([causal & (torch.arange(n) < length)[None, :] for length in lengths])[
        :, None
    ]


def _inputs(b, h, hkv, n_q, n_k, d=8, dtype=torch.float64, seed=0):
    """q, u [B, H, L, D] and k, v [B, H_kv, S, D], laid out as the model produces them
    ([B, L, H, D] transposed: non-contiguous), leaves requiring grad."""
    gen = torch.Generator().manual_seed(seed)

    def projected(heads, n):
        x = torch.randn(b, n, heads, d, generator=gen, dtype=dtype)
        return x.transpose(1, 2).requires_grad_(True)

    return projected(h, n_q), projected(h, n_q), projected(hkv, n_k), projected(hkv, n_k)


# name: (B, H, H_kv, L, S, block, left-padding lengths or None)
SCENARIOS = {
    "causal_prefill": (2, 4, 2, 13, 13, 4, None),
    "left_padded_mask": (2, 4, 2, 13, 13, 4, [13, 8]),
    "gqa_4_over_2": (1, 4, 2, 11, 11, 3, None),
    "mha_4_over_4": (1, 4, 4, 11, 11, 3, [11]),
    "mqa_8_over_1": (2, 8, 1, 11, 11, 3, [11, 6]),
    "block_not_dividing_length": (1, 4, 2, 37, 37, 8, [37]),
    "block_not_dividing_length_causal": (2, 4, 2, 37, 37, 8, None),
    "block_larger_than_length": (2, 4, 2, 9, 9, 16, [9, 5]),
    "block_equal_to_length": (1, 4, 2, 9, 9, 9, None),
    "decoding_step": (2, 4, 2, 1, 11, 4, None),
}


def _scenario(name, dtype=torch.float64):
    b, h, hkv, n_q, n_k, block, lengths = SCENARIOS[name]
    mask = None if lengths is None else left_padding_mask(lengths, n_q)
    return _inputs(b, h, hkv, n_q, n_k, dtype=dtype), mask, block


def _value_and_grads(fn, inputs, mask):
    """Every row, padding rows too: a row the mask leaves no key gives 0 in every path, as SDPA."""
    out = fn()
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    grads = torch.autograd.grad((out * weight).sum(), inputs)
    return out.detach(), grads


def _assert_same(fn_a, fn_b, inputs, mask, tol):
    out_a, grads_a = _value_and_grads(fn_a, inputs, mask)
    out_b, grads_b = _value_and_grads(fn_b, inputs, mask)
    torch.testing.assert_close(out_a, out_b, atol=tol, rtol=tol)
    for i, (ga, gb) in enumerate(zip(grads_a, grads_b, strict=True)):
        torch.testing.assert_close(ga, gb, atol=tol, rtol=tol, msg=lambda m, i=i: f"grad {i}: {m}")


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("xi", [0.0, 3.0])
@pytest.mark.parametrize("name", G_VARIANTS)
def test_blockwise_equals_materialised_in_values_and_gradients_float64(name, xi, scenario):
    (q, u, k, v), mask, block = _scenario(scenario)
    g = Rectifier(name, xi)
    _assert_same(
        lambda: rectified_attention(q, u, k, v, g, mask, block=block),
        lambda: rectified_attention_materialised(q, u, k, v, g, mask),
        (q, u, k, v),
        mask,
        tol=1e-10,
    )


@pytest.mark.parametrize("scenario", ["left_padded_mask", "block_not_dividing_length_causal"])
@pytest.mark.parametrize("name", G_VARIANTS)
def test_blockwise_equals_materialised_in_values_and_gradients_float32(name, scenario):
    (q, u, k, v), mask, block = _scenario(scenario, dtype=torch.float32)
    g = Rectifier(name, 3.0)
    _assert_same(
        lambda: rectified_attention(q, u, k, v, g, mask, block=block),
        lambda: rectified_attention_materialised(q, u, k, v, g, mask),
        (q, u, k, v),
        mask,
        tol=2e-5,
    )


def test_blockwise_honours_an_explicit_scaling():
    (q, u, k, v), mask, block = _scenario("left_padded_mask")
    g = Rectifier("max", 3.0)
    _assert_same(
        lambda: rectified_attention(q, u, k, v, g, mask, scaling=0.7, block=block),
        lambda: rectified_attention_materialised(q, u, k, v, g, mask, scaling=0.7),
        (q, u, k, v),
        mask,
        tol=1e-10,
    )


def test_blockwise_without_grad_equals_materialised():
    (q, u, k, v), mask, block = _scenario("block_not_dividing_length")
    g = Rectifier("sigmoid", 3.0)
    with torch.no_grad():
        out = rectified_attention(q, u, k, v, g, mask, block=block)
        ref = rectified_attention_materialised(q, u, k, v, g, mask)
    assert not out.requires_grad
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("scenario", ["causal_prefill", "left_padded_mask", "decoding_step"])
@pytest.mark.parametrize("name", ["max", "sigmoid", "tanh_plus_x"])
def test_identity_g_at_xi_zero_is_plain_sdpa_on_the_updated_queries(name, scenario):
    (q, u, k, v), mask, block = _scenario(scenario)
    g = Rectifier(name, 0.0)
    for fn in (
        lambda: rectified_attention(q, u, k, v, g, mask, block=block),
        lambda: rectified_attention_materialised(q, u, k, v, g, mask),
    ):
        _assert_same(fn, lambda: sdpa(q + u, k, v, mask), (q, u, k, v), mask, tol=1e-10)


@pytest.mark.parametrize("scenario", ["causal_prefill", "left_padded_mask", "decoding_step"])
@pytest.mark.parametrize("xi", [0.0, 3.0])
@pytest.mark.parametrize("name", G_VARIANTS)
def test_zero_update_gives_plain_sdpa_for_every_variant(name, xi, scenario):
    (q, _, k, v), mask, block = _scenario(scenario)
    u = torch.zeros_like(q)
    g = Rectifier(name, xi)
    for fn in (
        lambda: rectified_attention(q, u, k, v, g, mask, block=block),
        lambda: rectified_attention_materialised(q, u, k, v, g, mask),
    ):
        _assert_same(fn, lambda: sdpa(q, k, v, mask), (q, k, v), mask, tol=1e-10)


def _hand_probs(q, u, k, g, mask):
    """softmax(q·kᵀ·s + g(u·kᵀ·s) + mask), written out: [B, H, L, S]; 0 in a row the mask leaves
    no key."""
    kt = repeat_kv(k, q.shape[1]).transpose(-1, -2)
    s = q.shape[-1] ** -0.5
    scores = q @ kt * s + g(u @ kt * s)
    probs = (scores + additive_mask(mask, q.shape[2], k.shape[2], q.dtype, q.device)).softmax(-1)
    return probs if mask is None else probs * mask.any(-1, keepdim=True)


@pytest.mark.parametrize("scenario", ["causal_prefill", "left_padded_mask", "mqa_8_over_1"])
def test_materialised_is_the_hand_written_formula(scenario):
    (q, u, k, v), mask, _ = _scenario(scenario)
    g = Rectifier("max", 3.0)
    ref = _hand_probs(q, u, k, g, mask) @ repeat_kv(v, q.shape[1])
    torch.testing.assert_close(rectified_attention_materialised(q, u, k, v, g, mask), ref)


@pytest.mark.parametrize("scenario", ["causal_prefill", "left_padded_mask", "mqa_8_over_1"])
@pytest.mark.parametrize("name", G_VARIANTS)
def test_last_row_equals_the_last_row_of_the_materialised_probabilities(name, scenario):
    (q, u, k, v), mask, block = _scenario(scenario)
    g = Rectifier(name, 3.0)
    with torch.no_grad():
        row = rectified_last_row(q, u, k, g, mask)
        probs = _hand_probs(q, u, k, g, mask)
        out = rectified_attention(q, u, k, v, g, mask, block=block)
    assert row.shape == (q.shape[0], q.shape[1], k.shape[2])
    torch.testing.assert_close(row, probs[:, :, -1], atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(row.sum(-1), torch.ones_like(row[..., 0]))
    last_out = (row.unsqueeze(-2) @ repeat_kv(v, q.shape[1]))[:, :, 0]
    torch.testing.assert_close(last_out, out[:, :, -1], atol=1e-10, rtol=1e-10)


# --- memory --------------------------------------------------------------------------------------


class _LargestTensor(TorchDispatchMode):
    """Largest numel of any tensor an aten op returns, forward and backward separately."""

    def __init__(self):
        super().__init__()
        self.phase = "forward"
        self.largest = {"forward": 0, "backward": 0}
        self.ops = {"forward": 0, "backward": 0}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops[self.phase] += 1
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.largest[self.phase] = max(self.largest[self.phase], t.numel())
        return out


def _largest_tensors(fn):
    """Run fn() forward and backward; record the largest tensor any op returns in each phase."""
    with _LargestTensor() as rec:
        loss = fn().square().mean()
        rec.phase = "backward"
        loss.backward()
    return rec


def _saved_bytes(fn, existing):
    """Bytes of the storages autograd keeps from fn()'s forward for backward, other than those of
    the tensors in ``existing`` (the inputs: views of them cost nothing)."""
    known = {t.untyped_storage().data_ptr() for t in existing}
    saved = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in known:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(saved.values())


def test_blockwise_forward_and_backward_never_create_an_l_by_s_tensor():
    b, h, hkv, n, block = 1, 8, 4, 512, 64
    q, u, k, v = _inputs(b, h, hkv, n, n, d=16, dtype=torch.float32)
    g = Rectifier("max", 3.0)
    score_matrix = b * h * n * n  # one [B, H, L, S] matrix
    one_block = b * h * block * n  # one block's scores: [B, H, block, S]

    blockwise = _largest_tensors(lambda: rectified_attention(q, u, k, v, g, block=block))
    assert blockwise.ops["backward"] > 0  # the recorder sees backward (and its recomputation)
    for phase in ("forward", "backward"):
        assert blockwise.largest[phase] <= one_block, (phase, blockwise.largest)
        assert blockwise.largest[phase] < score_matrix
    assert all(t.grad is not None for t in (q, u, k, v))

    materialised = _largest_tensors(lambda: rectified_attention_materialised(q, u, k, v, g))
    assert materialised.largest["forward"] >= score_matrix  # the check can fail
    assert materialised.largest["backward"] >= score_matrix


@pytest.mark.parametrize("padded", [False, True])
def test_blockwise_keeps_nothing_quadratic_for_backward(padded):
    """Each block is a checkpoint: between forward and backward autograd keeps only the block
    inputs (views of q, u, k, v and of the caller's mask), not the blocks' scores, nor a causal
    mask per block (together O(N²))."""
    b, h, hkv, n, block = 1, 2, 1, 512, 64
    q, u, k, v = _inputs(b, h, hkv, n, n, d=8, dtype=torch.float32)
    mask = left_padding_mask([n - 100], n) if padded else None
    g = Rectifier("max", 3.0)
    inputs = (q, u, k, v) if mask is None else (q, u, k, v, mask)
    one_output = b * h * n * 8 * 4  # bytes of one [B, H, L, D] fp32 tensor
    score_matrix = b * h * n * n * 4

    out, saved = _saved_bytes(lambda: rectified_attention(q, u, k, v, g, mask, block=block), inputs)
    assert saved <= one_output, saved
    out.sum().backward()  # and it still differentiates
    assert all(t.grad is not None for t in (q, u, k, v))

    _, saved = _saved_bytes(lambda: rectified_attention_materialised(q, u, k, v, g, mask), inputs)
    assert saved >= score_matrix  # the check can fail
