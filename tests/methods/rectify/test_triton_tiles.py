"""g and g′ as the fused kernel computes them in registers (methods/rectify/triton_tiles.py
``rectifier``), through Triton's interpreter, against ``kernel.Rectifier`` and its autograd
derivative in fp64: every variant, from small scores to ones far past exp's fp32 range (the
kernel's exponentials must not overflow), at the study's ξ and far beyond."""

import pytest
import torch

from tests.triton_interpreter import interpreter_or_skip
from zoomattn.methods.rectify.kernel import G_VARIANTS, Rectifier

interpreter_or_skip("tests/gpu/test_rectify_triton_on_cuda.py")
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from zoomattn.methods.rectify.triton_tiles import G_KINDS, rectifier  # noqa: E402

# tanh x as 2σ(2x) − 1: σ's exp(−2x) overflows to inf for x ≪ 0 and gives σ = 0, as on the GPU
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
SCORES = torch.cat([torch.linspace(-6, 6, 97), torch.tensor([-300.0, -90, -40, 40, 90, 300])])


@triton.jit
def _g_kernel(X, G, DG, xi, n, G_KIND: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n, other=0.0)
    g, dg = rectifier(x, xi, G_KIND, True)
    tl.store(G + offs, g, mask=offs < n)
    tl.store(DG + offs, dg, mask=offs < n)


@pytest.mark.parametrize("xi", [0.5, 3.0, 10.0, 40.0])
@pytest.mark.parametrize("name", [g for g in G_VARIANTS if g != "identity"])
def test_g_and_its_derivative_in_registers_equal_the_rectifier_in_fp64(name, xi):
    x = SCORES.clone()
    g, dg = torch.empty_like(x), torch.empty_like(x)
    block = triton.next_power_of_2(len(x))
    _g_kernel[(1,)](x, g, dg, xi, len(x), G_KIND=G_KINDS[name], BLOCK=block)
    exact = x.double().requires_grad_()
    want = Rectifier(name, xi)(exact)
    (want_dg,) = torch.autograd.grad(want.sum(), exact)
    assert torch.isfinite(g).all() and torch.isfinite(dg).all()
    # fp32 keeps ~7 digits of the terms: the score and ξ (g′ up to ~ξ, through 1 − tanh²)
    assert ((g.double() - want.detach()).abs() / (1 + x.abs() + xi)).max() < 1e-6
    assert ((dg.double() - want_dg).abs() / (1 + xi)).max() < 1e-6
