"""benchmarks/lkg_kept_memory.py at a small shape: its two paths compute the same rows, and the
count it writes shows the rows apart keeping less than the materialised softmax."""

import json
import sys

import torch

from zoomattn.config import ROOT
from zoomattn.methods.lkg import rows_apart

sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmark imports its siblings by name
import lkg_kept_memory  # noqa: E402


def test_the_materialised_reference_computes_the_rows_apart_values_and_gradients():
    torch.manual_seed(0)
    q = torch.randn(1, 4, 40, 8, requires_grad=True)
    k, v = (torch.randn(1, 2, 40, 8, requires_grad=True) for _ in "kv")
    segments = torch.tensor([[0] * 10 + [1] * 10 + [-2] * 10 + [-3] * 10])
    log_alpha = torch.randn(1, 2, requires_grad=True)
    args = (q, k, v, None, None, torch.arange(20, 40)[None], segments, log_alpha)
    outs = [fn(*args) for fn in (lkg_kept_memory.materialised, rows_apart.guided_rows_attention)]
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-5)
    grads = [torch.autograd.grad(out.square().sum(), (q, k, v, log_alpha)) for out in outs]
    for got, want in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_the_count_shows_the_rows_apart_keeping_less(tmp_path):
    out = tmp_path / "kept.json"
    shape = ["--tokens", "256", "--rows", "16", "--heads", "4", "--kv-heads", "2"]
    lkg_kept_memory.main([*shape, "--head-dim", "16", "--out", str(out)])
    result = json.loads(out.read_text())
    for dtype in ("fp32", "bf16"):
        assert 0 < result[dtype]["rows_apart"] < result[dtype]["materialised"]
