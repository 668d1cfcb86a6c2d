"""OpAmp in bf16 (CPU): Eq. 14 bitwise at initialisation, and the error of the mode combination.

The branches are combined as A_c/2·(O⁺ + O⁻) + A_d·(O⁺ − O⁻): where O⁺ = O⁻ (W₂ = 0) that is O⁺
exactly, whereas (A_d + A_c/2)·O⁺ + (A_c/2 − A_d)·O⁻ rounds two terms ~K times the output.
"""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import zoomattn.attention.interface  # noqa: F401  (registers the "zoomattn" implementation)
from tests.attention.test_math import left_padding_mask
from zoomattn.attention.interface import attention_modules
from zoomattn.attention.math import sdpa
from zoomattn.methods.opamp.config import OpAmpConfig
from zoomattn.methods.opamp.kernel import PATHS
from zoomattn.methods.opamp.model import OpAmpAttention, attach

BF16_EPS = 2.0**-8  # spacing of bf16 numbers in [1, 2)


def _bf16_qkv(b=2, h=4, hkv=2, n=7, d=8, seed=0, grad=True):
    g = torch.Generator().manual_seed(seed)
    shapes = ((b, h, n, d), (b, hkv, n, d), (b, hkv, n, d))
    return tuple(torch.randn(s, generator=g).bfloat16().requires_grad_(grad) for s in shapes)


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def _grads(out, inputs, seed=1):
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    return torch.autograd.grad((out * weight.to(out.dtype)).sum(), inputs)


def _perturb_up_weights(layer, scale, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for adapter in (layer.q1, layer.k1, layer.q2, layer.k2):
            w = adapter.up.weight
            w.copy_(torch.randn(w.shape, generator=g) * scale)


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("K", [1.0, 10.0, 20.0])
def test_bf16_output_at_initialisation_is_bitwise_plain_sdpa(K, path, padded):
    """Eq. 14 in bf16, in every path (the training ones with inputs requiring grad)."""
    layer = OpAmpAttention(4, 2, 8, OpAmpConfig(K, 6, dropout=0.0)).bfloat16()
    q, k, v = _bf16_qkv()
    mask = left_padding_mask([7, 4], 7) if padded else None
    assert torch.equal(layer(q, k, v, mask, path=path), sdpa(q, k, v, mask))


@pytest.mark.parametrize("hkv", [2, 4])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("path", ["lean", "recompute"])
@pytest.mark.parametrize("K", [1.0, 10.0, 20.0])
def test_bf16_training_gradients_at_initialisation_are_bitwise_plain_sdpa_gradients(
    K, path, padded, hkv
):
    """The training paths (lean on the CPU, recompute on CUDA), one tile: each branch's
    gradients at the unscaled upstream gradient equal SDPA's bitwise, and their sum with weights
    A_c/2 ± A_d, kept in fp32, rounds back to them exactly."""
    layer = OpAmpAttention(4, hkv, 8, OpAmpConfig(K, 6, dropout=0.0)).bfloat16()
    q, k, v = _bf16_qkv(hkv=hkv)
    mask = left_padding_mask([7, 4], 7) if padded else None
    got = _grads(layer(q, k, v, mask, path=path), (q, k, v))
    want = _grads(sdpa(q, k, v, mask), (q, k, v))
    for g, w in zip(got, want, strict=True):
        assert g.dtype == torch.bfloat16 and torch.equal(g, w)


@pytest.mark.parametrize("K", [10.0, 20.0])
def test_bf16_lean_gradients_in_tiles_at_initialisation_are_as_accurate_as_plain_sdpa(K):
    """In tiles of 3 positions each tile's kernel gradients are rounded to bf16 before they
    are summed, so they are not SDPA's bitwise; their error stays that of bf16 SDPA."""
    layer = OpAmpAttention(4, 2, 8, OpAmpConfig(K, 6, dropout=0.0)).bfloat16()
    layer.query_block = 3
    q, k, v = _bf16_qkv()
    exact = [t.detach().double().requires_grad_() for t in (q, k, v)]
    reference = _grads(sdpa(*exact), exact)
    got = _grads(layer(q, k, v, path="lean"), (q, k, v))
    plain = _grads(sdpa(q, k, v), (q, k, v))
    for g, p, r in zip(got, plain, reference, strict=True):
        assert _rel(g, r) <= 2 * _rel(p, r) + BF16_EPS / 4


@pytest.mark.parametrize("K", [1.0, 10.0, 20.0])
def test_bf16_plain_path_gradients_at_initialisation_carry_the_gain_times_bf16_rounding(K):
    """The plain path's two branches get upstream gradients (A_c/2 ± A_d)·g, rounded to bf16,
    and their kernels' bf16 gradients, ~K times the result, cancel in autograd's bf16 sum: an
    error of ~(2K + 1) bf16 roundings (measured: 0.045 at K = 10, 0.10 at K = 20), not SDPA's
    one: why no training runs it (the lean and recompute paths take each branch's gradient at
    g and add them in fp32)."""
    layer = OpAmpAttention(4, 2, 16, OpAmpConfig(K, 6, dropout=0.0)).bfloat16()
    q, k, v = _bf16_qkv(n=32, d=16)
    got = _grads(layer(q, k, v, path="plain"), (q, k, v))
    want = _grads(sdpa(q, k, v), (q, k, v))
    for g, w in zip(got, want, strict=True):
        assert _rel(g, w) <= (2 * K + 1) * BF16_EPS


def _tiny_llama(seed=0):
    config = LlamaConfig(
        vocab_size=100,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        attn_implementation="zoomattn",
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to(torch.bfloat16)


@pytest.mark.parametrize("K", [1.0, 10.0, 20.0])
def test_bf16_model_logits_and_gradients_at_initialisation_equal_the_base_models(K):
    """Eq. 14 through a bf16 Llama (every layer adapted, left padding): logits bitwise equal
    without grad (plain path), and with grad (lean path) logits and base weight gradients too."""
    ids = torch.tensor([[1, 5, 9, 12, 7, 30, 4, 8], [0, 0, 0, 3, 14, 15, 9, 2]])
    mask = torch.tensor([[1] * 8, [0, 0, 0, 1, 1, 1, 1, 1]])
    model = _tiny_llama()
    base = [p for _, p in model.named_parameters()]

    def run():
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask).logits
        train_logits = model(input_ids=ids, attention_mask=mask).logits
        grads = torch.autograd.grad(train_logits.float().square().mean(), base)
        return logits, train_logits.detach(), grads

    want = run()
    attach(model, OpAmpConfig(K=K, adapter_dim=8, every=1, dropout=0.0))
    for attn in attention_modules(model):
        attn.zoom.to(torch.bfloat16)
    got = run()
    assert torch.equal(got[0], want[0])
    assert torch.equal(got[1], want[1])
    for g, w in zip(got[2], want[2], strict=True):
        assert torch.equal(g, w)


def _branch_outputs(layer, q, k, v):
    return [sdpa(layer.adapt_q(i, q), layer.adapt_k(i, k), v) for i in (0, 1)]


@pytest.mark.parametrize("path", PATHS)
def test_bf16_error_just_off_initialisation_stays_within_twice_plain_sdpas(path):
    """Adapters' W₂ random but tiny (branches differ by ~1e-4 of their output): the output's
    error against an fp32 reference stays within 2× bf16 SDPA's, where the per-branch weights'
    form (A_d + A_c/2)·O⁺ + (A_c/2 − A_d)·O⁻ is ~10× off. Farther from initialisation neither
    form gets there: each branch's kernel rounds its output to bf16 before A_d amplifies
    O⁺ − O⁻ (and the adapters round Q±, K±)."""
    K = 10.0
    layer = OpAmpAttention(8, 4, 32, OpAmpConfig(K, 16, dropout=0.0))
    _perturb_up_weights(layer, 1e-5)
    layer.bfloat16()
    q, k, v = _bf16_qkv(h=8, hkv=4, n=128, d=32)
    reference_layer = OpAmpAttention(8, 4, 32, OpAmpConfig(K, 16, dropout=0.0))
    reference_layer.load_state_dict(layer.state_dict())  # the same bf16 values, in fp32
    with torch.no_grad():
        exact = [t.float() for t in (q, k, v)]
        reference = reference_layer(*exact)
        sdpa_error = _rel(sdpa(q, k, v), sdpa(*exact))
        o_plus, o_minus = _branch_outputs(layer, q, k, v)
        assert not torch.equal(o_plus, o_minus)
        half_a_c, a_d = layer.mode_gains
        per_branch = o_plus * (a_d + half_a_c) + o_minus * (half_a_c - a_d)
    out = layer(q, k, v, path=path)
    assert _rel(out, reference) <= 2 * sdpa_error
    assert _rel(per_branch, reference) > 5 * sdpa_error
