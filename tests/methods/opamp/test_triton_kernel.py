"""OpAmp's Triton kernel (methods/opamp/triton_kernel.py) against the materialised formula, values
and gradients of Q₀, Q₁, K₀, K₁ and V, and its ``triton`` path against the ``plain`` path through
real adapters: on the CPU through Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1
where CUDA is absent), tiny shapes with 16×16 tiles so that every sequence spans several tiles,
one of them ragged; every test with each of the kernel's two switches off and on, where the
switch can change what runs (``tests.triton_interpreter.kernel_switches``)."""

import pytest
import torch

from tests.attention.test_math import left_padding_mask
from tests.attention.test_tile_ranges import scattered_mask
from tests.methods.opamp.test_fused import _inputs, _layer, _values_and_grads
from tests.methods.rectify.test_kernel import right_padding_mask
from tests.methods.rectify.test_kernel_bf16 import _bf16_errors, _rel
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
from zoomattn.attention.math import attention_probs, repeat_kv, sdpa
from zoomattn.methods.opamp import kernel

interpreter_or_skip("tests/gpu/test_opamp_fused_on_cuda.py")
from zoomattn.methods.opamp import triton_kernel  # noqa: E402
from zoomattn.methods.opamp.triton_kernel import two_branch_flash  # noqa: E402

# every test both ways: a padding causal mask as bytes or as each row's span of keys, and dK/dV's
# tiles as [queries, keys] or as [keys, queries]; or with one as shipped where it cannot matter
padding_spans, kv_keys_as_rows, spans_as_shipped, kv_as_shipped = kernel_switches(triton_kernel)


N, D = 24, 16  # 16 + 8: two query tiles and two key tiles, the second ragged
GAINS = (0.5, 10.0)  # OpAmp's (A_c/2, A_d) at K = 10: branch weights 10.5 and −9.5
# name: (B, H, H_kv, L, S, left-padding lengths or None); GQA throughout (2 query heads per KV head)
SCENARIOS = {
    "padded": (2, 2, 1, N, N, [N, 13]),  # 11 rows of the second sequence see no key
    "right_padded": (2, 2, 1, N, N, [-N, -13]),  # training's: 11 padded rows see every real key
    "causal_prefill": (1, 2, 1, N, N, None),
    "decoding_step": (1, 2, 1, 1, N, None),
    "decoding_padded": (2, 2, 1, 1, N, [N, 13]),  # generation's step over a left-padded cache
}


# the CUDA tile table's scenarios: more than one of its 128-row tiles, the second ragged, and a
# decoding step over more than one of the decode tile's 128 keys
TABLE_SCENARIOS = {
    "padded": (2, 2, 1, 150, 150, [150, 70]),
    "right_padded": (2, 2, 1, 150, 150, [-150, -70]),
    "causal_prefill": (1, 2, 1, 150, 150, None),
    "decoding_step": (1, 2, 1, 1, 150, None),
}


def _scenario(name, dtype, scenarios=SCENARIOS):
    """q_stack = [Q₀ | Q₁], k_stack = [K₀ | K₁] and v (laid out as the model's projections leave
    it, [B, S, H_kv, D] transposed), leaves; the mask (lengths below 0: right padding)."""
    b, h, hkv, n_q, n_k, lengths = scenarios[name]
    g = torch.Generator().manual_seed(0)
    q_stack = torch.randn(b, 2 * h, n_q, D, generator=g).to(dtype).requires_grad_()
    k_stack = torch.randn(b, 2 * hkv, n_k, D, generator=g).to(dtype).requires_grad_()
    v = torch.randn(b, n_k, hkv, D, generator=g).to(dtype).transpose(1, 2).requires_grad_()
    if lengths is None:
        mask = None
    elif lengths[0] < 0:
        mask = right_padding_mask([-n for n in lengths], n_k)
    else:
        mask = left_padding_mask(lengths, n_k)[:, :, n_k - n_q :]
    return (q_stack, k_stack, v), mask


def _formula(q_stack, k_stack, v, mask, gains=GAINS):
    """The materialised branches O₀, O₁ and output, a row with no key giving 0 (as math.sdpa)."""
    (q0, q1), (k0, k1) = q_stack.chunk(2, dim=1), k_stack.chunk(2, dim=1)
    v = repeat_kv(v, q0.shape[1]).to(torch.promote_types(v.dtype, torch.float32))
    ok = torch.ones((), dtype=torch.bool) if mask is None else mask.any(-1, keepdim=True)
    o0, o1 = ((attention_probs(q, k, mask) @ v).where(ok, 0.0) for q, k in ((q0, k0), (q1, k1)))
    common, differential = gains
    return o0, o1, (o0 + o1) * common + (o0 - o1) * differential


def _kernel_contract(inputs, mask, fn, gains=GAINS):
    """The output and the gradients the kernel promises for a loss weight W: q_stack's and
    k_stack's at the UNSCALED upstream gradient (∂Σ W∘(O₀ + O₁), fused._Join's contract), v's of
    the output (∂Σ W∘out). ``fn`` None: the formula; else the kernel."""
    if fn is None:
        o0, o1, out = _formula(*inputs, mask, gains)
    else:
        out = fn(*inputs)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out.dtype)
    if fn is None:
        dq, dk = torch.autograd.grad((weight * (o0 + o1)).sum(), inputs[:2], retain_graph=True)
        (dv,) = torch.autograd.grad((weight * out).sum(), inputs[2])
        return out, (dq, dk, dv)
    return out, torch.autograd.grad((out * weight).sum(), inputs)


def _per_branch(grads):
    """dQ₀, dQ₁, dK₀, dK₁, dV."""
    dq, dk, dv = grads
    return (*dq.chunk(2, dim=1), *dk.chunk(2, dim=1), dv)


@with_switches(
    ("scenario",),
    switch_cases(triton_kernel, [(s,) for s in SCENARIOS], lambda s: SCENARIOS[s][-1] is not None),
)
def test_kernel_equals_materialised_formula_in_fp32_values_and_gradients(scenario):
    """Every row, those with no key included (0 and no gradient through them)."""
    _assert_kernel_is_formula(*_scenario(scenario, torch.float32))


@spans_as_shipped  # a mask that is not padding: its bytes either way
def test_kernel_with_a_scattered_mask_and_empty_tiles_equals_materialised_formula():
    """Tiles the mask rules out are skipped (attention/tile_ranges.py): nothing else changes."""
    inputs, _ = _scenario("padded", torch.float32)
    _assert_kernel_is_formula(inputs, scattered_mask(N, N))


def _assert_kernel_is_formula(inputs, mask, tiles=None):
    out, grads = _kernel_contract(
        inputs, mask, lambda *t: two_branch_flash(*t, GAINS, mask, tiles=tiles)
    )
    exact = [t.detach().double().requires_grad_() for t in inputs]
    ref, ref_grads = _kernel_contract(exact, mask, None)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    for name, a, b in zip(("q0", "q1", "k0", "k1", "v"), _per_branch(grads),
                          _per_branch(ref_grads), strict=True):  # fmt: skip
        torch.testing.assert_close(
            a.double(), b, atol=1e-5, rtol=1e-5, msg=lambda m, n=name: f"d{n}: {m}"
        )
    if mask is not None and (~mask.any(-1)).any():  # rows with no key (left-padded prefill)
        empty = ~mask.any(-1)[:, 0]  # [B, L]
        assert (out.transpose(1, 2)[empty] == 0).all()
        assert (grads[0].transpose(1, 2)[empty] == 0).all()


@one_way(SPANS, True)
@kv_as_shipped  # the mask is read as either layout takes it
@pytest.mark.parametrize("scenario", ["padded", "right_padded", "decoding_padded"])
def test_a_padding_mask_reaches_the_kernels_as_key_spans_found_once_per_mask(monkeypatch, scenario):
    """With PADDING_SPANS, forward and backward get mode 2, for a mask of one batch row
    broadcast over two rows and then over one, and for the batch's own; the spans are found once
    per mask tensor and the tile ranges once per mask and batch, while the same tensor comes back
    unedited (a forward's layers), and again after an in-place edit of the tensor last used,
    which here makes it no padding mask (mode 1: its bytes)."""
    sized = record_returns(monkeypatch, triton_kernel, "_sizes")
    examined = record_returns(monkeypatch, triton_kernel, "padding_spans")
    found = record_returns(monkeypatch, triton_kernel, "tile_ranges")
    inputs, mask = _scenario(scenario, torch.float32)

    def layer(layer_mask, batch=2):
        leaves = [t.detach()[:batch].requires_grad_() for t in inputs]
        out, grads = _kernel_contract(
            leaves, layer_mask, lambda *t: two_branch_flash(*t, GAINS, layer_mask)
        )
        full = layer_mask.expand(batch, *mask.shape[1:])
        want, want_grads = _kernel_contract(leaves, full, None)
        ok = full.any(-1, keepdim=True)
        torch.testing.assert_close(out.where(ok, 0.0), want.where(ok, 0.0))
        for a, b in zip(_per_branch(grads), _per_branch(want_grads), strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)

    one_row = mask[1:]
    for layer_mask, batch in ((one_row, 2), (one_row, 1), (mask, 2)):
        layer(layer_mask, batch), layer(layer_mask, batch)
    kinds = [spec["HAS_MASK"] for _, spec in sized]  # the mask's mode in each kernel launch
    assert kinds == [2] * 12 and len(examined) == 2 and len(found) == 3
    mask[0, 0, -1, 5] = False  # edited in place (a hole): examined again, no longer padding
    layer(mask)
    assert len(examined) == 3 and len(found) == 4
    assert [spec["HAS_MASK"] for _, spec in sized[-2:]] == [1, 1]


# both switches off (the default) and both on: each alone runs with every test above it reaches
@with_switches((), [(False, False), (True, True)])
@pytest.mark.parametrize("scenario", TABLE_SCENARIOS)
def test_kernel_at_the_cuda_tile_table_equals_materialised_formula_in_fp32(scenario):
    """At the tiles CUDA takes for bf16 (unequal, up to 128 rows; the decode tile for the step;
    ``_tiles``), which only the gpu lane compiles and runs: the same kernel code, through the
    interpreter."""
    tiles = triton_kernel._tiles(torch.device("cuda"))
    _assert_kernel_is_formula(*_scenario(scenario, torch.float32, TABLE_SCENARIOS), tiles)


@spans_as_shipped  # the tiles chosen, no launch
@kv_as_shipped
def test_a_call_of_few_queries_runs_the_forward_on_the_decode_tile_and_fp32_its_own_table():
    table = triton_kernel._tiles(torch.device("cuda"))
    for name, forward in (("decoding_step", table["decode"]), ("causal_prefill", table["forward"])):
        inputs, mask = _scenario(name, torch.float32)
        spec = triton_kernel.prepared(*inputs, GAINS, mask, tiles=table)[-1]
        assert spec["tiles"] == {**table, "forward": forward}  # the backward's tiles as they were
    # fp32, whose products are FMAs, keeps the first table: 32×32 at 8 warps
    fp32 = triton_kernel._tiles(torch.device("cuda"), torch.float32)
    assert fp32 == dict.fromkeys(("forward", "kv", "q", "decode"), (32, 32, 8, 2))


# each K with each switch off and on, and each pair of switches' values (6 cases of the 12)
BF16_CASES = [(True, True, 1.0), (False, False, 1.0), (True, False, 10.0), (False, True, 10.0),
              (True, True, 20.0), (False, False, 20.0)]  # fmt: skip


@with_switches(("cmrr",), BF16_CASES)
def test_kernel_bf16_is_as_accurate_as_bf16_sdpa_in_values_and_gradients(cmrr):
    """Against the formula in fp64 on the same bf16 inputs, rows with no key left out, as the
    rectified kernel's test measures it: within 1.5× plain bf16 SDPA's error, across the study's
    CMRR K (the q/k gradients are taken at the unscaled upstream gradient: K-independent)."""
    gains = (0.5, cmrr)
    inputs, mask = _scenario("padded", torch.bfloat16)
    ok = mask.any(-1, keepdim=True)
    out, grads = _kernel_contract(
        inputs, mask, lambda *t: two_branch_flash(*t, gains, mask).where(ok, 0.0)
    )
    exact = [t.detach().double().requires_grad_() for t in inputs]
    ref, ref_grads = _kernel_contract(exact, mask, None, gains)
    out_error = _rel(out, ref)
    grad_error = max(
        _rel(a, b) for a, b in zip(_per_branch(grads), _per_branch(ref_grads), strict=True)
    )
    q0 = inputs[0].detach()[:, :2].requires_grad_()
    k0, v = inputs[1].detach()[:, :1].requires_grad_(), inputs[2].detach().requires_grad_()
    sdpa_out_error, sdpa_grad_error = _bf16_errors(
        lambda q, k, v: sdpa(q, k, v, mask), (q0, k0, v), mask
    )
    assert out.dtype == torch.bfloat16
    assert out_error <= 1.5 * sdpa_out_error, (out_error, sdpa_out_error)
    assert grad_error <= 1.5 * sdpa_grad_error, (grad_error, sdpa_grad_error)


@with_switches(
    ("case",),
    switch_cases(
        triton_kernel,
        [("padded_prefill",), ("decoding_with_dropout",)],
        lambda case: case == "padded_prefill",
    ),
)
def test_triton_path_equals_the_plain_path_through_adapters_with_parameter_gradients(case):
    """The whole path: batched adapters (dropout's masks drawn as the plain path draws them), the
    kernel, the branch weights applied by fused._Fork/_BranchScale; fp32, 1e-5."""
    decoding = case == "decoding_with_dropout"
    layer = _layer(10.0, h=2, hkv=1, d=D, dropout=0.5 if decoding else 0.0).train()
    tensors = _inputs(h=2, hkv=1, n_q=1 if decoding else N, n_k=N, d=D)
    mask = None if decoding else left_padding_mask([N, 13], N)
    results = []
    for path in ("triton", "plain"):
        torch.manual_seed(3)
        results.append(
            _values_and_grads(
                lambda *x, p=path: layer(*x, mask, path=p), tensors, list(layer.parameters())
            )
        )
    (out, grads), (want, want_grads) = results
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    for g, w in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=1e-5 * w.abs().max().item(), rtol=1e-5)


@spans_as_shipped  # the kernel never runs
@kv_as_shipped
def test_fused_setting_never_selects_the_triton_path(monkeypatch):
    """``attention_kernels: fused`` (kernels.choose says fused) runs the stacked path: SDPA, not
    the Triton kernel, which only ``path="triton"`` runs."""
    from zoomattn.methods.opamp import triton_path

    calls = []
    monkeypatch.setattr(kernel, "stacked_two_branch", lambda *a: calls.append("stacked") or a[0])
    monkeypatch.setattr(triton_path, "triton_two_branch", lambda *a: calls.append("triton") or a[0])
    monkeypatch.setattr(kernels, "choose", lambda method, device: kernels.FUSED)
    layer = _layer(5.0, h=2, hkv=1, d=D)
    tensors = _inputs(h=2, hkv=1, n_q=1, n_k=N, d=D)
    layer(*tensors)
    layer(*tensors, path="triton")
    assert calls == ["stacked", "triton"]


@spans_as_shipped  # refused before a launch
@kv_as_shipped
def test_kernel_rejects_float64_mismatched_heads_a_bad_mask_and_missing_adapters_naming_them():
    (q_stack, k_stack, v), mask = _scenario("padded", torch.float32)
    with pytest.raises(ValueError, match="float64"):
        two_branch_flash(q_stack.double(), k_stack.double(), v.double(), GAINS)
    with pytest.raises(ValueError, match="k_stack"):
        two_branch_flash(q_stack, k_stack[:, :1], v, GAINS, mask)
    with pytest.raises(ValueError, match="q_stack"):
        two_branch_flash(q_stack[:, :3], k_stack, v, GAINS, mask)
    with pytest.raises(ValueError, match="mask"):
        two_branch_flash(q_stack, k_stack, v, GAINS, mask[:, :, :, :-1])
    layer = _layer(5.0, h=2, hkv=1, d=D)
    with pytest.raises(ValueError, match="adapters="):
        kernel.two_branch_attention(
            *_inputs(h=2, hkv=1, d=D), layer.adapt_q, layer.adapt_k, GAINS, (), path="triton"
        )
