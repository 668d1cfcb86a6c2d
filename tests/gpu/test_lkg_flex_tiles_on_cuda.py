"""The gpu lane: LKG-RALM's fusion through compiled FlexAttention at the tiles for few fused heads
(``flex.FEW_HEADS_TILES`` as ``flex.KERNEL_OPTIONS``, off until step ``lkg_tiles`` of
benchmarks/gpu_checks.sh times them) against the materialised formula, values and gradients, both
ways of the path (``flex.ROWS_APART``): a kernel configuration of its own, compiled anew. Apart
from test_lkg_flex_on_cuda.py so that its compiles stay out of that file's steps."""

import pytest
import torch

from tests.gpu.test_lkg_flex_on_cuda import _check, cpu_backward, rows_apart  # noqa: F401
from zoomattn.methods.lkg import flex

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile"),
]


@pytest.mark.parametrize("padded", [False, True], ids=["causal", "left_padding"])
def test_compiled_flex_fusion_at_the_few_heads_tiles_matches_the_formula(monkeypatch, padded):
    monkeypatch.setattr(flex, "KERNEL_OPTIONS", flex.FEW_HEADS_TILES)
    _check(torch.bfloat16, heads=[1, 6], padded=padded)
