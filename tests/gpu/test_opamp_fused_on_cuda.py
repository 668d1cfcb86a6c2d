"""The gpu lane: OpAmp's stacked path (fused.py) on CUDA against the materialised formula in fp32
and bf16, values and gradients, where CUDA takes its own kernels: a padded (masked) call with GQA
goes to the memory-efficient kernel with the KV heads repeated (``math.gqa_for_kernel``), an
unmasked one to flash; decoding; dropout's masks (CUDA's generator), with the adapters' activations
kept or replayed in backward (``fused.RECOMPUTE_ADAPTERS``); and the dispatch under
``attention_kernels: fused``. The opt-in ``triton`` path (triton_kernel.py) likewise, compiled, and
its kernel alone against the fp64 formula within 1.5× bf16 SDPA's error, rows without keys 0,
with its two switches (off until a card times them) too."""

import copy

import pytest
import torch

from tests.attention.test_math import left_padding_mask
from tests.gpu.lane import DEVICE
from tests.methods.rectify.test_kernel import right_padding_mask
from zoomattn.attention import kernels
from zoomattn.attention.math import attention_probs, repeat_kv, sdpa
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


needs_cuda = pytest.mark.skipif(DEVICE != "cuda", reason="the Triton kernel compiles for CUDA")
# stacked_replayed: the stacked path with fused.RECOMPUTE_ADAPTERS (the adapters run again in
# backward under the forward's random state)
FUSED_PATHS = ["stacked", "stacked_replayed", pytest.param("triton", marks=needs_cuda)]


def _path(path, monkeypatch) -> str:
    """The path to ask the layer for, with the switch ``stacked_replayed`` stands for set."""
    from zoomattn.methods.opamp import fused

    monkeypatch.setattr(fused, "RECOMPUTE_ADAPTERS", path == "stacked_replayed")
    return path.removesuffix("_replayed")


@pytest.mark.parametrize("path", FUSED_PATHS)
@pytest.mark.parametrize("dtype", list(BOUNDS))
@pytest.mark.parametrize("case", ["causal", "padded", "decoding", "decoding-padded"])
def test_fused_paths_match_the_materialised_formula(case, dtype, path, monkeypatch):
    path = _path(path, monkeypatch)
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
        lambda *x: layer(*x, mask, path=path), tensors, list(layer.parameters()), rows
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


@pytest.mark.parametrize("stacked", ["stacked", "stacked_replayed"])
def test_stacked_path_draws_the_dropout_masks_of_the_plain_path(stacked, monkeypatch):
    layer = _layer(torch.float32, dropout=0.3).train()
    tensors = _inputs(torch.float32)
    results = []
    for path in (_path(stacked, monkeypatch), "plain"):
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


GAINS = (0.5, 10.0)  # K = 10


def _stacks(dtype, n_q):
    """[Q₀ | Q₁], [K₀ | K₁] and v (laid out as the projections leave it), leaves."""
    g = torch.Generator().manual_seed(2)
    q_stack = torch.randn(2, 2 * H, n_q, D, generator=g)
    k_stack = torch.randn(2, 2 * HKV, N, D, generator=g)
    v = torch.randn(2, N, HKV, D, generator=g).transpose(1, 2)
    return [t.to(DEVICE, dtype).requires_grad_() for t in (q_stack, k_stack, v)]


def _kernel_contract(inputs, mask, kernel=None):
    """Output and gradients for loss weights W as two_branch_flash promises them: q_stack's and
    k_stack's at the unscaled upstream gradient (∂Σ W∘(O₀ + O₁)), v's of the output; rows with
    no key 0. ``kernel`` None: the formula."""
    ok = torch.ones((), dtype=torch.bool, device=DEVICE) if mask is None else mask.any(-1, True)
    if kernel is not None:
        out = kernel(*inputs, GAINS, mask).where(ok, 0.0)
    else:
        (q0, q1), (k0, k1) = inputs[0].chunk(2, 1), inputs[1].chunk(2, 1)
        v = repeat_kv(inputs[2], H).to(torch.promote_types(inputs[2].dtype, torch.float32))
        o0, o1 = ((attention_probs(q, k, mask) @ v).where(ok, 0.0) for q, k in ((q0, k0), (q1, k1)))
        out = (o0 + o1) * GAINS[0] + (o0 - o1) * GAINS[1]
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out)
    if kernel is not None:
        return out, torch.autograd.grad((out * weight).sum(), inputs)
    dq, dk = torch.autograd.grad((weight * (o0 + o1)).sum(), inputs[:2], retain_graph=True)
    return out, (dq, dk, *torch.autograd.grad((weight * out).sum(), inputs[2]))


def _sdpa_errors(inputs, mask):
    """bf16 SDPA's relative errors (output, worst gradient) against fp64 on branch 0's inputs."""
    branch = [inputs[0][:, :H], inputs[1][:, :HKV], inputs[2]]
    results = []
    for xs in (branch, [t.detach().double() for t in branch]):
        xs = [t.detach().requires_grad_() for t in xs]
        ok = torch.ones((), dtype=torch.bool, device=DEVICE) if mask is None else mask.any(-1, True)
        out = sdpa(*xs, mask).where(ok, 0.0)
        weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out)
        results.append((out, torch.autograd.grad((out * weight).sum(), xs)))
    (out, grads), (ref, ref_grads) = results
    return _rel(out, ref), max(_rel(a, b) for a, b in zip(grads, ref_grads, strict=True))


@needs_cuda
@pytest.mark.parametrize("dtype", list(BOUNDS))
@pytest.mark.parametrize("case", ["padded", "decoding"])
def test_triton_kernel_matches_the_fp64_formula_within_bf16_sdpas_error(case, dtype):
    """The compiled kernel alone, every row: fp32 to 1e-5 (relative); bf16 within 1.5× bf16 SDPA's
    own error (values, and the worst of dQ₀, dQ₁, dK₀, dK₁, dV); a row with no key gives 0 and a
    finite, zero gradient (CUDA's memory-efficient SDPA gives such a row NaN in bf16)."""
    _check_kernel(case, dtype)


# the kernel's switches (triton_kernel.PADDING_SPANS, KV_KEYS_AS_ROWS; both off until a card
# times them), each alone and together
SWITCHES = {"key_spans": ("PADDING_SPANS",), "key_rows": ("KV_KEYS_AS_ROWS",),
            "key_spans_and_key_rows": ("PADDING_SPANS", "KV_KEYS_AS_ROWS")}  # fmt: skip


@needs_cuda
@pytest.mark.parametrize("switches", list(SWITCHES))
@pytest.mark.parametrize("dtype", list(BOUNDS))
@pytest.mark.parametrize("case", ["padded", "right_padded"])
def test_triton_kernel_with_its_switches_matches_the_fp64_formula(
    case, dtype, switches, monkeypatch
):
    """As above, with the padding as key spans and/or dK/dV as [keys, queries] tiles, under
    generation's left padding and training's right padding (whose padded rows see every real
    key); with key spans the kernels get the spans (mode 2), not the mask's bytes."""
    from zoomattn.methods.opamp import triton_kernel

    for name in SWITCHES[switches]:
        monkeypatch.setattr(triton_kernel, name, True)
    kinds, sizes = [], triton_kernel._sizes

    def spy_sizes(*args):
        out = sizes(*args)
        kinds.append(out[1]["HAS_MASK"])
        return out

    monkeypatch.setattr(triton_kernel, "_sizes", spy_sizes)
    _check_kernel(case, dtype)
    assert set(kinds) == ({2} if "PADDING_SPANS" in SWITCHES[switches] else {1})


def _check_kernel(case, dtype):
    from zoomattn.methods.opamp.triton_kernel import two_branch_flash

    n_q = 1 if case == "decoding" else N
    masks = {"padded": left_padding_mask, "right_padded": right_padding_mask}
    mask = masks[case]([N, N // 2], N).to(DEVICE) if case in masks else None
    inputs = _stacks(dtype, n_q)
    out, grads = _kernel_contract(inputs, mask, two_branch_flash)
    exact = [t.detach().double().requires_grad_() for t in inputs]
    ref, ref_grads = _kernel_contract(exact, mask)
    pairs = [(a.chunk(2, 1) if i < 2 else (a,), b.chunk(2, 1) if i < 2 else (b,))
             for i, (a, b) in enumerate(zip(grads, ref_grads, strict=True))]  # fmt: skip
    grad_error = max(_rel(a, b) for got, want in pairs for a, b in zip(got, want, strict=True))
    assert all(torch.isfinite(g).all() for g in grads)
    if dtype == torch.float32:
        assert _rel(out, ref) <= 1e-5 and grad_error <= 1e-5
    else:
        sdpa_out_error, sdpa_grad_error = _sdpa_errors(inputs, mask)
        assert _rel(out, ref) <= 1.5 * sdpa_out_error, (_rel(out, ref), sdpa_out_error)
        assert grad_error <= 1.5 * sdpa_grad_error, (grad_error, sdpa_grad_error)
    if case == "padded":  # left padding: rows with no key
        empty = ~mask.any(-1)[:, 0]
        raw = two_branch_flash(*inputs, GAINS, mask)
        assert (raw.transpose(1, 2)[empty] == 0).all()
        assert (grads[0].transpose(1, 2)[empty] == 0).all()
