"""The gpu lane: LKG-RALM's fusion through compiled FlexAttention at the tiles for few fused heads
(``flex.FEW_HEADS_TILES`` as ``flex.KERNEL_OPTIONS``, off until step ``lkg_tiles`` of
benchmarks/gpu_checks.sh times them) against the materialised formula, values and gradients, each
way of the path (its step runs two: log α in the score_mod, ``flex.ROWS_APART``), at head dim 128,
whose default tiles differ from these; on
CUDA the generated kernels must hold those tiles. Apart from test_lkg_flex_on_cuda.py so that its
compiles stay out of that file's steps."""

import pytest
import torch
from torch._inductor.utils import run_and_get_code

from tests.gpu.lane import DEVICE
from tests.gpu.test_lkg_flex_on_cuda import _check, cpu_backward, way  # noqa: F401
from zoomattn.methods.lkg import flex

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile"),
]
# how inductor's templates define a kernel option in the code they generate
TILES_IN_CODE = ("BLOCK_M : tl.constexpr = 64", "BLOCK_M1 : tl.constexpr = 32")


def test_compiled_flex_fusion_at_the_few_heads_tiles_matches_the_formula(monkeypatch):
    """With left padding, generation's (the tiles do not depend on the mask's side): one
    compile per way of the path, each a minute or less on the GPU machine."""
    monkeypatch.setattr(flex, "KERNEL_OPTIONS", flex.FEW_HEADS_TILES)
    if DEVICE != "cuda":  # eager flex: no generated code
        _check(torch.bfloat16, heads=[1, 6], padded=True, d=128)
        return
    # compiled anew (run_and_get_code resets dynamo; no cached graph), forward and backward
    with torch._inductor.config.patch(force_disable_caches=True):
        _, code = run_and_get_code(_check, torch.bfloat16, [1, 6], True, 128)
    lines = sorted({line.strip() for c in code for line in c.splitlines() if "BLOCK_M" in line})
    for tile in TILES_IN_CODE:
        assert any(line.startswith(tile) for line in lines), (tile, lines[:40])
