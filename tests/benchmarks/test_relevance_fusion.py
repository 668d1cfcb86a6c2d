"""benchmarks/relevance_fusion.py's candidate split of the heads equals the model's own."""

import importlib

import pytest
import torch

from zoomattn.attention.math import sdpa
from zoomattn.config import ROOT
from zoomattn.methods.lkg.kernel import by_heads


@pytest.fixture
def relevance_fusion(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module("relevance_fusion")


def _biased(q, k, v):  # any attention of the fused heads' own q, k, v (the test's stand-in)
    return sdpa(q * 1.7, k, v.flip(-1))


@pytest.mark.parametrize("heads", [(1, 6), (0,), (), tuple(range(8))])
@pytest.mark.parametrize("padded", [False, True])
def test_spliced_heads_give_by_heads_values_and_gradients(relevance_fusion, heads, padded):
    torch.manual_seed(0)
    q = torch.randn(2, 8, 12, 16, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, 4, 12, 16, dtype=torch.float64, requires_grad=True) for _ in "kv")
    mask = None
    if padded:  # the second row left-padded by 3, causal
        mask = torch.ones(12, 12, dtype=torch.bool).tril()[None, None].repeat(2, 1, 1, 1)
        mask[1, :, :, :3] = False
    grad = torch.randn(2, 8, 12, 16, dtype=torch.float64)
    results = []
    for split in (by_heads, relevance_fusion.spliced_by_heads):
        out = split(q, k, v, mask, None, heads, _biased)
        results.append((out, *torch.autograd.grad(out, (q, k, v), grad)))
    for ours, model in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(ours, model, rtol=1e-12, atol=1e-12)
