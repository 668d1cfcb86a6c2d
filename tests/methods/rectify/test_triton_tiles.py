"""g and g′ as the fused kernel computes them in registers, through Triton's interpreter, against
``kernel.Rectifier`` and its autograd derivative in fp64 (tests/methods/rectify/g_in_registers.py:
every variant, scores far past exp's fp32 range, ξ up to the kernels' largest)."""

import pytest

from tests.triton_interpreter import interpreter_or_skip
from zoomattn.methods.rectify.kernel import G_VARIANTS

interpreter_or_skip("tests/gpu/test_rectify_triton_on_cuda.py")
from tests.methods.rectify.g_in_registers import (  # noqa: E402
    XIS,
    assert_g_in_registers_matches_fp64,
)


@pytest.mark.parametrize("xi", XIS)
@pytest.mark.parametrize("name", [g for g in G_VARIANTS if g != "identity"])
def test_g_and_its_derivative_in_registers_equal_the_rectifier_in_fp64(name, xi):
    assert_g_in_registers_matches_fp64(name, xi, "cpu")
