"""Fine-tuning one grid cell: answer-only loss, seeded batches, resumable checkpoints.

Every step is the method's objective's ``step`` (``zoomattn.methods.protocol.Objective``): the
answer loss alone (``answer_loss.AnswerLoss``) unless the method has a training step of its own
(MuDAF's contrastive term, LKG-RALM's estimator losses), accumulated over micro-batches and drawn
from (seed, step). A method that adds tokens to the tokenizer (``Method.prepare_tokenizer``) gets
that tokenizer saved with the model. Under torchrun (``finetune.processes`` > 1) each process
trains its share of every batch and the gradients are summed (``distributed.py``,
docs/distributed.md); a method that trains the whole model shards its optimiser over the
processes (``sharding.py``).
"""

from __future__ import annotations

import logging
import math
import random
from pathlib import Path

import torch
from tqdm import tqdm

from zoomattn.data.build import load_split
from zoomattn.methods import METHODS, StepBatch
from zoomattn.methods.loading import build_trainable
from zoomattn.modeling.loading import (
    MERGED_DIR,
    enable_activation_checkpointing,
    export_merged,
    is_full,
    load_tokenizer,
    save_finetuned,
)
from zoomattn.placement import Placement
from zoomattn.training import distributed
from zoomattn.training.answer_loss import AnswerLoss
from zoomattn.training.checkpoint import Checkpointer, job_identity
from zoomattn.training.overlong import fit_examples
from zoomattn.training.sharding import ShardedAdamW

log = logging.getLogger(__name__)


def make_optimizer(name: str, params, lr: float):
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    import bitsandbytes as bnb

    cls = {
        "paged_adamw_32bit": bnb.optim.PagedAdamW32bit,
        "paged_adamw_8bit": bnb.optim.PagedAdamW8bit,
    }[name]
    return cls(params, lr=lr, weight_decay=0.0)


SCHEDULES = ("constant", "cosine")
DEFAULTS = {"lr_schedule": "constant", "max_grad_norm": 1.0, "overlong": "drop"}  # the schema's


def lr_factor(step: int, total: int, warmup_ratio: float, schedule: str = "constant") -> float:
    """The learning rate of a step over the peak: a linear warm-up over warmup_ratio of the
    steps, then constant (OpAmp App. A) or a cosine decay.

    The cosine is transformers' ``get_cosine_schedule_with_warmup`` after the warm-up: at step s,
    0.5·(1 + cos(π·(s − w)/(total − w))), which reaches 0 at step ``total`` (one past the last).
    The warm-up is ours, shared by both: (s + 1)/w, so the first step does not run at 0 as
    transformers' s/w does; w is round(total·ratio), at least 1 (transformers: the ceiling).
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"finetune.lr_schedule: one of {', '.join(SCHEDULES)}, got {schedule!r}")
    warmup = max(1, round(total * warmup_ratio))
    if step < warmup or schedule == "constant":
        return min(1.0, (step + 1) / warmup)
    progress = (step - warmup) / max(1, total - warmup)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def batch_indices(
    lengths: list[int], batch_size: int, seed: int, step: int, pool: int = 8
) -> list[int]:
    """Indices of the batch at a step: a pure function of (seed, step), so resume is exact.

    Each epoch is a seeded shuffle; within pools of ``pool`` batches examples are sorted by length
    so that a batch pads little, and the batches are shuffled again.
    """
    per_epoch = max(1, len(lengths) // batch_size)
    epoch, k = divmod(step, per_epoch)
    rng = random.Random(seed * 7919 + epoch)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    order = order[: per_epoch * batch_size]
    batches = []
    for i in range(0, len(order), pool * batch_size):
        chunk = sorted(order[i : i + pool * batch_size], key=lambda j: lengths[j])
        batches += [chunk[b : b + batch_size] for b in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches[k]


def micro_batch_size(ft: dict, processes: int) -> int:
    """Examples per forward: ``micro_batch_size`` (default the batch, or its share of it on each
    of several processes), which must split the global batch evenly over the processes."""
    micro = ft.get("micro_batch_size") or ft["batch_size"] // processes
    if processes > 1 and (micro == 0 or ft["batch_size"] % (micro * processes)):
        raise ValueError(
            f"finetune.batch_size {ft['batch_size']} is not a whole number of micro-batches of "
            f"{micro} (finetune.micro_batch_size) for each of {processes} processes "
            "(finetune.processes)"
        )
    return micro


def finetune(
    cell: dict,
    method_cfg,
    data_dir: Path,
    base_dir: Path,
    out_dir: Path,
    ckpt_dir: Path,
    threads: int,
    on_metrics=lambda metrics, step: None,
    on_start=lambda resumed_from_step: None,
    on_tags=lambda tags: None,
) -> dict:
    """Train one cell. ``method_cfg`` is the method's typed config, made from the cell's (resolved)
    ``method_config``, which is what the model is saved with. A checkpoint is resumed only when
    made for the same cell (every value of it, the resolved method values and the code hash
    included) on the same data and base; a resumed run first sends ``on_metrics`` the metrics
    logged before the interruption again. ``on_start`` gets the step training resumes from (0:
    from scratch). Started by torchrun (``finetune.processes`` > 1), this process trains its
    share of every batch (``distributed.py``) and only the first one reports (``on_metrics``,
    ``on_start``, ``on_tags``: the world size, engine and every process's device) and writes
    (checkpoints, the model); ``threads`` are shared among the processes."""
    ft = {**DEFAULTS, **cell["finetune"]}
    placement = Placement.from_spec(cell.get("device"))
    world = distributed.join(placement.device)
    if world.size != ft.get("processes", 1):
        raise ValueError(
            f"finetune.processes is {ft.get('processes', 1)} but this job runs {world.size} "
            "process(es): `python -m zoomattn finetune` starts torchrun for it"
        )
    micro = micro_batch_size(ft, world.size)
    if not world.is_main:  # the first process reports for all
        on_metrics, on_start, on_tags = (lambda *args: None,) * 3
    torch.manual_seed(cell["seed"])
    random.seed(cell["seed"])
    torch.set_num_threads(max(1, threads // world.size))
    tok = load_tokenizer(base_dir)
    method = METHODS[cell["method"]]
    if not isinstance(method_cfg, method.config_cls):
        raise TypeError(f"method_cfg: a {method.config_cls.__name__}, got {method_cfg!r}")
    own_tokenizer = method.prepare_tokenizer(tok, method_cfg)  # saved with the model
    records, encoded, dropped = fit_examples(
        tok, load_split(data_dir), ft.get("max_length"), ft["overlong"]
    )
    if not encoded:
        raise ValueError(f"{data_dir}: no training example fits finetune.max_length")
    lengths = [len(e["input_ids"]) for e in encoded]
    objective = method.objective(method_cfg) or AnswerLoss()
    model = build_trainable(
        base_dir, cell["method"], method_cfg, ft["lora"], ft["quantization"], placement
    )
    if ft.get("gradient_checkpointing"):
        enable_activation_checkpointing(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    n_trainable = sum(p.numel() for p in trainable)
    distributed.broadcast_from_main(world, trainable)
    distributed.seed_dropout(world, cell["seed"])
    sharded = world.distributed and is_full(model)  # a whole model's optimiser: sharded
    on_tags(world_tags(world, model.device, sharded))
    if sharded:
        optimizer = sharded_optimizer(ft, world, model, placement.torch_dtype())
    else:
        optimizer = make_optimizer(ft["optimizer"], trainable, ft["lr"])
    identity = job_identity(cell, data_dir, base_dir)
    ckpt = Checkpointer(ckpt_dir, ft["checkpoint_every"], identity, world)
    with distributed.main_first(world):  # the first may discard a stale checkpoint
        step, extra, history = ckpt.resume(model, optimizer, on_metrics, on_start)
    if step:
        log.info("resumed %s from step %d", cell["run"], step)
    window: list[dict[str, float]] = extra.get("window", [])  # steps since the last log
    model.train()
    bar = tqdm(
        total=ft["steps"],
        initial=step,
        desc=f"finetune {cell['run']}",
        mininterval=5,
        disable=not world.is_main,
    )
    while step < ft["steps"]:
        idx = batch_indices(lengths, ft["batch_size"], cell["seed"], step)
        batch = StepBatch(
            records=[records[i] for i in idx],
            examples=[encoded[i] for i in idx],
            pad_id=tok.pad_token_id,
            micro_batch_size=micro,
            seed=cell["seed"],
            step=step,
            rank=world.rank,
            world_size=world.size,
            sum_over_ranks=distributed.sum_over_ranks(world),
        )
        metrics = objective.step(model, tok, batch)
        lr = ft["lr"] * lr_factor(step, ft["steps"], ft["warmup_ratio"], ft["lr_schedule"])
        if sharded:  # summed and scattered, clipped on the global norm, stepped, gathered
            optimizer.step(ft["max_grad_norm"], lr)
        else:
            distributed.sum_gradients(world, trainable)
            torch.nn.utils.clip_grad_norm_(trainable, ft["max_grad_norm"])
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        step += 1
        window.append(metrics)
        bar.update(1)
        if step % ft["log_every"] == 0:
            history({k: sum(m[k] for m in window) / len(window) for k in metrics}, step)
            window = []
            bar.set_postfix(loss=f"{metrics['train_loss']:.3f}")
        if ckpt.due(step):
            ckpt.save(step, model, optimizer, {"metrics": history.by_step, "window": window})
    bar.close()
    if sharded:  # the fp32 master weights into the model, saved as one process saves them
        optimizer.write_master_weights()
    result = {"steps": step, "trainable_params": n_trainable, "dropped_too_long": dropped}
    if not world.is_main:
        return result
    save_finetuned(model, out_dir, cell["method"], cell["method_config"])
    if own_tokenizer:
        tok.save_pretrained(out_dir)
    if ft.get("export_merged") and not is_full(model):  # a fully tuned model is already plain
        model.eval()
        export_merged(
            model, base_dir, out_dir / MERGED_DIR, cell["method"], cell["method_config"], placement
        )
        if own_tokenizer:
            tok.save_pretrained(out_dir / MERGED_DIR)
    return result


def sharded_optimizer(ft: dict, world: distributed.World, model, compute_dtype) -> ShardedAdamW:
    """The optimiser of a full fine-tune over several processes (``sharding.py``): AdamW with
    its fp32 master weights and state sharded; the model computes in ``compute_dtype``."""
    if ft["optimizer"] != "adamw":
        raise ValueError(
            f"finetune.optimizer {ft['optimizer']!r}: a full fine-tune over several processes "
            "(finetune.processes > 1) shards its own AdamW (fp32 states); set it to adamw"
        )
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return ShardedAdamW(world, named, ft["lr"], compute_dtype)


def world_tags(world: distributed.World, device, sharded: bool = False) -> dict[str, str]:
    """What a run records of its processes: how many, the launcher (and the sharding of a full
    fine-tune), each one's device."""
    engine = distributed.ENGINE + (" + sharded AdamW (ZeRO-2)" if sharded else "")
    return {
        "distributed.world_size": str(world.size),
        "distributed.engine": engine if world.distributed else "single process",
        "distributed.backend": world.backend,
        "distributed.devices": " ".join(distributed.devices(world, device)),
    }
