"""OpAmp's stacked path (both branches in one SDPA call, adapters batched: fused.py), on the CPU's
SDPA kernels: against the materialised formula in fp32 and bf16, values and gradients, with
padding, GQA and decoding; its dropout masks; and when the dispatch takes it."""

import copy
import math

import pytest
import torch

from tests.attention.test_math import left_padding_mask
from zoomattn.attention import kernels
from zoomattn.attention.math import sdpa
from zoomattn.methods.opamp import fused, kernel
from zoomattn.methods.opamp.config import OpAmpConfig
from zoomattn.methods.opamp.model import OpAmpAttention

BF16_EPS = 2.0**-8


@pytest.fixture(autouse=True, params=[False, True], ids=["adapters_kept", "adapters_replayed"])
def recompute_adapters(request, monkeypatch):
    """Every test both ways: the adapters' activations kept by autograd, or recomputed in
    backward (``fused.RECOMPUTE_ADAPTERS``)."""
    monkeypatch.setattr(fused, "RECOMPUTE_ADAPTERS", request.param)
    return request.param


def _layer(K, h=4, hkv=2, d=8, scale=0.3, dropout=0.0, seed=0):
    layer = OpAmpAttention(h, hkv, d, OpAmpConfig(K, 6, dropout=dropout))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return layer


def _inputs(h=4, hkv=2, n_q=7, n_k=7, d=8, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = ((2, h, n_q, d), (2, hkv, n_k, d), (2, hkv, n_k, d))
    return [torch.randn(s, generator=g).to(dtype).requires_grad_() for s in shapes]


def _exact(layer, tensors):
    """The fp64 copy of a layer and its inputs (the same rounded values)."""
    return copy.deepcopy(layer).double(), [t.detach().double().requires_grad_() for t in tensors]


def _values_and_grads(fn, tensors, params, rows=slice(None)):
    out = fn(*tensors)[:, :, rows]
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out.dtype)
    return out, torch.autograd.grad((out * weight).sum(), [*tensors, *params])


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


CASES = {  # name: (query heads, KV heads, query rows, key rows, padded)
    "causal-gqa": (4, 2, 7, 7, False),
    "padded-gqa": (4, 2, 7, 7, True),
    "padded-mha": (4, 4, 7, 7, True),
    "decoding-gqa": (4, 2, 1, 7, False),
    "decoding-padded-gqa": (4, 2, 1, 7, True),
}


def _mask(padded, n_q, n_k):
    if not padded:
        return None
    return left_padding_mask([n_k, 4], n_k)[:, :, n_k - n_q :]  # the last n_q rows


@pytest.mark.parametrize("K", [5.0, math.inf])
@pytest.mark.parametrize("case", list(CASES))
def test_stacked_path_equals_materialised_formula_in_fp32(case, K):
    """Values to 1e-5, gradients (q, k, v and every adapter weight) to 1e-5 of their largest
    entry, against the formula in fp64 on the same values (query rows that are real tokens)."""
    h, hkv, n_q, n_k, padded = CASES[case]
    layer = _layer(K, h, hkv)
    tensors = _inputs(h, hkv, n_q, n_k)
    twin, exact = _exact(layer, tensors)
    mask, rows = _mask(padded, n_q, n_k), slice(3 if padded and n_q > 1 else 0, None)
    out, grads = _values_and_grads(
        lambda *x: layer(*x, mask, path="stacked"), tensors, list(layer.parameters()), rows
    )
    ref, ref_grads = _values_and_grads(
        lambda *x: twin.materialised(*x, mask), exact, list(twin.parameters()), rows
    )
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g.double(), r, atol=1e-5 * r.abs().max().item(), rtol=1e-5)


@pytest.mark.parametrize("K", [10.0, 20.0])
@pytest.mark.parametrize("case", ["padded-gqa", "decoding-gqa"])
def test_stacked_path_at_initialisation_is_bitwise_plain_sdpa_in_bf16(case, K):
    """Eq. 14 in bf16: where O₀ = O₁ the output is SDPA's bitwise, and so are the gradients
    (each branch's at the unscaled upstream gradient, weighted c ± d in fp32, round back)."""
    h, hkv, n_q, n_k, padded = CASES[case]
    layer = OpAmpAttention(h, hkv, 8, OpAmpConfig(K, 6, dropout=0.0)).bfloat16()
    tensors = _inputs(h, hkv, n_q, n_k, dtype=torch.bfloat16)
    mask = _mask(padded, n_q, n_k)
    got = _values_and_grads(lambda *x: layer(*x, mask, path="stacked"), tensors, [])
    want = _values_and_grads(lambda *x: sdpa(*x, mask), tensors, [])
    assert torch.equal(got[0], want[0])
    for g, w in zip(got[1], want[1], strict=True):
        assert g.dtype == torch.bfloat16 and torch.equal(g, w)


@pytest.mark.parametrize("case", ["padded-gqa", "decoding-padded-gqa"])
def test_stacked_path_in_bf16_stays_within_plain_sdpas_bf16_error(case):
    """Just off initialisation (W₂ ~ 1e-5, K = 10): values and gradients against the fp64 formula
    within twice bf16 SDPA's own error against fp64 (test_bf16.py's bound; farther from
    initialisation each branch's rounding is amplified by A_d, in every path)."""
    h, hkv, n_q, n_k, padded = CASES[case]
    layer = OpAmpAttention(h, hkv, 8, OpAmpConfig(10.0, 6, dropout=0.0))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for adapter in (layer.q1, layer.k1, layer.q2, layer.k2):
            adapter.up.weight.copy_(torch.randn(adapter.up.weight.shape, generator=g) * 1e-5)
    layer.bfloat16()
    tensors = _inputs(h, hkv, n_q, n_k, dtype=torch.bfloat16)
    twin, exact = _exact(layer, tensors)
    mask, rows = _mask(padded, n_q, n_k), slice(3 if n_q > 1 else 0, None)
    out, grads = _values_and_grads(lambda *x: layer(*x, mask, path="stacked"), tensors, [], rows)
    ref, ref_grads = _values_and_grads(lambda *x: twin.materialised(*x, mask), exact, [], rows)
    plain, plain_grads = _values_and_grads(lambda *x: sdpa(*x, mask), tensors, [], rows)
    sdpa_ref, sdpa_grads = _values_and_grads(lambda *x: sdpa(*x, mask), exact, [], rows)
    assert _rel(out, ref) <= 2 * _rel(plain, sdpa_ref)
    for got, want, p, s in zip(grads, ref_grads, plain_grads, sdpa_grads, strict=True):
        assert _rel(got, want) <= 2 * _rel(p, s) + BF16_EPS / 4


@pytest.mark.parametrize("block", [None, 3])
def test_stacked_path_draws_the_same_dropout_masks_as_the_plain_path(block):
    """Dropout on (p = 0.5): the stacked path's outputs and gradients equal the plain path's only
    if its batched adapters drop what the per-branch adapters drop, block by block, in the same
    order; the RNG is left where the plain path leaves it."""
    layer = _layer(5.0, dropout=0.5).double().train()
    layer.query_block = block
    tensors = [t.double().detach().requires_grad_() for t in _inputs()]
    results = []
    for path in ("stacked", "plain"):
        torch.manual_seed(3)
        out, grads = _values_and_grads(
            lambda *x, p=path: layer(*x, path=p), tensors, list(layer.parameters())
        )
        results.append((out, grads, torch.get_rng_state()))
    (out_a, grads_a, rng_a), (out_b, grads_b, rng_b) = results
    torch.testing.assert_close(out_a, out_b, atol=1e-12, rtol=1e-12)
    for a, b in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)
    assert torch.equal(rng_a, rng_b)


def test_stacked_path_under_activation_checkpointing_gives_the_same_gradients():
    """A checkpointed fine-tune (``gradient_checkpointing``, non-reentrant, as the paper preset
    runs OpAmp) runs the layer again in backward: with dropout on, the recomputation (and, with
    the adapters replayed, their replay in backward) must draw the forward's masks, so outputs
    and every gradient equal the run's without checkpointing."""
    from torch.utils.checkpoint import checkpoint

    layer = _layer(5.0, dropout=0.5).double().train()
    tensors = [t.double().detach().requires_grad_() for t in _inputs(*CASES["padded-gqa"][:4])]
    mask = _mask(True, 7, 7)
    params = list(layer.parameters())
    results = []
    for checkpointed in (False, True):
        torch.manual_seed(3)

        def attention(q, k, v):
            return layer(q, k, v, mask, path="stacked")

        run = (
            (lambda *x: checkpoint(attention, *x, use_reentrant=False))
            if checkpointed
            else attention
        )
        results.append(_values_and_grads(run, tensors, params))
    (out, grads), (checkpointed_out, checkpointed_grads) = results
    torch.testing.assert_close(checkpointed_out, out, atol=0, rtol=0)
    for a, b in zip(checkpointed_grads, grads, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_stacked_path_without_gradients_equals_the_plain_path():
    layer = _layer(10.0)
    tensors = [t.detach() for t in _inputs()]
    with torch.no_grad():
        torch.testing.assert_close(
            layer(*tensors, path="stacked"), layer(*tensors, path="plain"), atol=1e-6, rtol=1e-6
        )


def test_dispatch_takes_the_stacked_path_only_when_kernels_choose_fused(monkeypatch):
    """The one dispatch point asks ``kernels.choose``: fused (CUDA under ``fused``) -> stacked;
    an explicit path wins."""
    ran = []
    monkeypatch.setattr(kernel, "stacked_two_branch", lambda *a, **k: ran.append(a) or a[0])
    layer = _layer(5.0)
    tensors = _inputs()
    monkeypatch.setattr(kernels, "choose", lambda method, device: kernels.FUSED)
    layer(*tensors)
    assert len(ran) == 1
    layer(*tensors, path="lean")
    monkeypatch.setattr(kernels, "choose", lambda method, device: kernels.REFERENCE)
    layer(*tensors)
    assert len(ran) == 1


def test_on_the_cpu_fused_setting_keeps_todays_default_path_and_records_reference():
    layer = _layer(5.0)
    tensors = _inputs()
    want = _values_and_grads(lambda *x: layer(*x, path="lean"), tensors, [])
    with kernels.using("fused"):
        got = _values_and_grads(layer, tensors, [])
        assert kernels.paths_run() == {"opamp": "reference"}
    assert torch.equal(got[0], want[0])
    assert all(torch.equal(a, b) for a, b in zip(got[1], want[1], strict=True))


def test_stacked_path_needs_the_adapter_modules():
    q, k, v = _inputs()
    layer = _layer(5.0)
    with pytest.raises(ValueError, match="adapters="):
        kernel.two_branch_attention(
            q, k, v, layer.adapt_q, layer.adapt_k, layer.mode_gains, (), path="stacked"
        )


def _kept(fn) -> dict[int, torch.Tensor]:
    """The tensors autograd keeps from forward to backward, one per storage."""
    kept = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = t
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return kept


def test_replayed_adapters_keep_q_and_k_instead_of_the_adapters_inputs_and_activations(
    recompute_adapters,
):
    """Beyond q, k, v and the weights, with the adapters replayed autograd keeps only what SDPA
    keeps (the stacks, [V | V], the stacked output and its log-sum-exps); in all, q and k
    included, under 0.6 of what it keeps with the adapters' dropout inputs, masks and hidden
    activations (0.52 at this shape)."""
    layer = _layer(10.0, h=4, hkv=2, d=8, dropout=0.1).train()
    q, k, v = _inputs(h=4, hkv=2, n_q=16, n_k=16, d=8)
    weights = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    inputs = weights | {t.untyped_storage().data_ptr() for t in (q, k, v)}
    kept = _kept(lambda: layer(q, k, v, path="stacked"))
    beyond = [t for p, t in kept.items() if p not in inputs]
    big = sorted(tuple(t.shape) for t in beyond if t.numel() >= q[:1, :1].numel())
    if recompute_adapters:
        # [K₀ | K₁], [V | V], the log-sum-exps, [Q₀ | Q₁] and the stacked output: SDPA's
        assert big == [(2, 4, 16, 8), (2, 4, 16, 8), (2, 8, 16), (2, 8, 16, 8), (2, 8, 16, 8)]
    else:
        assert any(t.shape[-1] == 6 for t in beyond)  # the adapters' hidden activations

    def in_all(tensors):
        return sum(t.untyped_storage().nbytes() for p, t in tensors.items() if p not in weights)

    fused.RECOMPUTE_ADAPTERS = not recompute_adapters
    other = _kept(lambda: layer(q, k, v, path="stacked"))
    replayed, kept_all = (kept, other) if recompute_adapters else (other, kept)
    assert in_all(replayed) < 0.6 * in_all(kept_all), (in_all(replayed), in_all(kept_all))


def test_stacked_path_trains_with_the_query_adapters_frozen_and_q_without_gradient():
    """Nothing trainable feeds [Q₀ | Q₁]: the replay has no graph for it and takes the keys'
    side alone; the gradients are the plain path's."""
    layer = _layer(5.0, dropout=0.0).double()
    for adapter in (layer.q1, layer.q2):
        adapter.requires_grad_(False)
    q, k, v = (t.detach().double() for t in _inputs())
    k.requires_grad_(), v.requires_grad_()
    params = [p for p in layer.parameters() if p.requires_grad]
    got = _values_and_grads(lambda *x: layer(q, *x, path="stacked"), [k, v], params)
    want = _values_and_grads(lambda *x: layer(q, *x, path="plain"), [k, v], params)
    torch.testing.assert_close(got[0], want[0], atol=1e-12, rtol=1e-12)
    for g, w in zip(got[1], want[1], strict=True):
        torch.testing.assert_close(g, w, atol=1e-10, rtol=1e-10)


def test_replayed_adapters_refuse_a_second_derivative_rather_than_give_a_wrong_one(
    recompute_adapters,
):
    """Through SDPA's math kernel (twice differentiable) the kept path gives the adapters' second
    derivative. The replayed one computes its gradients without a graph, so a higher derivative
    would silently miss its part: it refuses the graph, at the first backward."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    layer = _layer(5.0).double()
    q, k, v = (t.detach().double().requires_grad_() for t in _inputs())
    with sdpa_kernel(SDPBackend.MATH):
        loss = layer(q, k, v, path="stacked").square().sum()
        if recompute_adapters:
            with pytest.raises(RuntimeError, match="first derivatives only"):
                torch.autograd.grad(loss, [q, v], create_graph=True)
            return
        gq, gv = torch.autograd.grad(loss, [q, v], create_graph=True)
        (gw,) = torch.autograd.grad((gq.square().sum() + gv.square().sum()), layer.q1.down.weight)
        assert gw.abs().sum() > 0


def test_replayed_adapters_refuse_weights_changed_in_place_before_backward(recompute_adapters):
    if not recompute_adapters:
        pytest.skip("the kept path saves what its products need, checked by autograd as always")
    layer = _layer(5.0)
    out = layer(*_inputs(), path="stacked")
    with torch.no_grad():
        layer.q1.down.weight.add_(1.0)  # an optimizer step before this step's backward
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
