"""OpAmp's ``triton`` path (methods/opamp/triton_path.py) keeps the kernel's outputs and nothing of
the adapters, which it recomputes in backward with the forward's dropout masks: on the CPU through
Triton's interpreter (its values and gradients against the plain path: test_triton_kernel.py)."""

import torch

from tests.methods.opamp.test_fused import _inputs, _kept, _layer
from tests.triton_interpreter import interpreter_or_skip
from zoomattn.attention.math import sdpa

interpreter_or_skip("tests/gpu/test_opamp_fused_on_cuda.py")

N, D = 24, 16


def _bytes(tensors) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors)


def test_triton_path_keeps_its_inputs_the_two_branch_outputs_and_log_sum_exps_only():
    layer = _layer(10.0, h=2, hkv=1, d=D, dropout=0.1).train()
    q, k, v = _inputs(h=2, hkv=1, n_q=N, n_k=N, d=D)
    weights = {p.untyped_storage().data_ptr() for p in layer.parameters()}  # resident anyway
    inputs = weights | {t.untyped_storage().data_ptr() for t in (q, k, v)}
    kept = _kept(lambda: layer(q, k, v, path="triton"))
    beyond = [t for ptr, t in kept.items() if ptr not in inputs]
    shapes = sorted(tuple(t.shape) for t in beyond)
    assert shapes == [(2, 4, N), (2, 4, N, D)]  # log-sum-exps and O₀ | O₁ ([B, 2H, ...])
    stacked = _kept(lambda: layer(q, k, v, path="stacked"))
    stacked_beyond = _bytes(t for ptr, t in stacked.items() if ptr not in inputs)
    sdpa_beyond = _bytes(t for p, t in _kept(lambda: sdpa(q, k, v)).items() if p not in inputs)
    assert _bytes(beyond) <= 1.1 * 2 * q.numel() * q.element_size()
    assert _bytes(beyond) < stacked_beyond / 3 and sdpa_beyond < _bytes(beyond)


def test_triton_path_backward_replays_the_forwards_dropout_and_leaves_the_generator_as_stacked():
    """The adapters run again in backward under the forward's random state: the gradients are
    the stacked path's (same masks), and the generator ends where the stacked path leaves it."""
    layer = _layer(10.0, h=2, hkv=1, d=D, dropout=0.5).train()
    tensors = _inputs(h=2, hkv=1, n_q=N, n_k=N, d=D)
    results, states = [], []
    for path in ("triton", "stacked"):
        torch.manual_seed(3)
        out = layer(*tensors, path=path)
        torch.rand(1)  # the generator moves on before backward, as a training step's would
        grads = torch.autograd.grad(out.square().sum(), [*tensors, *layer.parameters()])
        results.append((out, grads))
        states.append(torch.get_rng_state())
    (out, grads), (want, want_grads) = results
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    for g, w in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=1e-5 * w.abs().max().item(), rtol=1e-5)
    assert torch.equal(states[0], states[1])
