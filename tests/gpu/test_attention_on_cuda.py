"""The gpu lane: each custom attention against its materialised reference on CUDA, values and
gradients, in fp64 (the identity itself), fp32 and bf16; Eq. 14 bitwise in bf16."""

import contextlib

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from tests.gpu.lane import DEVICE
from tests.methods.lkg.test_kernel import SCALE, SEGMENTS, _materialised, _qkv
from zoomattn.attention import kernels
from zoomattn.attention.math import attention_probs, repeat_kv, sdpa
from zoomattn.methods.lkg.kernel import call_mask, fusion_bias, relevance_attention
from zoomattn.methods.opamp.config import OpAmpConfig
from zoomattn.methods.opamp.kernel import PATHS
from zoomattn.methods.opamp.model import OpAmpAttention
from zoomattn.methods.rectify.kernel import (
    Rectifier,
    rectified_attention,
    rectified_attention_materialised,
)

pytestmark = pytest.mark.gpu

DEVICE_PATHS = [p for p in PATHS if DEVICE == "cpu" or p != "lean"]  # lean: CPU kernels only
# relative error bounds against the fp64 reference on the same (rounded) inputs
BOUNDS = {torch.float64: 1e-9, torch.float32: 1e-5, torch.bfloat16: 3e-2}


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def _inputs(dtype, h=8, hkv=4, n=256, d=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = ((2, h, n, d), (2, hkv, n, d), (2, hkv, n, d))
    return [torch.randn(s, generator=g).to(DEVICE, dtype).requires_grad_() for s in shapes]


def _exact(tensors):
    return [t.detach().double().requires_grad_() for t in tensors]


def _values_and_grads(fn, tensors, extra=()):
    out = fn(*tensors)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out)
    grads = torch.autograd.grad((out * weight).sum(), [*tensors, *extra])
    return out, grads


def _assert_matches(fused, reference, dtype):
    (out, grads), (ref, ref_grads) = fused, reference
    assert _rel(out, ref) <= BOUNDS[dtype]
    for g, r in zip(grads, ref_grads, strict=True):
        assert _rel(g, r) <= 2 * BOUNDS[dtype]


@pytest.mark.parametrize("dtype", list(BOUNDS))
@pytest.mark.parametrize("path", DEVICE_PATHS)
def test_opamp_matches_its_materialised_formula(path, dtype):
    torch.manual_seed(0)
    layer = OpAmpAttention(8, 4, 64, OpAmpConfig(10.0, 32, dropout=0.0)).to(DEVICE)
    with torch.no_grad():
        for adapter in (layer.q1, layer.k1, layer.q2, layer.k2):
            adapter.up.weight.normal_(0, 0.02)
    q, k, v = _inputs(dtype)
    reference_layer = OpAmpAttention(8, 4, 64, OpAmpConfig(10.0, 32, dropout=0.0)).to(DEVICE)
    reference_layer.load_state_dict(layer.to(dtype).state_dict())
    reference_layer.double()
    fused = _values_and_grads(lambda *x: layer(*x, path=path), [q, k, v])
    reference = _values_and_grads(reference_layer.materialised, _exact([q, k, v]))
    bound = {**BOUNDS, torch.bfloat16: 6e-2}  # K = 10 amplifies the branches' rounding
    (out, grads), (ref, ref_grads) = fused, reference
    assert _rel(out, ref) <= bound[dtype]
    for g, r in zip(grads, ref_grads, strict=True):
        assert _rel(g, r) <= 2 * bound[dtype]


@pytest.mark.parametrize("path", DEVICE_PATHS)
def test_opamp_at_initialisation_is_bitwise_sdpa_in_bf16(path):
    """Eq. 14 on the device: the output bitwise; the training paths' gradients as close to
    SDPA's as SDPA's own bf16 rounding (CUDA's backward kernels need not be bitwise repeatable)."""
    layer = OpAmpAttention(8, 4, 64, OpAmpConfig(10.0, 32, dropout=0.0)).to(DEVICE).bfloat16()
    q, k, v = _inputs(torch.bfloat16)
    out, grads = _values_and_grads(lambda *x: layer(*x, path=path), [q, k, v])
    want, want_grads = _values_and_grads(sdpa, [q, k, v])
    assert torch.equal(out, want)
    if path != "plain":
        _, exact_grads = _values_and_grads(sdpa, _exact([q, k, v]))
        for g, w, e in zip(grads, want_grads, exact_grads, strict=True):
            assert _rel(g, e) <= 2 * _rel(w, e) + 1e-3


@pytest.mark.parametrize("dtype", list(BOUNDS))
def test_rectified_attention_matches_its_materialised_formula(dtype):
    g = Rectifier("max", 3.0)
    q, k, v = _inputs(dtype, n=200)
    u = (0.3 * torch.randn(q.shape, generator=torch.Generator().manual_seed(2))).to(q)
    u.requires_grad_()
    fused = _values_and_grads(lambda q_, u_, k_, v_: rectified_attention(
        q_, u_, k_, v_, g, None, None, 64), [q, u, k, v])  # fmt: skip
    reference = _values_and_grads(lambda q_, u_, k_, v_: rectified_attention_materialised(
        q_, u_, k_, v_, g), _exact([q, u, k, v]))  # fmt: skip
    _assert_matches(fused, reference, dtype)


@pytest.mark.parametrize("dtype", list(BOUNDS))
def test_relevance_fusion_matches_the_biased_softmax(dtype):
    q, k, v, log_alpha = (t.to(DEVICE) for t in _qkv())
    n = SEGMENTS.shape[1]
    segments = SEGMENTS.to(DEVICE)
    q, k, v = (t.to(dtype).requires_grad_() for t in (q, k, v))
    log_alpha = log_alpha.to(torch.promote_types(dtype, torch.float32)).requires_grad_()

    def fused_fn(q_, k_, v_):
        bias = fusion_bias(segments, segments, log_alpha, call_mask(None, n, n, DEVICE))
        return relevance_attention(q_, k_, v_, None, SCALE, [0, 1, 2, 3], bias)

    def reference_fn(q_, k_, v_):
        bias = fusion_bias(segments, segments, log_alpha.double(), call_mask(None, n, n, DEVICE))
        return _materialised(q_, k_, v_, bias)

    fused = _values_and_grads(fused_fn, [q, k, v], [log_alpha])
    reference = _values_and_grads(reference_fn, _exact([q, k, v]), [log_alpha])
    bound = {**BOUNDS, torch.bfloat16: 4e-2}  # log α rounded to bf16 (methods/lkg/kernel.py)
    (out, grads), (ref, ref_grads) = fused, reference
    assert _rel(out, ref) <= bound[dtype]
    for g_, r in zip(grads, ref_grads, strict=True):
        assert _rel(g_, r) <= 2 * bound[dtype]


def test_a_left_padded_row_gives_zero_and_no_nan_gradient_in_bf16():
    """CUDA's memory-efficient kernel gives a row with no allowed key a NaN query gradient in
    bf16 (seen on an H200); ``math.sdpa`` must hand back 0 and finite gradients, as on the CPU."""
    q, k, v = _inputs(torch.bfloat16)
    n = q.shape[2]
    mask = torch.ones(2, 1, n, n, dtype=torch.bool, device=DEVICE).tril()
    mask[1, :, :, : n // 2] = False  # the second row left-padded by half
    up = torch.randn_like(q)
    up[1, :, : n // 2] = 0  # nothing reads a padded row
    out = sdpa(q, k, v, mask)
    grads = torch.autograd.grad(out, (q, k, v), up)
    assert not out[1, :, : n // 2].any()
    assert all(torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_plain_sdpa_run_causal_on_right_padding_matches_the_formula_on_its_real_rows(dtype):
    """``attention_kernels: {plain: fused}``: a right-padded batch (transformers' mask, padded
    rows seeing every real key) runs causal on CUDA's flash kernel with GQA in bf16, recorded as
    fused; fp32, which flash does not take, keeps the mask, recorded as declined. Either way the
    real rows' values and gradients are the fp64 masked formula's within the dtype's bound, and
    every gradient is finite."""
    q, k, v = _inputs(dtype)
    n = q.shape[2]
    keys = torch.arange(n, device=DEVICE)
    lengths = torch.tensor([n, n * 3 // 4], device=DEVICE)[:, None, None]
    mask = (torch.ones(n, n, dtype=torch.bool, device=DEVICE).tril() & (keys < lengths))[:, None]
    real = (keys < lengths)[:, :, :, None]  # [B, 1, L, 1]: the rows a loss reads

    def formula(q, k, v):
        return attention_probs(q, k, mask) @ repeat_kv(v, q.shape[1])

    # on CUDA in bf16 only the flash kernel may run it: without the mask, causal, GQA (another
    # backend would pass the values and lose the switch's point)
    flash_only = DEVICE == "cuda" and dtype == torch.bfloat16
    backends = sdpa_kernel(SDPBackend.FLASH_ATTENTION) if flash_only else contextlib.nullcontext()
    with kernels.using({"plain": "fused"}), backends:
        fused = _values_and_grads(lambda *t: sdpa(*t, mask) * real, [q, k, v])
        path = "fused" if dtype == torch.bfloat16 else "reference (no flash kernel)"
        assert kernels.paths_run() == {"plain": path if DEVICE == "cuda" else "reference"}
    reference = _values_and_grads(lambda *t: formula(*t) * real, _exact([q, k, v]))
    _assert_matches(fused, reference, dtype)
    assert all(torch.isfinite(g).all() for g in fused[1])
