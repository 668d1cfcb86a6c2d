"""Data-parallel fine-tuning: N processes started by torchrun, each holding the whole model.

Every process draws the whole global batch (a pure function of seed and step, from data every
process has), so the counts a loss is normalised by need no communication; each runs forward and
backward on its own micro-batches only (``StepBatch.micro_batches``), and the step's gradients
are summed over the processes before clipping. N processes then train as one process with the
same global batch does, up to the order of float additions. The choice of engine and why (the
gradient sum once per step instead of a DDP wrapper) is in docs/distributed.md.

One process (not started by torchrun) is ``SINGLE``: no process group, every helper a no-op, and
fine-tuning runs exactly as it always did.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

ENGINE = "torchrun"  # the launcher; the gradients are summed with torch.distributed (c10d)
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@dataclass(frozen=True)
class World:
    """This process's place among the data-parallel processes of a job."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    backend: str = "none"  # gloo (CPU) | nccl (CUDA) | none: one process, no process group

    @property
    def is_main(self) -> bool:
        """The process that logs, reports and writes (checkpoints, the model)."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend != "none"

    @property
    def device(self) -> torch.device:
        """Where this process's collectives run (NCCL's on its GPU)."""
        if self.backend == "nccl":
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")


SINGLE = World()


def launched_by_torchrun() -> bool:
    return all(name in os.environ for name in TORCHRUN_ENV)


def join(device: str) -> World:
    """Join the process group torchrun described in the environment: gloo on the CPU, nccl on
    CUDA (this process then works on GPU ``LOCAL_RANK``). ``SINGLE`` when not started by
    torchrun. Joining twice returns the same world."""
    if not launched_by_torchrun():
        return SINGLE
    rank, size, local_rank = (int(os.environ[name]) for name in TORCHRUN_ENV)
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend)
    return World(rank, size, local_rank, backend)


def leave(world: World) -> None:
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()


def torchrun_command(processes: int, module: str, *args: str) -> list[str]:
    """The command starting ``processes`` copies of ``python -m module args`` under torchrun on
    this node (``--standalone``: its own rendezvous on a free port)."""
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    return [sys.executable, *launcher, "-m", module, *args]


def relaunch_under_torchrun(processes: int) -> None:
    """Replace this process by torchrun starting ``processes`` copies of this command on this
    node; returns only on failure."""
    os.execv(sys.executable, torchrun_command(processes, "zoomattn", *sys.argv[1:]))


def seed_dropout(world: World, seed: int) -> None:
    """After the model is built (the same initial weights everywhere), give every process but
    the first a dropout stream of its own; the first keeps the one-process stream."""
    if world.rank > 0:
        torch.manual_seed(seed * 1_000_003 + world.rank)


def broadcast_from_main(world: World, params: list[torch.Tensor]) -> None:
    """Start every process from the first one's trainable weights (as DDP does when it wraps a
    model): equal already when built from the same seed, but not left to chance."""
    if not world.distributed:
        return
    with torch.no_grad():
        for p in params:
            dist.broadcast(p.data, src=0)


CHUNK_BYTES = 256 << 20  # the most one gradient all-reduce moves (and the buffer it needs)


def sum_gradients(world: World, params: list[torch.Tensor], chunk_bytes: int = CHUNK_BYTES) -> None:
    """Sum every parameter's gradient over the processes: each process's gradient is its share of
    the global batch's (normalised by the global counts), so the sum is the whole batch's, not a
    mean. A parameter no process computed a gradient for keeps none (the optimiser skips it, as
    in one process); one that some computed gets zeros on the others. Gradients go in buckets of
    at most ``chunk_bytes`` (small ones flattened together, a big one in slices reduced in
    place), so the sum never holds a second copy of them all."""
    if not world.distributed or not params:
        return
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.int32, device=world.device)
    dist.all_reduce(has)
    reduced = [p for p, n in zip(params, has.tolist(), strict=True) if n]
    for p in reduced:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [p.grad.view(-1) for p in reduced]
    for bucket in gradient_buckets(grads, chunk_bytes):
        if len(bucket) == 1:
            i, lo, hi = bucket[0]
            dist.all_reduce(grads[i][lo:hi])  # a contiguous slice: reduced in place
            continue
        flat = torch.cat([grads[i][lo:hi] for i, lo, hi in bucket])
        dist.all_reduce(flat)
        offset = 0
        for i, lo, hi in bucket:
            grads[i][lo:hi].copy_(flat[offset : offset + hi - lo])
            offset += hi - lo


def gradient_buckets(grads: list[torch.Tensor], chunk_bytes: int) -> list[list[tuple]]:
    """The all-reduces of ``sum_gradients``: lists of (gradient index, from, to) slices of flat
    gradients, of one dtype and at most ``chunk_bytes`` together, in order, covering each
    gradient once."""
    buckets: list[list[tuple]] = []
    current, used, dtype = [], 0, None
    for i, g in enumerate(grads):
        step = max(1, chunk_bytes // g.element_size())
        for lo in range(0, g.numel(), step):
            hi = min(lo + step, g.numel())
            size = (hi - lo) * g.element_size()
            if current and (used + size > chunk_bytes or g.dtype != dtype):
                buckets.append(current)
                current, used = [], 0
            current.append((i, lo, hi))
            used, dtype = used + size, g.dtype
    if current:
        buckets.append(current)
    return buckets


def rng_state() -> dict:
    """This process's random streams (dropout draws from torch's, on a GPU from CUDA's)."""
    return {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if state.get("cuda") is not None:
        torch.cuda.set_rng_state_all(state["cuda"])


def gather_rng_states(world: World) -> list[dict] | None:
    """Every process's ``rng_state``, by rank, on the first process (None on the others)."""
    if not world.distributed:
        return [rng_state()]
    out: list = [None] * world.size if world.is_main else None
    dist.gather_object(rng_state(), out, dst=0)
    return out


def sum_over_ranks(world: World):
    """The ``StepBatch.sum_over_ranks`` of this world: each value summed over the processes."""

    def summed(values: list[float]) -> list[float]:
        if not world.distributed:
            return values
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=world.device)
        dist.all_reduce(t)
        return t.tolist()

    return summed


def devices(world: World, device: torch.device) -> list[str]:
    """Every process's model device, by rank."""
    if not world.distributed:
        return [str(device)]
    out: list = [None] * world.size
    dist.all_gather_object(out, str(device))
    return out


@contextlib.contextmanager
def main_first(world: World):
    """The first process runs the block before the others (it may delete a stale checkpoint
    they would otherwise read)."""
    if world.distributed and not world.is_main:
        dist.barrier()
    yield
    if world.distributed and world.is_main:
        dist.barrier()
