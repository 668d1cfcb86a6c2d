"""Sharded full fine-tuning over several processes: ZeRO stage 2 as the step sees it, our own.

Every process holds the whole model (in the compute dtype) and runs the method's objective on its
micro-batches as in data-parallel fine-tuning (``distributed.py``); the optimiser is what is
sharded. The trainable weights are laid end to end in one flat vector (in ``model.parameters()``
order) cut into ``world_size`` equal shards; process r keeps shard r only of the fp32 master
weights, of the summed gradient and of AdamW's two moments. A step, after the objective's last
backward pass:

1. reduce-scatter: the processes' gradients are summed (not averaged: each is its share of the
   global batch's gradient) and each process receives its shard of the sum, in float32;
2. clip on the global norm (the shards' squared norms summed over the processes);
3. AdamW on the master shard;
4. all-gather: every process copies the updated master shards into its model's weights.

Both collectives go in chunks of at most ``CHUNK_BYTES`` per call, so communication never holds
a second copy of a full model's gradients or weights. The collectives come once per step, after
the objective, so the number of forward and backward passes may differ between processes (the
reason this is not FSDP: docs/distributed.md). The design is ZeRO's (Rajbhandari et al. 2020,
"ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", stage 2: optimizer state
and gradients partitioned) as DeepSpeed runs it with bf16 weights and fp32 master weights; the
code is ours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from zoomattn.training.distributed import World

CHUNK_BYTES = 256 << 20  # the most one collective moves per process (the buffer it needs)


@dataclass(frozen=True)
class Layout:
    """The trainable weights end to end (``sizes``: each one's element count) cut into
    ``world_size`` shards of ``shard`` elements (the last padded)."""

    sizes: tuple[int, ...]
    world_size: int

    @property
    def total(self) -> int:
        return sum(self.sizes)

    @property
    def shard(self) -> int:
        return max(1, math.ceil(self.total / self.world_size))

    def pieces(self, start: int, stop: int) -> list[tuple[int, int, int, int]]:
        """The parts of weights in the flat range [start, stop): (weight index, from, to within
        the weight, offset in the range); the padding past the last weight is in none."""
        out, offset = [], 0
        for i, size in enumerate(self.sizes):
            lo, hi = max(start, offset), min(stop, offset + size)
            if lo < hi:
                out.append((i, lo - offset, hi - offset, lo - start))
            offset += size
            if offset >= stop:
                break
        return out

    def chunks(self, bytes_per_element: int) -> list[range]:
        """Ranges within a shard such that one chunk of every shard together (a collective's
        buffer) holds at most ``CHUNK_BYTES``."""
        step = max(1, CHUNK_BYTES // (bytes_per_element * self.world_size))
        return [range(lo, min(lo + step, self.shard)) for lo in range(0, self.shard, step)]


def read_flat(tensors: list[torch.Tensor], layout: Layout, start: int, into: torch.Tensor) -> None:
    """Copy the flat range [start, start + len(into)) of ``tensors`` into ``into`` (zeros where a
    tensor is None and in the padding)."""
    into.zero_()
    for i, lo, hi, at in layout.pieces(start, start + into.numel()):
        if tensors[i] is not None:
            into[at : at + hi - lo].copy_(tensors[i].reshape(-1)[lo:hi])


def write_flat(tensors: list[torch.Tensor], layout: Layout, start: int, src: torch.Tensor) -> None:
    """Copy ``src`` into the flat range [start, start + len(src)) of ``tensors``."""
    for i, lo, hi, at in layout.pieces(start, start + src.numel()):
        tensors[i].view(-1)[lo:hi].copy_(src[at : at + hi - lo])


class ShardedAdamW:
    """AdamW (no weight decay, as ``finetune.make_optimizer``) over the weights of ``named``,
    its fp32 master weights, gradient and moments sharded over the processes of ``world``.

    Built from the weights as they are (fp32, equal on every process); the model's weights are
    then cast to ``compute_dtype`` (bf16 on CUDA: 2 bytes a weight and 2 a gradient instead of
    4 + 4; the fp32 master keeps the steps too small for bf16)."""

    def __init__(self, world: World, named: list, lr: float, compute_dtype: torch.dtype):
        self.world = world
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.layout = Layout(tuple(p.numel() for p in self.params), world.size)
        device = self.params[0].device
        start = world.rank * self.layout.shard
        self.master = torch.zeros(self.layout.shard, dtype=torch.float32, device=device)
        read_flat([p.detach() for p in self.params], self.layout, start, self.master)
        self.master = torch.nn.Parameter(self.master)
        self.inner = torch.optim.AdamW([self.master], lr=lr, weight_decay=0.0)
        with torch.no_grad():
            for p in self.params:
                p.data = p.data.to(compute_dtype)

    # --- one step ---------------------------------------------------------------------------

    def step(self, max_grad_norm: float, lr: float) -> None:
        """Sum and scatter the gradients, clip them on the global norm, step, gather the
        weights; the model's gradients are freed."""
        self.reduce_gradients()
        self._clip(max_grad_norm)
        self.inner.param_groups[0]["lr"] = lr
        self.inner.step()
        self.master.grad = None
        self._gather_weights(self.params[0].dtype)

    def reduce_gradients(self) -> None:
        """The master shard's gradient := this process's shard of the sum of every process's
        gradient (in fp32); the model's gradients are freed."""
        self.master.grad = self._reduce_scatter()
        for p in self.params:
            p.grad = None

    def _reduce_scatter(self) -> torch.Tensor:
        self._check_every_weight_has_a_gradient()
        grads = [p.grad for p in self.params]
        shard = torch.empty_like(self.master)
        n, size = self.world.size, self.layout.shard
        for chunk in self.layout.chunks(4):
            buffer = torch.empty(n * len(chunk), dtype=torch.float32, device=shard.device)
            for r in range(n):
                read_flat(
                    grads,
                    self.layout,
                    r * size + chunk.start,
                    buffer[r * len(chunk) :][: len(chunk)],
                )
            out = shard[chunk.start : chunk.stop]
            if self.world.distributed:
                dist.reduce_scatter_tensor(out, buffer)
            else:
                out.copy_(buffer)
        return shard

    def _check_every_weight_has_a_gradient(self) -> None:
        """One process's AdamW skips a weight without gradient; a flat shard cannot, so a step
        that leaves a trainable weight without gradient on every process is an error."""
        has = torch.tensor([p.grad is not None for p in self.params], dtype=torch.int32)
        if self.world.distributed:
            has = has.to(self.world.device)
            dist.all_reduce(has)
        missing = [name for name, n in zip(self.names, has.tolist(), strict=True) if not n]
        if missing:
            raise RuntimeError(
                f"sharded full fine-tuning: no process computed a gradient for {missing[:3]} "
                "this step; every trained weight must get one"
            )

    def _clip(self, max_norm: float) -> None:
        """As ``torch.nn.utils.clip_grad_norm_``: scale by max_norm / (norm + 1e-6), at most 1."""
        squares = self.master.grad.pow(2).sum()
        if self.world.distributed:
            dist.all_reduce(squares)
        coef = torch.clamp(max_norm / (squares.sqrt() + 1e-6), max=1.0)
        self.master.grad.mul_(coef)

    def _gather_weights(self, dtype: torch.dtype) -> None:
        """Every process's model weights := the master shards (cast to ``dtype``)."""
        n, size = self.world.size, self.layout.shard
        targets = [p.data for p in self.params]
        for chunk in self.layout.chunks(torch.finfo(dtype).bits // 8):
            part = self.master.detach()[chunk.start : chunk.stop].to(dtype)
            buffer = self._all_gather(part)
            for r in range(n):
                flat = buffer[r * len(chunk) :][: len(chunk)]
                end = min(len(chunk), self.layout.total - (r * size + chunk.start))
                if end > 0:
                    write_flat(targets, self.layout, r * size + chunk.start, flat[:end])

    def _all_gather(self, part: torch.Tensor) -> torch.Tensor:
        if not self.world.distributed:
            return part
        buffer = torch.empty(self.world.size * part.numel(), dtype=part.dtype, device=part.device)
        dist.all_gather_into_tensor(buffer, part.contiguous())
        return buffer

    def gather_full(self, shard: torch.Tensor) -> torch.Tensor | None:
        """The whole flat vector of a per-process fp32 shard, on the CPU of the first process
        (None on the others); gathered chunk by chunk."""
        full = torch.empty(self.world.size * self.layout.shard) if self.world.is_main else None
        n, size = self.world.size, self.layout.shard
        for chunk in self.layout.chunks(4):
            buffer = self._all_gather(shard[chunk.start : chunk.stop].detach())
            if full is not None:
                buffer = buffer.cpu()
                for r in range(n):
                    full[r * size + chunk.start :][: len(chunk)] = buffer[r * len(chunk) :][
                        : len(chunk)
                    ]
        return None if full is None else full[: self.layout.total]

    # --- checkpoints and the final model -----------------------------------------------------

    def consolidated(self) -> tuple[dict, dict] | None:
        """(the fp32 weights by name, the optimiser state as whole flat vectors) on the CPU of
        the first process, None on the others: a collective every process calls."""
        moments = self.inner.state.get(self.master, {})
        weights = self.gather_full(self.master)
        full = {k: self.gather_full(moments[k]) for k in ("exp_avg", "exp_avg_sq") if k in moments}
        if not self.world.is_main:
            return None
        unflat = {}
        offset = 0
        for name, p in zip(self.names, self.params, strict=True):
            unflat[name] = weights[offset : offset + p.numel()].view(p.shape).clone()
            offset += p.numel()
        state = {
            "sharded_adamw": {"world_size": self.world.size, "total": self.layout.total},
            "step": moments["step"].clone() if "step" in moments else None,
            **full,
        }
        return unflat, state

    def load(self, weights: dict, state: dict) -> None:
        """Restore from ``consolidated``'s output (every process reads the same checkpoint and
        takes its own shard); no collective."""
        made = state.get("sharded_adamw")
        if made != {"world_size": self.world.size, "total": self.layout.total}:
            raise RuntimeError(
                f"checkpoint optimiser state made for {made}, this run shards "
                f"{self.layout.total} weights over {self.world.size} processes"
            )
        start = self.world.rank * self.layout.shard
        fp32 = [weights[name].float() for name in self.names]
        with torch.no_grad():
            for p, w in zip(self.params, fp32, strict=True):
                p.copy_(w)
            read_flat(fp32, self.layout, start, self.master.data)
        if state["step"] is None:
            return
        own = torch.zeros_like(self.master)
        self.inner.state[self.master] = {"step": state["step"].clone()}
        for key in ("exp_avg", "exp_avg_sq"):
            read_flat([state[key]], Layout((self.layout.total,), self.world.size), start, own)
            self.inner.state[self.master][key] = own.clone()

    def write_master_weights(self) -> None:
        """The model's weights := the fp32 master weights, in fp32 (a collective): saved as one
        process saves a full fine-tune. The optimiser state is dropped."""
        self.inner.state.clear()
        for p in self.params:
            p.data = p.data.float()
        self._gather_weights(torch.float32)
