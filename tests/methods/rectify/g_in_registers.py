"""g and g′ as the fused kernel computes them in registers (methods/rectify/triton_tiles.py
``rectifier``) against ``kernel.Rectifier`` and its autograd derivative in fp64: every variant,
from small scores to ones far past exp's fp32 range (the kernel's exponentials must not
overflow), at the study's ξ and far beyond, up to the largest the kernels take (``MAX_XI``). Run
by tests/methods/rectify/test_triton_tiles.py in Triton's interpreter (tl.exp, 1/x, tl.log) and by
the gpu lane compiled (one .ftz special-function instruction each)."""

import torch
import triton
import triton.language as tl

from zoomattn.methods.rectify.kernel import MAX_XI, Rectifier
from zoomattn.methods.rectify.triton_tiles import G_KINDS, rectifier

# far past exp's range, and around |x| ≈ 87.3, where e^{−|x|} becomes subnormal (flushed to 0
# compiled): the smooth max-min then drops its terms in e^{ξ−|x|}
FLUSH = [-90.0, -88.5, -88, -87.5, -87, 87, 87.5, 88, 88.5, 90]
SCORES = torch.cat([torch.linspace(-6, 6, 97), torch.tensor([-300.0, -40, *FLUSH, 40, 300])])
XIS = [0.5, 3.0, 10.0, 40.0, MAX_XI]


@triton.jit
def _g_kernel(X, G, DG, xi, n, G_KIND: tl.constexpr, INTERPRETED: tl.constexpr,
              BLOCK: tl.constexpr):  # fmt: skip
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n, other=0.0)
    g, dg = rectifier(x, xi, G_KIND, INTERPRETED)
    tl.store(G + offs, g, mask=offs < n)
    tl.store(DG + offs, dg, mask=offs < n)


def assert_g_in_registers_matches_fp64(name: str, xi: float, device: str) -> None:
    x = SCORES.to(device)
    g, dg = torch.empty_like(x), torch.empty_like(x)
    block = triton.next_power_of_2(len(x))
    interpreted = triton.knobs.runtime.interpret
    _g_kernel[(1,)](x, g, dg, xi, len(x), G_KIND=G_KINDS[name], INTERPRETED=interpreted,
                    BLOCK=block)  # fmt: skip
    exact = SCORES.double().requires_grad_()
    want = Rectifier(name, xi)(exact)
    (want_dg,) = torch.autograd.grad(want.sum(), exact)
    g, dg = g.cpu().double(), dg.cpu().double()
    assert torch.isfinite(g).all() and torch.isfinite(dg).all()
    # fp32 keeps ~7 digits of the terms: the score and ξ (g′ up to ~ξ, through 1 − tanh²)
    assert ((g - want.detach()).abs() / (1 + SCORES.double().abs() + xi)).max() < 1e-6
    assert ((dg - want_dg).abs() / (1 + xi)).max() < 1e-6
