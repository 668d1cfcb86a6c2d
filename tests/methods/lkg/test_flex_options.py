"""LKG-RALM's flex path with FlexAttention's kernel options (``flex.KERNEL_OPTIONS``, the tiles
for few fused heads) and its autotuned compile (``flex.AUTOTUNE``): both reach the flex call and
leave the values and gradients the formula's. On the CPU the eager kernel stands in for the
compiled one; the gpu lane checks the generated kernels
(tests/gpu/test_lkg_flex_tiles_on_cuda.py)."""

import pytest
import torch
import torch.nn.attention.flex_attention as flex_api

from tests.methods.lkg.test_flex import (  # noqa: F401 (autouse fixture)
    SCALE,
    SEGMENTS,
    _formula_fn,
    _inputs,
    _values_and_grads,
    cpu_backward,
)
from zoomattn.methods.lkg import flex

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


@pytest.mark.parametrize("autotune", [False, True])
def test_kernel_options_and_autotune_reach_the_flex_call_and_leave_the_values_as_they_were(
    monkeypatch, autotune
):
    """flex.KERNEL_OPTIONS (tiles for few fused heads) reach FlexAttention, and AUTOTUNE picks the
    max-autotune compile; on the CPU the eager kernel stands in for the compiled one, so the
    values and gradients must stay the formula's."""
    options = {"fwd_BLOCK_M": 64, "bwd_BLOCK_N1": 64}
    seen = []

    def compiled(tune):
        def attend(*args, **kwargs):
            seen.append((tune, kwargs["kernel_options"]))
            return flex_api.flex_attention(*args, **kwargs)

        return attend

    monkeypatch.setattr(flex, "compiled_flex_attention", compiled)
    monkeypatch.setattr(flex, "KERNEL_OPTIONS", options)
    monkeypatch.setattr(flex, "AUTOTUNE", autotune)
    qkv, log_alpha = _inputs()

    def fused(q, k, v, log_alpha):
        return flex.flex_relevance_attention(
            q, k, v, None, SCALE, [1, 2], SEGMENTS, SEGMENTS, log_alpha, compiled=True
        )

    out, grads = _values_and_grads(fused, qkv, log_alpha, padded=False)
    assert seen == [(autotune, options)]
    ref_out, ref_grads = _values_and_grads(_formula_fn([1, 2], None), qkv, log_alpha, False)
    torch.testing.assert_close(out, ref_out.float(), atol=1e-5, rtol=1e-5)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r.float(), atol=1e-5, rtol=1e-5)
