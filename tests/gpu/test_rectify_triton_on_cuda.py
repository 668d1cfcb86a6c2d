"""The gpu lane: the fused Triton rectified attention (methods/rectify/triton_kernel.py) compiled on
CUDA against the materialised formula in fp64 on the same inputs, values and gradients of q, u, k,
v, at a moderate size (L = 512, D = 128, 8 query heads over 2 KV heads): fp32 to 1e-5, bf16 within
1.5× plain bf16 SDPA's error on the same device; causal prefill, left padding, one decoding step
with and without a padded cache; each switch both ways (a padding mask as key spans or as its
bytes, with right padding too; dK/dV's tiles as [keys, queries] or [queries, keys]); g and g′
compiled, with the .ftz special functions, against fp64 from small scores to far past exp's range
and ξ up to the kernels' largest; and the dispatch under ``attention_kernels: fused`` (a ξ beyond
the kernels' largest declined)."""

import pytest
import torch

from tests.gpu.lane import DEVICE
from tests.methods.rectify.g_in_registers import XIS, assert_g_in_registers_matches_fp64
from tests.methods.rectify.test_kernel import left_padding_mask, right_padding_mask
from tests.spies import record_returns
from zoomattn.attention import kernels
from zoomattn.attention.math import sdpa
from zoomattn.methods.rectify import kernel as rectify_kernel
from zoomattn.methods.rectify.kernel import (
    G_VARIANTS,
    Rectifier,
    rectified_attention,
    rectified_attention_materialised,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(DEVICE != "cuda", reason="compiled Triton needs CUDA (the CPU test file "
                       "runs the kernel in Triton's interpreter)"),
]  # fmt: skip

N, HEADS, KV_HEADS, HEAD_DIM = 512, 8, 2, 128
# name: (L, S, padding lengths or None: left padding, right where the name says so), batch of 2
SCENARIOS = {
    "causal_prefill": (N, N, None),
    "padded": (N, N, [N, 300]),
    "decoding_step": (1, N, None),
    "decoding_padded": (1, N, [N, 300]),  # the cache's padding: the mask's last row
    "right_padded": (N, N, [N, 300]),  # training's batches; only the key-span test runs it
}
# (g, scenario) pairs: every g with padding, every scenario with the method's g ("max"); each pair
# compiles three kernels per dtype, fp32's slowly (IEEE dot products), so fp32 runs two of them
CASES = [("max", s) for s in SCENARIOS if s != "right_padded"]
CASES += [(g, "padded") for g in G_VARIANTS if g != "max"]
FP32_CASES = [("max", "causal_prefill"), ("sigmoid", "padded")]
PARAMS = [(*c, torch.bfloat16) for c in CASES] + [(*c, torch.float32) for c in FP32_CASES]


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def _inputs(scenario, dtype):
    n_q, n_k, lengths = SCENARIOS[scenario]
    gen = torch.Generator().manual_seed(0)

    def projected(heads, n, std=1.0):  # [B, L, H, D] viewed as [B, H, L, D], as the model's
        x = std * torch.randn(2, n, heads, HEAD_DIM, generator=gen)
        return x.to(DEVICE, dtype).transpose(1, 2).requires_grad_()

    tensors = [projected(HEADS, n_q), projected(HEADS, n_q, 0.3)]
    tensors += [projected(KV_HEADS, n_k), projected(KV_HEADS, n_k)]
    padding_mask = right_padding_mask if scenario.startswith("right") else left_padding_mask
    mask = None if lengths is None else padding_mask(lengths, n_k)[:, :, -n_q:].to(DEVICE)
    return tensors, mask


def _values_and_grads(fn, tensors, rows_ok):
    out = fn(*tensors).where(rows_ok, 0.0)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out)
    return out, torch.autograd.grad((out * weight).sum(), tensors)


def _errors(fn, reference, tensors, rows_ok):
    """Relative errors of fn's output and of the largest gradient error against ``reference`` in
    fp64 on the same values (padding rows left out)."""
    out, grads = _values_and_grads(fn, tensors, rows_ok)
    exact = [t.detach().double().requires_grad_() for t in tensors]
    ref, ref_grads = _values_and_grads(reference, exact, rows_ok)
    return _rel(out, ref), max(_rel(g, r) for g, r in zip(grads, ref_grads, strict=True))


@pytest.mark.parametrize(("name", "scenario", "dtype"), PARAMS)
def test_fused_rectified_matches_its_materialised_formula_on_cuda(name, scenario, dtype):
    _check_against_formula(name, scenario, dtype)


@pytest.mark.parametrize("spans", [True, False], ids=["key_spans", "mask_bytes"])
@pytest.mark.parametrize("scenario", ["padded", "decoding_padded", "right_padded"])
def test_padding_as_each_rows_key_span_or_as_bytes_matches_the_formula_on_cuda(
    scenario, spans, monkeypatch
):
    """PADDING_SPANS (on by default since the H200 timed it) and off."""
    from zoomattn.methods.rectify import triton_kernel

    monkeypatch.setattr(triton_kernel, "PADDING_SPANS", spans)
    read = record_returns(monkeypatch, triton_kernel, "padding_spans")
    _check_against_formula("max", scenario, torch.bfloat16)
    # read as spans, not as the mask, only with the switch on
    assert all(s is not None for s in read) and bool(read) == spans


@pytest.mark.parametrize("scenario", ["right_padded", "padded"])
def test_padded_rows_skipped_match_the_formula_with_those_rows_empty_on_cuda(scenario, monkeypatch):
    """SKIP_PADDED_ROWS (off by default until a GPU times it): with key spans, right padding's
    padded rows attend to nothing (their tiles skipped); left padding's never saw a key."""
    from zoomattn.methods.rectify import triton_kernel

    monkeypatch.setattr(triton_kernel, "PADDING_SPANS", True)
    monkeypatch.setattr(triton_kernel, "SKIP_PADDED_ROWS", True)
    _check_against_formula("max", scenario, torch.bfloat16, empty_padded_rows=True)
    (q, u, k, v), mask = _inputs(scenario, torch.bfloat16)
    with torch.no_grad():
        out = triton_kernel.fused_rectified_attention(q, u, k, v, Rectifier("max", 3.0), mask)
    n, _, lengths = SCENARIOS[scenario]
    no_key = ~mask.any(-1)[:, 0]  # [B, L]: left padding's rows
    if scenario == "right_padded":  # and right padding's, which saw every real key
        no_key |= torch.arange(n, device=DEVICE) >= torch.tensor(lengths, device=DEVICE)[:, None]
    assert no_key.sum() == n - min(lengths)
    assert out.transpose(1, 2)[no_key].eq(0).all() and out.transpose(1, 2)[~no_key].ne(0).any()


@pytest.mark.parametrize("spans", [False, True], ids=["mask_bytes", "padding_spans"])
def test_fused_kernel_under_activation_checkpointing_gives_the_gradients_in_bf16(
    spans, monkeypatch
):
    """A checkpointed fine-tune (``gradient_checkpointing``, non-reentrant) runs the kernel again
    in backward: in bf16 the forward also keeps the output's rounding error for Δ, and under a
    right-padded mask the key spans and tile ranges are reused; the gradients must be the call's
    without checkpointing (the CPU suite checks the fp32 model, where no residual is kept)."""
    from torch.utils.checkpoint import checkpoint

    from zoomattn.methods.rectify import triton_kernel
    from zoomattn.methods.rectify.triton_kernel import fused_rectified_attention

    monkeypatch.setattr(triton_kernel, "PADDING_SPANS", spans)
    tensors, mask = _inputs("right_padded", torch.bfloat16)
    g = Rectifier("max", 3.0)

    def grads(checkpointed: bool):
        inputs = [t.detach().clone().requires_grad_() for t in tensors]
        scaled = [t * 1.0 for t in inputs]  # inputs with a history, as projections give them

        def attention(*qukv):
            return fused_rectified_attention(*qukv, g, mask)

        run = (
            (lambda *a: checkpoint(attention, *a, use_reentrant=False))
            if checkpointed
            else attention
        )
        out = run(*scaled)
        weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out)
        return torch.autograd.grad((out * weight).sum(), inputs)

    for name, got, want in zip("qukv", grads(True), grads(False), strict=True):
        assert torch.equal(got, want), name  # the same kernels on the same values


@pytest.mark.parametrize(
    ("kv", "scenario", "dtype"),
    [((16, 64, 4, 2), "padded", torch.bfloat16), ((16, 128, 8, 2), "padded", torch.bfloat16),
     ((16, 64, 4, 2), "causal_prefill", torch.bfloat16), ((16, 64, 4, 2), "padded", torch.float32),
     (None, "padded", torch.bfloat16), (None, "causal_prefill", torch.bfloat16)],
)  # fmt: skip
def test_dk_dv_as_key_rows_or_query_rows_matches_the_formula_on_cuda(
    kv, scenario, dtype, monkeypatch
):
    """KV_KEYS_AS_ROWS (on by default since the H200 timed it) at the 64- and 128-key tiles the
    GPU A/B times (gpu_checks.sh); kv None: the switch off, [queries, keys] at the table's tile."""
    from zoomattn.methods.rectify import triton_kernel

    monkeypatch.setattr(triton_kernel, "KV_KEYS_AS_ROWS", kv is not None)
    tiles = triton_kernel._tiles(HEAD_DIM, torch.device(DEVICE))
    tiles = tiles if kv is None else {**tiles, "kv": kv}
    _check_against_formula("max", scenario, dtype, tiles)


@pytest.mark.parametrize(("split", "xi"), [(False, 3.0), (False, 10.0), (True, 10.0)])
def test_score_gradients_rounded_once_or_at_xi_10_match_the_formula_on_cuda(split, xi, monkeypatch):
    """SPLIT_SCORE_GRADIENTS off (dZ rounded once, as the GPU A/B times it), and the study's
    largest ξ, where Δ's error, were it taken from the bf16 output, g′ would amplify."""
    from zoomattn.methods.rectify import triton_kernel

    monkeypatch.setattr(triton_kernel, "SPLIT_SCORE_GRADIENTS", split)
    _check_against_formula("max", "padded", torch.bfloat16, xi=xi)


def _check_against_formula(name, scenario, dtype, tiles=None, xi=3.0, empty_padded_rows=False):
    """``empty_padded_rows``: against the formula with right padding's padded rows allowing no
    key (SKIP_PADDED_ROWS)."""
    from zoomattn.attention.tile_ranges import padding_spans
    from zoomattn.methods.rectify.triton_kernel import (
        fused_rectified_attention,
        without_padded_rows,
    )

    tensors, mask = _inputs(scenario, dtype)
    g = Rectifier(name, xi)
    formula_mask = mask
    if empty_padded_rows:
        formula_mask = without_padded_rows(mask, padding_spans(mask))
    ok = torch.ones((), dtype=torch.bool, device=DEVICE)
    ok = ok if mask is None else formula_mask.any(-1, keepdim=True)
    out_error, grad_error = _errors(
        lambda *t: fused_rectified_attention(*t, g, mask, tiles=tiles),
        lambda *t: rectified_attention_materialised(*t, g, formula_mask),
        tensors,
        ok,
    )
    if dtype == torch.float32:
        assert out_error <= 1e-5 and grad_error <= 2e-5, (out_error, grad_error)
        return
    q, _, k, v = tensors
    sdpa_out, sdpa_grad = _errors(
        lambda q_, k_, v_: sdpa(q_, k_, v_, mask), lambda q_, k_, v_: sdpa(q_, k_, v_, mask),
        [q, k, v], ok,
    )  # fmt: skip
    assert out_error <= 1.5 * sdpa_out, (out_error, sdpa_out)
    assert grad_error <= 1.5 * sdpa_grad, (grad_error, sdpa_grad)


@pytest.mark.parametrize("xi", XIS)
@pytest.mark.parametrize("name", [g for g in G_VARIANTS if g != "identity"])
def test_g_and_its_derivative_compiled_equal_the_rectifier_in_fp64_on_cuda(name, xi):
    assert_g_in_registers_matches_fp64(name, xi, DEVICE)


@pytest.mark.parametrize("fused_decoding", [True, False])
def test_rectified_attention_runs_the_fused_kernel_on_cuda_when_configured(
    fused_decoding, monkeypatch
):
    """Prefill takes the kernel under ``fused``; a decoding step takes it too, or with
    FUSED_DECODING off the block-wise path, recorded as declined."""
    monkeypatch.setattr(rectify_kernel, "FUSED_DECODING", fused_decoding)
    (q, u, k, v), mask = _inputs("padded", torch.bfloat16)
    g = Rectifier("max", 3.0)
    with torch.no_grad(), kernels.using("fused"):
        out = rectified_attention(q, u, k, v, g, mask)
        assert kernels.paths_run() == {"rectify": "fused"}
    with torch.no_grad():
        blockwise = rectified_attention(q, u, k, v, g, mask)
    ok = mask.any(-1, keepdim=True)
    assert _rel(out.where(ok, 0.0), blockwise.where(ok, 0.0)) <= 1e-2
    (q, u, k, v), mask = _inputs("decoding_padded", torch.bfloat16)
    with torch.no_grad(), kernels.using("fused"):
        step = rectified_attention(q, u, k, v, g, mask)
        expected = "fused" if fused_decoding else "reference (decoding)"
        assert kernels.paths_run() == {"rectify": expected}
    with torch.no_grad():
        assert _rel(step, rectified_attention(q, u, k, v, g, mask)) <= 1e-2


def test_a_xi_beyond_the_kernels_largest_runs_the_blockwise_path_recorded_as_declined():
    (q, u, k, v), mask = _inputs("padded", torch.bfloat16)
    g = Rectifier("max", 2 * rectify_kernel.MAX_XI)
    with torch.no_grad(), kernels.using("fused"):
        out = rectified_attention(q, u, k, v, g, mask)
        assert kernels.paths_run() == {"rectify": f"reference (xi > {rectify_kernel.MAX_XI:g})"}
    assert torch.isfinite(out).all()
