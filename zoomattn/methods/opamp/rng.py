"""The random generators' states, to replay a forward's dropout masks when a backward recomputes
it (OpAmp's ``recompute`` and ``triton`` paths)."""

from __future__ import annotations

import contextlib

import torch


def rng_states(device):
    """The CPU generator's state, and the device's when it has its own (CUDA's dropout)."""
    return torch.get_rng_state(), (
        torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    )


@contextlib.contextmanager
def rng_restored(states, device):
    """Run with the generators as ``states`` had them; leave them as they were."""
    cpu, on_device = states
    with torch.random.fork_rng(devices=[device] if on_device is not None else []):
        torch.set_rng_state(cpu)
        if on_device is not None:
            torch.cuda.set_rng_state(on_device, device)
        yield
