"""The gpu lane: LKG-RALM's fusion through compiled FlexAttention (methods/lkg/flex.py) on CUDA
against the materialised formula in fp64, values and gradients (q, k, v, log α), with left
padding, GQA, passages spanning several 128-token tiles, and a decoding step; and its memory: no
``[L, S]`` float bias. Each test runs each way of the path (log α in the score_mod,
``flex.ROWS_APART``, ``flex.LOG_ALPHA_GRADIENT_APART``). With
ZOOMATTN_GPU_LANE_DEVICE=cpu the same code runs eager flex on the CPU (PyTorch's CPU backward
guard lifted, as in tests/methods/lkg/test_flex.py)."""

from unittest.mock import patch

import pytest
import torch
import torch.nn.attention.flex_attention as flex_api
from torch.utils.checkpoint import checkpoint

from tests.gpu.lane import DEVICE
from tests.methods.lkg.test_flex import _layout
from tests.spies import record_returns
from zoomattn.attention.math import repeat_kv, sdpa
from zoomattn.methods.lkg import flex
from zoomattn.methods.lkg.flex import flex_relevance_attention
from zoomattn.methods.lkg.kernel import call_mask, fusion_bias

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile"),
]
N, PADS, SCALE = 400, 37, 0.125  # 4 query tiles, the last one partial
BOUNDS = {torch.float32: 1e-5}  # bf16: twice plain SDPA's own bf16 error


@pytest.fixture(autouse=True)
def cpu_backward(monkeypatch):
    if DEVICE == "cpu":
        monkeypatch.setattr(flex_api, "_validate_device", lambda *tensors: None)


@pytest.fixture(autouse=True, params=["score_mod", "rows_apart", "log_alpha_gradient_apart"])
def way(request, monkeypatch):
    """Each way of the fused path: log α in flex's score_mod, the guided rows apart, or log α
    detached in the score_mod and its gradient from the guided rows apart."""
    monkeypatch.setattr(flex, "ROWS_APART", request.param == "rows_apart")
    monkeypatch.setattr(flex, "LOG_ALPHA_GRADIENT_APART", request.param.startswith("log_alpha"))


def _case(dtype, n=N, h=8, hkv=4, d=64, padded=True, side="left"):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, c, n, d, generator=g) for c in (h, hkv, hkv))
    segments = torch.stack([_layout(n, passage=60), _layout(n, passage=45, start=PADS + 3)])
    log_alpha = torch.randn(2, int(segments.max()) + 1, generator=g)
    mask = None
    if padded:  # row 1 padded, as the model gets it: causal & real keys
        real = torch.arange(n)[None] >= torch.tensor([[0], [PADS]])
        if side == "right":  # training's batches: the padded rows see every real key
            real = torch.arange(n)[None] < torch.tensor([[n], [n - PADS]])
        mask = torch.ones(n, n, dtype=torch.bool).tril()[None, None] & real[:, None, None]
    qkv = [t.to(DEVICE, dtype).requires_grad_() for t in (q, k, v)]
    log_alpha = log_alpha.to(DEVICE).requires_grad_()
    return qkv, log_alpha, segments.to(DEVICE), None if mask is None else mask.to(DEVICE)


def _weight(out, padded):
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out)
    if padded:
        w[1, :, :PADS] = 0  # padded query rows: don't-care
    return w


def _values_and_grads(fn, qkv, log_alpha, padded):
    out = fn(*qkv, log_alpha)
    return out, torch.autograd.grad((out * _weight(out, padded)).sum(), [*qkv, log_alpha])


def _formula(heads, segments, mask, rows=None):
    """softmax(q·kᵀ·s + fusion_bias)·v in fp64 on ``heads``, plain SDPA on the others; padded
    query rows without a key get a finite bias (weight 0). ``rows``: the last query rows only
    (decoding)."""

    def run(q, k, v, log_alpha):
        q, k, v, log_alpha = (t.double() for t in (q, k, v, log_alpha))
        n = q.shape[2]
        allowed = call_mask(mask, n, n, q.device)
        bias = fusion_bias(segments, segments, log_alpha, allowed)
        bias = bias.masked_fill(~allowed.any(-1, keepdim=True), 0)
        scores = q @ repeat_kv(k, q.shape[1]).transpose(-1, -2) * SCALE + bias
        fused = scores.softmax(-1) @ repeat_kv(v, q.shape[1])
        plain = sdpa(q, k, v, mask, SCALE)
        is_fused = torch.zeros(q.shape[1], dtype=torch.bool, device=q.device)
        is_fused[heads] = True
        return torch.where(is_fused[None, :, None, None], fused, plain)[:, :, n - (rows or n) :]

    return run


def _flex(heads, segments, mask, rows=None):
    def run(q, k, v, log_alpha):
        first = q.shape[2] - (rows or q.shape[2])
        q, m = q[:, :, first:], None if mask is None else mask[:, :, first:]
        return flex_relevance_attention(
            q, k, v, m, SCALE, heads, segments[:, first:], segments, log_alpha
        )

    return run


def _rel(a, b, padded) -> float:
    if padded:  # compare the real query rows only
        a, b = (torch.cat([t[:1].flatten(), t[1:, :, PADS:].flatten()]) for t in (a, b))
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def _sdpa_bf16_error(qkv, log_alpha):
    """Plain causal SDPA's own relative bf16 error on these inputs: (output, q, k, v grads)."""

    def plain(q, k, v, a):
        return sdpa(q, k, v, None, SCALE) + 0 * a.sum()

    out, grads = _values_and_grads(plain, qkv, log_alpha, False)
    exact = [t.detach().double().requires_grad_() for t in qkv]
    ref, ref_grads = _values_and_grads(plain, exact, log_alpha.double(), False)
    pairs = zip(grads[:3], ref_grads[:3], strict=True)
    return [_rel(out, ref, False)] + [_rel(g, r, False) for g, r in pairs]


def _check(dtype, heads, padded, d=64, side="left"):
    qkv, log_alpha, segments, mask = _case(dtype, padded=padded, d=d, side=side)
    padded = padded and side == "left"  # right padding leaves every row some key
    with patch.object(flex, "with_log_alpha_gradient", wraps=flex.with_log_alpha_gradient) as spy:
        got = _values_and_grads(_flex(heads, segments, mask), qkv, log_alpha, padded)
    assert spy.called == (flex.LOG_ALPHA_GRADIENT_APART and not flex.ROWS_APART)  # the way taken
    want = _values_and_grads(_formula(heads, segments, mask), qkv, log_alpha, padded)
    errors = [_rel(got[0], want[0], padded)]  # the gradients: every row (padded rows weigh 0)
    errors += [_rel(g, w, False) for g, w in zip(got[1], want[1], strict=True)]
    if dtype == torch.float32:
        bounds = [BOUNDS[dtype]] + [2 * BOUNDS[dtype]] * 4
    else:
        bounds = [2 * e + 1e-3 for e in _sdpa_bf16_error(qkv, log_alpha)] + [1e-2]  # log α: fp32
    assert got[0].dtype == dtype
    names = ["out", "dq", "dk", "dv", "dlog_alpha"]
    for name, error, bound in zip(names, errors, bounds, strict=True):
        assert error <= bound, f"{name}: {error:.2e} > {bound:.2e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_flex_fusion_on_every_head_matches_the_formula_with_left_padding(dtype):
    _check(dtype, heads=list(range(8)), padded=True)


def test_compiled_flex_fusion_on_two_heads_and_a_decoding_step_match_the_formula():
    """Two heads fused (the others plain SDPA), causal without a mask; then one decoding query
    of a left-padded batch on every head (GQA in the decoding kernel)."""
    _check(torch.bfloat16, heads=[1, 6], padded=False)
    qkv, log_alpha, segments, mask = _case(torch.bfloat16, padded=True)
    every = list(range(8))
    with torch.no_grad():
        step = _flex(every, segments, mask, rows=1)(*qkv, log_alpha)
        want = _formula(every, segments, mask, rows=1)(*qkv, log_alpha)
    assert _rel(step, want, False) <= 2 * _sdpa_bf16_error(qkv, log_alpha)[0] + 1e-3


@pytest.mark.parametrize("on", [True, False], ids=["key_spans", "mask_bytes"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_compiled_flex_fusion_with_padding_spans_matches_the_formula(monkeypatch, side, on):
    """``flex.PADDING_SPANS`` (on by default since step lkg_spans of benchmarks/gpu_checks.sh
    timed it on an H200) and off: the padding (right: training's; left: generation's) read in
    ``mask_mod`` as each row's span of real keys, or from the mask, every head fused."""
    monkeypatch.setattr(flex, "PADDING_SPANS", on)
    spans = record_returns(monkeypatch, flex, "_spans")
    _check(torch.bfloat16, heads=list(range(8)), padded=True, side=side)
    assert spans and all((s is not None) == on for s in spans)  # as spans only with the switch


def test_compiled_flex_fusion_under_activation_checkpointing_gives_every_gradient(request):
    """The paper preset fine-tunes LKG-RALM with ``gradient_checkpointing`` (non-reentrant): each
    layer's call runs again in backward, log α (the estimator's, computed before the layers)
    captured by the layer. Its gradient, and q's, k's and v's, must be the call's without
    checkpointing. PyTorch 2.13's eager flex gives the captured log α a wrong gradient there
    (tests/methods/lkg/test_flex_checkpointing.py), so the model takes the guided rows apart under
    checkpointing (``flex.APART_UNDER_CHECKPOINTING``); this asks whether the compiled kernel,
    CUDA's, is free of it with log α in the score_mod (the rows-apart case passes on the CPU). It
    was on an H200 under the device image's PyTorch 2.11 (2026-11-27); the pinned 2.13 is
    untested there, so the model still takes the rows apart. With log α's gradient apart no
    captured tensor requires grad."""
    if DEVICE == "cpu" and not flex.ROWS_APART and not flex.LOG_ALPHA_GRADIENT_APART:
        # on the CPU the fault shows as a wrong gradient, or as the recomputation under tracing
        # refusing a data-dependent step of ours (RuntimeError)
        eager = "eager flex (the CPU's): a wrong gradient, or its recomputation traced"
        fails = (AssertionError, RuntimeError)
        request.applymarker(pytest.mark.xfail(strict=True, reason=eager, raises=fails))
    qkv, log_alpha, segments, mask = _case(torch.float32, side="right")
    weight = _weight(qkv[0], False)

    def grads(checkpointed: bool):
        q, k, v, source = (t.detach().clone().requires_grad_() for t in (*qkv, log_alpha))
        scaled = source * 1.5  # log α with a history, computed outside the layer

        def layer(q, k, v):
            return _flex([1, 2, 5], segments, mask)(q, k, v, scaled)

        out = checkpoint(layer, q, k, v, use_reentrant=False) if checkpointed else layer(q, k, v)
        return torch.autograd.grad((out * weight).sum(), [q, k, v, source])

    plain, checkpointed = grads(False), grads(True)
    assert plain[3].abs().sum() > 0  # log α's gradient reaches the estimator's output
    # relative to the norm: flex adds log α's gradient with atomics, in another order each run
    # (apart, the two runs' flex outputs and lse may differ by their rounding)
    for name, got, want in zip(["dq", "dk", "dv", "dlog_alpha"], checkpointed, plain, strict=True):
        assert _rel(got, want, False) <= 2 * BOUNDS[torch.float32], name


@pytest.mark.skipif(DEVICE != "cuda", reason="CUDA memory statistics")
def test_compiled_flex_fusion_in_training_keeps_no_bias_sized_tensor():
    """Forward + backward at 4096 tokens, every head fused: the peak above the inputs stays under
    one fp32 [B, 1, L, S] bias (128 MiB), which today's path builds (and more) per layer."""
    n = 4096
    qkv, log_alpha, segments, _ = _case(torch.bfloat16, n=n, padded=False)
    fn = _flex(list(range(8)), segments, None)
    _values_and_grads(fn, qkv, log_alpha, False)  # compile outside the measure
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    _values_and_grads(fn, qkv, log_alpha, False)
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - base < 2 * n * n * 4
