"""benchmarks/lkg_rows_apart.py at a small shape, a check of its mechanics, not a measurement: its
two paths compute the same rows, and what it writes shows the rows apart keeping less."""

import json
import sys

import torch

from zoomattn.config import ROOT
from zoomattn.methods.lkg import rows_apart

sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmark imports its siblings by name
import lkg_rows_apart  # noqa: E402


def test_the_materialised_reference_computes_the_rows_apart_values_and_gradients():
    torch.manual_seed(0)
    q = torch.randn(1, 4, 40, 8, requires_grad=True)
    k, v = (torch.randn(1, 2, 40, 8, requires_grad=True) for _ in "kv")
    segments = torch.tensor([[0] * 10 + [1] * 10 + [-2] * 10 + [-3] * 10])
    log_alpha = torch.randn(1, 2, requires_grad=True)
    args = (q, k, v, None, None, torch.arange(20, 40)[None], segments, log_alpha)
    outs = [fn(*args) for fn in (lkg_rows_apart.materialised, rows_apart.guided_rows_attention)]
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-5)
    grads = [torch.autograd.grad(out.square().sum(), (q, k, v, log_alpha)) for out in outs]
    for got, want in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_the_count_shows_the_rows_apart_keeping_less(tmp_path):
    out = tmp_path / "kept.json"
    shape = ["--tokens", "256", "--rows", "16", "--heads", "4", "--kv-heads", "2"]
    lkg_rows_apart.main([*shape, "--head-dim", "16", "--repeats", "1", "--out", str(out)])
    result = json.loads(out.read_text())
    for dtype in ("fp32", "bf16"):
        kept, seconds = result[dtype]["kept_mib"], result[dtype]["seconds"]
        assert 0 < kept["rows_apart"] < kept["materialised"]
        assert seconds.keys() == kept.keys() and all(t > 0 for t in seconds.values())
