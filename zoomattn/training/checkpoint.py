"""Resumable training state: trainable weights, optimizer, RNG and step, written atomically.

Batches are a pure function of (seed, step), so restoring this state and continuing gives the same
weights as a run that was never interrupted. A checkpoint belongs to one job identity (the job's
spec, code hash included, and the content of its inputs): a state made by another job (a changed
learning rate, a code edit, rebuilt data) is discarded, never continued into a hybrid.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
from collections.abc import Callable
from pathlib import Path

import torch

from zoomattn.training import distributed
from zoomattn.training.distributed import SINGLE, World
from zoomattn.training.sharding import ShardedAdamW

log = logging.getLogger(__name__)

# Inputs are hashed by content up to this size, bigger files by their size alone. A job's input
# directories are data splits (manifest.json holds the sha256 of the records) and model
# directories (config.json, metrics.json of a pretrained base, base.json naming a hub snapshot,
# tokenizer files): their small files identify the big ones (arrow tables, safetensors weights).
# Reading gigabytes of weights at every job start to find a checkpoint stale would cost minutes.
CONTENT_HASHED_BYTES = 1 << 20


def input_fingerprint(path: str | Path) -> list[list[str]]:
    """[relative name, sha256 of the content or "size N"] of a file or of every file of a
    directory, sorted; hidden files (Snakemake's .snakemake_timestamp) are left out."""
    path = Path(path)
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
    else:
        raise FileNotFoundError(f"{path}: a job input to fingerprint does not exist")
    out = []
    for f in files:
        name = f.relative_to(path).as_posix() if f != path else f.name
        if any(part.startswith(".") for part in Path(name).parts):
            continue
        size = f.stat().st_size
        digest = (
            hashlib.sha256(f.read_bytes()).hexdigest()
            if size <= CONTENT_HASHED_BYTES
            else f"size {size}"
        )
        out.append([name, digest])
    return out


def job_identity(spec: dict, *inputs: str | Path) -> str:
    """sha256 of the spec (sorted JSON: the config values and the code hash) and the inputs."""
    h = hashlib.sha256(json.dumps(spec, sort_keys=True).encode())
    for path in inputs:
        h.update(json.dumps(input_fingerprint(path)).encode())
    return h.hexdigest()


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


class Checkpointer:
    def __init__(self, directory: str | Path, every: int, identity: str, world: World = SINGLE):
        """Of several processes (``world``) only the first writes and discards checkpoints;
        every one takes part in saving (its random streams, its optimiser shard) and restores."""
        self.path = Path(directory) / "state.pt"
        self.every = every
        self.identity = identity
        self.world = world
        self.writer = world.is_main

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def save(self, step: int, model: torch.nn.Module, optimizer, extra: dict | None = None) -> None:
        """Write the state of ``step``; under several processes a collective every one calls."""
        ranks_rng = distributed.gather_rng_states(self.world) if self.world.distributed else None
        if isinstance(optimizer, ShardedAdamW):
            weights, optimizer_state = optimizer.consolidated() or (None, None)
        elif self.writer:
            weights, optimizer_state = trainable_state(model), optimizer.state_dict()
        if not self.writer:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "identity": self.identity,
            "step": step,
            "weights": weights,
            "optimizer": optimizer_state,
            "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "extra": extra or {},
        }
        if ranks_rng:
            state["ranks_rng"] = ranks_rng  # every process's dropout streams, by rank
        tmp = self.path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.path)

    def restore(self, model: torch.nn.Module, optimizer) -> tuple[int, dict]:
        """Load the last state into model and optimizer (a sharded optimiser takes its shard),
        and this process's random streams; (0, {}) when there is none or when it was made for
        another job identity (then it is deleted)."""
        if not self.path.exists():
            return 0, {}
        sharded = isinstance(optimizer, ShardedAdamW)
        # a sharded state is a whole model's: mapped, each process reads only what it takes
        state = torch.load(self.path, weights_only=False, mmap=sharded)
        if state.get("identity") != self.identity:
            self._discard(state)
            return 0, {}
        params = dict(model.named_parameters())
        missing = set(state["weights"]) - set(params)
        if missing:
            raise RuntimeError(
                f"{self.path}: checkpoint names unknown parameters {sorted(missing)[:3]}"
            )
        if sharded:
            optimizer.load(state["weights"], state["optimizer"])
        else:
            with torch.no_grad():
                for name, value in state["weights"].items():
                    params[name].copy_(value)
            optimizer.load_state_dict(state["optimizer"])
        self._restore_rng(state)
        return state["step"], state["extra"]

    def _restore_rng(self, state: dict) -> None:
        ranks_rng = state.get("ranks_rng")
        if ranks_rng is None:  # one process wrote it
            ranks_rng = [{"torch": state["torch_rng"], "python": state["python_rng"]}]
            ranks_rng[0]["cuda"] = state.get("cuda_rng")
        if len(ranks_rng) != self.world.size:
            raise RuntimeError(
                f"{self.path}: random streams of {len(ranks_rng)} process(es), this run has "
                f"{self.world.size}"
            )
        distributed.set_rng_state(ranks_rng[self.world.rank])

    def resume(self, model, optimizer, on_metrics, on_start) -> tuple[int, dict, MetricHistory]:
        """``restore``, then tell ``on_start`` the step training goes on from (0: from scratch)
        and send ``on_metrics`` again what was logged before it; returns (step, the checkpoint's
        extra, the history that logs the steps to come)."""
        step, extra = self.restore(model, optimizer)
        on_start(step)
        history = MetricHistory(on_metrics)
        history.replay(extra.get("metrics", {}))
        return step, extra, history

    def _discard(self, state: dict) -> None:
        made_for = state.get("identity")
        why = (
            f"identity {made_for[:12]}, this job's is {self.identity[:12]}"
            if made_for
            else "it records none: an older checkpoint format"
        )
        log.warning(
            "discarding checkpoint %s of step %d made for another job identity (%s): "
            "training starts from step 0",
            self.path,
            state.get("step", 0),
            why,
        )
        if self.writer:
            self.path.unlink()


class MetricHistory:
    """The metrics a run sent to ``on_metrics``, by step. Kept in the checkpoint and sent again
    on resume, so that a resumed MLflow run holds the whole history from step 1."""

    def __init__(self, on_metrics: Callable[[dict, int], None]):
        self.on_metrics = on_metrics
        self.by_step: dict[int, dict] = {}

    def __call__(self, metrics: dict, step: int) -> None:
        self.by_step.setdefault(step, {}).update(metrics)
        self.on_metrics(metrics, step)

    def replay(self, by_step: dict[int, dict]) -> None:
        for step, metrics in sorted(by_step.items()):
            self(metrics, step)
