"""Fixtures of the rectification kernel's tests that run it where dispatch sends it on CUDA."""

import pytest
import torch

from zoomattn.attention import kernels


@pytest.fixture
def on_cuda_under_fused(monkeypatch):
    """Dispatch as on CUDA under ``attention_kernels: {rectify: fused}`` (kernels.choose's own
    rule, the tensors' device taken for CUDA) for the test, the setting and the record of what
    ran restored after it; yields every call of the kernel as (queries, masked)."""
    from zoomattn.methods.rectify import triton_kernel

    calls, kernel, choose = [], triton_kernel.fused_rectified_attention, kernels.choose

    def recorded(q, u, k, v, g, mask=None, *args):
        calls.append((q.shape[2], mask is not None))
        return kernel(q, u, k, v, g, mask, *args)

    cuda = torch.device("cuda")
    monkeypatch.setattr(triton_kernel, "fused_rectified_attention", recorded)
    monkeypatch.setattr(kernels, "choose", lambda m, device, *a: choose(m, cuda, *a))
    with kernels.using({"rectify": "fused"}):
        yield calls
