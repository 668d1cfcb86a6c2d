import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.attention.test_math import _qkv, left_padding_mask
from tests.methods.rectify.test_kernel import right_padding_mask
from zoomattn.attention import kernels
from zoomattn.attention.interface import attention_modules, recording_last_row
from zoomattn.attention.math import attention_probs
from zoomattn.methods import METHODS, cells
from zoomattn.methods.opamp.config import OpAmpConfig
from zoomattn.methods.opamp.kernel import PATHS
from zoomattn.methods.opamp.model import OpAmpAttention, adapted_layers, attach


def _randomise_adapters(module: torch.nn.Module, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)


@pytest.mark.parametrize("K", [1.0, 10.0, math.inf])
def test_gains_follow_the_cmrr(K):
    a_c, a_d = OpAmpConfig(K=K).gains()
    assert (a_c, a_d) == ((0.0, 1.0) if math.isinf(K) else (1.0, K))
    assert OpAmpConfig(K=K).mode_gains() == (a_c / 2, a_d)  # rows of M̄ sum to 2·(A_c/2) = A_c


@pytest.mark.parametrize("block", [None, 3])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("K", [5.0, math.inf])
@pytest.mark.parametrize("padded", [False, True])
def test_fused_opamp_equals_materialised_formula_values_and_gradients(
    K, padded, dtype, path, block
):
    """Every fused path: the memory-lean autograd function (CPU training), the recomputing one
    (training on CUDA) and plain autograd through two SDPA calls, whole and in query/key blocks
    of 3 (7 positions: blocks 3, 3, 1;
    in the left-padded row the first block is all padding). float64 checks the identity
    itself; float32 checks values (its gradients differ by float32 rounding amplified by the
    A_d·(M⁺ − M⁻) cancellation)."""
    torch.manual_seed(0)
    cfg = OpAmpConfig(K, 6, dropout=0.0)
    layer = OpAmpAttention(n_heads=4, n_kv_heads=2, head_dim=8, cfg=cfg)
    layer.query_block = block
    _randomise_adapters(layer)
    layer.to(dtype)
    q, k, v = (t.to(dtype).requires_grad_(True) for t in _qkv())
    mask = left_padding_mask([7, 4], 7) if padded else None
    rows = slice(3, None)  # queries that are real tokens in both rows of the batch
    outs, grads = [], []
    for fn in (lambda *a: layer(*a, path=path), layer.materialised):
        out = fn(q, k, v, mask)[:, :, rows]
        g = torch.autograd.grad(out.pow(2).sum(), [q, k, v, *layer.parameters()])
        outs.append(out)
        grads.append(g)
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-5)
    if dtype == torch.float64:
        for a, b in zip(*grads, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("block", [None, 3])
@pytest.mark.parametrize("path", ["lean", "recompute"])
def test_training_paths_replay_the_forwards_dropout_masks(block, path):
    """The lean and recompute paths run the adapters again in backward; with dropout on, their
    gradients match plain autograd's only if they replay the forward's random masks (and they
    leave the RNG as plain autograd does)."""
    layer = OpAmpAttention(4, 2, 8, OpAmpConfig(5.0, 6, dropout=0.5)).double().train()
    layer.query_block = block
    _randomise_adapters(layer)
    q, k, v = (t.double().requires_grad_(True) for t in _qkv())
    results = []
    for run_path in (path, "plain"):
        torch.manual_seed(3)
        out = layer(q, k, v, path=run_path)
        grads = torch.autograd.grad(out.pow(2).sum(), [q, k, v, *layer.parameters()])
        results.append((out, grads, torch.get_rng_state()))
    (out_a, grads_a, rng_a), (out_b, grads_b, rng_b) = results
    torch.testing.assert_close(out_a, out_b)
    for a, b in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)
    assert torch.equal(rng_a, rng_b)


def test_zero_initialised_adapters_leave_attention_unchanged():
    layer = OpAmpAttention(4, 2, 8, OpAmpConfig(K=10.0, adapter_dim=6))
    q, k, v = _qkv()
    from zoomattn.attention.math import sdpa

    torch.testing.assert_close(layer(q, k, v), sdpa(q, k, v), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("K", [1, 10, 20])
def test_opamp_model_logits_equal_base_logits_at_initialisation(base_dir, K):
    """docs/papers.md §1, Eq. 14: with W₂ = 0, M̄ = M, so the adapted model is the base model."""
    ids = torch.tensor([[1, 5, 9, 12, 7, 30, 4, 8], [0, 0, 0, 3, 14, 15, 9, 2]])
    mask = torch.tensor([[1] * 8, [0, 0, 0, 1, 1, 1, 1, 1]])
    reference = AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="sdpa").eval()
    model = AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="zoomattn").eval()
    attach(model, OpAmpConfig(K=float(K), adapter_dim=8, every=1))
    with torch.no_grad():
        want = reference(input_ids=ids, attention_mask=mask).logits
        got = model(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1, 3:], want[1, 3:], atol=1e-5, rtol=1e-5)


def test_adapters_sit_only_on_every_nth_layer(base_dir):
    model = AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="zoomattn")
    attach(model, OpAmpConfig(K=10.0, adapter_dim=8, every=3))
    has = [hasattr(m, "zoom") for m in attention_modules(model)]
    assert has == [i in adapted_layers(4, 3) for i in range(4)] == [True, False, False, True]


def test_k_adapters_act_on_kv_heads_before_gqa_repetition():
    layer = OpAmpAttention(n_heads=8, n_kv_heads=2, head_dim=4, cfg=OpAmpConfig(K=5.0))
    assert layer.q1.down.in_features == 32 and layer.k1.down.in_features == 8


@pytest.mark.parametrize("K", [10.0, math.inf])
def test_last_row_probe_is_the_signed_opamp_row_summing_to_common_mode_gain(K):
    cfg = OpAmpConfig(K=K, adapter_dim=6, dropout=0.0)
    layer = OpAmpAttention(4, 2, 8, cfg)
    _randomise_adapters(layer)
    q, k, _ = _qkv()
    mask = left_padding_mask([7, 5], 7)
    (q1, k1), (q2, k2) = layer.branches(q, k)
    a_c, a_d = cfg.gains()
    m_plus, m_minus = attention_probs(q1, k1, mask), attention_probs(q2, k2, mask)
    m_bar = a_d * (m_plus - m_minus) + a_c / 2 * (m_plus + m_minus)
    row = layer(q, k, None, mask, last_row=True)
    torch.testing.assert_close(row, m_bar[:, :, -1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(row.sum(-1), torch.full((2, 4), cfg.gains()[0]), atol=1e-5, rtol=0)
    assert (row < 0).any()  # M̄ is signed once the two branches differ


def test_recording_collects_one_row_per_layer_and_cleans_up(base_dir):
    model = AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="zoomattn").eval()
    attach(model, OpAmpConfig(K=10.0, adapter_dim=8, every=2))
    with torch.no_grad(), recording_last_row(model) as layers:
        model(input_ids=torch.tensor([[1, 5, 9, 12, 7]]))
        rows = [m.last_row for m in layers]
    assert [r.shape for r in rows] == [torch.Size([1, 4, 5])] * 4
    assert not any(hasattr(m, "last_row") or m.record_last_row for m in layers)


def test_cells_expand_the_k_sweep_with_infinity():
    grid = cells({"qlora": {}, "opamp": {"K": [1, 10, "inf"], "every": 2}})
    assert list(grid) == ["qlora", "opamp-K1", "opamp-K10", "opamp-Kinf"]
    assert METHODS["opamp"].make_config(grid["opamp-Kinf"][1]).K == math.inf


@pytest.mark.usefixtures("plain_fused_as_on_cuda")
@pytest.mark.parametrize("path", ["recompute", "plain"])
def test_branches_through_sdpa_run_a_right_padded_batch_causal_to_the_same_real_rows(path):
    """OpAmp's branches on CUDA's reference paths are SDPA calls, the recompute path's again in
    backward: under ``{plain: fused}`` a right-padded batch runs them causal, and the real rows'
    values and every gradient (q, k, v, adapters) are the masked run's."""
    torch.manual_seed(0)
    layer = OpAmpAttention(n_heads=4, n_kv_heads=2, head_dim=8, cfg=OpAmpConfig(5.0, 6, dropout=0))
    _randomise_adapters(layer)
    mask, real = right_padding_mask([7, 4], 7), torch.tensor([[1.0] * 7, [1.0] * 4 + [0.0] * 3])

    def run(setting):
        q, k, v = (t.requires_grad_(True) for t in _qkv())
        with kernels.using(setting):
            out = layer(q, k, v, mask, path=path) * real[:, None, :, None]
            grads = torch.autograd.grad(out.pow(2).sum(), [q, k, v, *layer.parameters()])
            return kernels.paths_run(), out, grads

    (ran, out, grads), (_, want, want_grads) = run({"plain": "fused"}), run("reference")
    assert ran == {"plain": "fused"}
    torch.testing.assert_close(out, want, atol=1e-6, rtol=1e-5)
    for got, expected in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)
