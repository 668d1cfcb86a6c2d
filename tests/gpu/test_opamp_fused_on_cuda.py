"""The gpu lane: OpAmp's stacked path (fused.py) on CUDA against the materialised formula in fp32
and bf16, values and gradients, where CUDA takes its own kernels: a padded (masked) call with GQA
goes to the memory-efficient kernel with the KV heads repeated (``math.gqa_for_kernel``), an
unmasked one to flash; decoding; dropout's masks (CUDA's generator); and the dispatch under
``attention_kernels: fused``."""

import copy

import pytest
import torch

from tests.attention.test_math import left_padding_mask
from tests.gpu.lane import DEVICE
from zoomattn.attention import kernels
from zoomattn.attention.math import sdpa
from zoomattn.methods.opamp.config import OpAmpConfig
from zoomattn.methods.opamp.model import OpAmpAttention

pytestmark = pytest.mark.gpu

H, HKV, D, N = 8, 2, 64, 192
# relative error against the fp64 formula on the same (rounded) inputs; bf16: K = 10 amplifies
# each branch's rounding (as tests/gpu/test_attention_on_cuda.py)
BOUNDS = {torch.float32: 1e-5, torch.bfloat16: 6e-2}


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def _layer(dtype, dropout=0.0):
    torch.manual_seed(0)
    layer = OpAmpAttention(H, HKV, D, OpAmpConfig(10.0, 32, dropout=dropout))
    with torch.no_grad():
        for adapter in (layer.q1, layer.k1, layer.q2, layer.k2):
            adapter.up.weight.normal_(0, 0.02)
    return layer.to(DEVICE, dtype)


def _inputs(dtype, n_q=N, n_k=N):
    g = torch.Generator().manual_seed(0)
    shapes = ((2, H, n_q, D), (2, HKV, n_k, D), (2, HKV, n_k, D))
    return [torch.randn(s, generator=g).to(DEVICE, dtype).requires_grad_() for s in shapes]


def _values_and_grads(fn, tensors, params, rows):
    out = fn(*tensors)[:, :, rows]
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out)
    return out, torch.autograd.grad((out * weight).sum(), [*tensors, *params])


@pytest.mark.parametrize("dtype", list(BOUNDS))
@pytest.mark.parametrize("case", ["causal", "padded", "decoding", "decoding-padded"])
def test_stacked_path_matches_the_materialised_formula(case, dtype):
    layer = _layer(dtype)
    n_q = 1 if case.startswith("decoding") else N
    tensors = _inputs(dtype, n_q=n_q)
    mask = (
        left_padding_mask([N, N // 2], N)[:, :, N - n_q :].to(DEVICE) if "padded" in case else None
    )
    rows = slice(N // 2, None) if case == "padded" else slice(None)  # real tokens in both rows
    twin = copy.deepcopy(layer).double()
    exact = [t.detach().double().requires_grad_() for t in tensors]
    out, grads = _values_and_grads(
        lambda *x: layer(*x, mask, path="stacked"), tensors, list(layer.parameters()), rows
    )
    ref, ref_grads = _values_and_grads(
        lambda *x: twin.materialised(*x, mask), exact, list(twin.parameters()), rows
    )
    assert _rel(out, ref) <= BOUNDS[dtype]
    for g, r in zip(grads, ref_grads, strict=True):
        assert _rel(g, r) <= 2 * BOUNDS[dtype]


@pytest.mark.parametrize("padded", [False, True])
def test_stacked_path_at_initialisation_is_sdpa_in_bf16(padded):
    """Eq. 14 on the device: the output bitwise SDPA's; gradients as close to the exact ones as
    SDPA's own (CUDA's backward kernels need not be bitwise repeatable)."""
    layer = OpAmpAttention(H, HKV, D, OpAmpConfig(10.0, 32, dropout=0.0)).to(DEVICE).bfloat16()
    tensors = _inputs(torch.bfloat16)
    mask = left_padding_mask([N, N // 2], N).to(DEVICE) if padded else None
    rows = slice(N // 2, None)
    out, grads = _values_and_grads(lambda *x: layer(*x, mask, path="stacked"), tensors, [], rows)
    want, want_grads = _values_and_grads(lambda *x: sdpa(*x, mask), tensors, [], rows)
    exact = [t.detach().double().requires_grad_() for t in tensors]
    _, exact_grads = _values_and_grads(lambda *x: sdpa(*x, mask), exact, [], rows)
    assert torch.equal(out, want)
    for g, w, e in zip(grads, want_grads, exact_grads, strict=True):
        assert _rel(g, e) <= 2 * _rel(w, e) + 1e-3


def test_stacked_path_draws_the_dropout_masks_of_the_plain_path():
    layer = _layer(torch.float32, dropout=0.3).train()
    tensors = _inputs(torch.float32)
    results = []
    for path in ("stacked", "plain"):
        torch.manual_seed(5)
        results.append(
            _values_and_grads(lambda *x, p=path: layer(*x, path=p), tensors, [], slice(None))
        )
    (out, grads), (want, want_grads) = results
    assert _rel(out, want) <= 1e-5
    for g, w in zip(grads, want_grads, strict=True):
        assert _rel(g, w) <= 1e-5


def test_fused_setting_takes_the_stacked_path_on_cuda_only():
    layer = _layer(torch.bfloat16)
    tensors = _inputs(torch.bfloat16)
    with kernels.using("fused"):
        out = layer(*tensors)
        ran = kernels.paths_run()
    assert ran == {"opamp": "fused" if DEVICE == "cuda" else "reference"}
    want = layer(*tensors, path="stacked" if DEVICE == "cuda" else "lean")
    assert torch.equal(out, want)
