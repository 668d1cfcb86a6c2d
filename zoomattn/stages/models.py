"""Model stages: the base model (pretrained here or prepared from the hub) and fine-tuning."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from zoomattn.io import read_json, write_json
from zoomattn.stages.common import attention_kernels, clear_checkpoints, tag_resumed_from
from zoomattn.tracking import job_run

log = logging.getLogger("zoomattn")


def pretrain(
    spec: dict, world_dir: Path, out: Path, ckpt: Path, threads: int, results: Path
) -> None:
    from zoomattn.data.world import World
    from zoomattn.io import atomic_dir
    from zoomattn.modeling.loading import load_tokenizer
    from zoomattn.modeling.pretrain import pretrain as run_pretrain
    from zoomattn.placement import Placement
    from zoomattn.training.checkpoint import job_identity

    with job_run(spec, "pretrain", "base", results) as run, atomic_dir(out) as tmp:
        t0 = time.time()
        world_ = World.load(world_dir / "world.json")
        tok = load_tokenizer(world_dir / "tokenizer")
        metrics = run_pretrain(
            world_,
            tok,
            spec["base_model"],
            spec["pretrain"],
            tmp,
            ckpt,
            threads,
            run.log_metrics,
            Placement.from_spec(spec.get("device")),
            identity=job_identity(spec, world_dir),
            on_start=tag_resumed_from(run),
        )
        write_json(tmp / "metrics.json", metrics)
        run.log_metrics({"wall_seconds": time.time() - t0})
        run.log_artifacts(tmp / "metrics.json")
    clear_checkpoints(ckpt)


def base_model(spec: dict, out: Path, results: Path) -> None:
    """A hub or local base model: resolved, checked and recorded (modeling/hub.py)."""
    from zoomattn.io import atomic_dir
    from zoomattn.modeling.hub import prepare_base

    with job_run(spec, "pretrain", out.name, results) as run, atomic_dir(out) as tmp:
        record = prepare_base(spec["base_model"], tmp)
        write_json(tmp / "metrics.json", {"source": record["source"]})
        run.set_tags(
            {"base.snapshot": record["snapshot"], "base.chat_family": record["chat_family"]}
        )
        run.log_artifacts(tmp / "base.json")


def finetune(
    spec: dict,
    data_dir: Path,
    base_dir: Path,
    out: Path,
    ckpt: Path,
    threads: int,
    results: Path,
    margin: Path | None = None,
    heads: Path | None = None,
    patterns: Path | None = None,
) -> None:
    """One grid cell. ``margin``: the base's score margin (rectification, xi: auto); ``heads``:
    the selected target heads (MuDAF); ``patterns``: the base's head patterns, whose middle-focused
    heads LKG-RALM fuses on; each logged with the run. The base's tokenizer is in the context too
    (LKG-RALM records the ids of the boundary tokens it adds)."""
    from zoomattn.io import atomic_dir
    from zoomattn.methods import METHODS
    from zoomattn.placement import Placement
    from zoomattn.training import distributed
    from zoomattn.training.finetune import finetune as run_finetune

    processes = spec["finetune"].get("processes", 1)
    if processes > 1 and not distributed.launched_by_torchrun():
        distributed.relaunch_under_torchrun(processes)  # this same command, in each process
    world = distributed.join(Placement.from_spec(spec.get("device")).device)
    method = METHODS[spec["method"]]
    if not world.is_main:  # the first process holds the MLflow run and writes the model
        values = _resolved(method, spec, base_dir, margin, heads, patterns)
        spec = {**spec, "method_config": values}
        with attention_kernels(spec):
            run_finetune(spec, method.make_config(values), data_dir, base_dir, out, ckpt, threads)
        distributed.leave(world)
        return
    with (
        job_run(spec, "finetune", spec["run"], results) as run,
        atomic_dir(out) as tmp,
        attention_kernels(spec, run),
    ):
        t0 = time.time()
        if heads:
            run.log_artifacts(heads, "selected_heads")
        if patterns:
            run.log_artifacts(patterns, "head_patterns")
        values = _resolved(method, spec, base_dir, margin, heads, patterns)
        cfg = method.make_config(values)  # the job's typed config, handed to every hook
        run.set_tags({f"method.{k}": str(v) for k, v in values.items()})
        # the resolved values (selected heads, xi_auto, ...) are part of the cell the trainer
        # receives, and so of the identity its checkpoints are made for
        spec = {**spec, "method_config": values}
        on_start = tag_resumed_from(run)
        metrics = run_finetune(
            spec,
            cfg,
            data_dir,
            base_dir,
            tmp,
            ckpt,
            threads,
            run.log_metrics,
            on_start,
            run.set_tags,
        )
        write_json(tmp / "metrics.json", metrics)
        run.log_metrics({**metrics, "wall_seconds": time.time() - t0})
        if method.tuning(cfg) == "full":  # the whole model: not copied again
            for name in ("method.json", "metrics.json"):
                run.log_artifacts(tmp / name, "model")
        else:
            run.log_artifacts(tmp, "adapter")
    clear_checkpoints(ckpt)
    distributed.leave(world)


def _resolved(method, spec: dict, base_dir: Path, margin, heads, patterns) -> dict:
    """The method values a cell is built and saved with (``Method.resolve``), from the base's
    tokenizer and what the workflow measured on the base."""
    from zoomattn.methods import ResolveContext
    from zoomattn.modeling.loading import load_tokenizer

    context = ResolveContext(
        tokenizer=load_tokenizer(base_dir),
        xi_auto=read_json(margin)["xi_auto"] if margin else None,
        selected_heads=read_json(heads)["selected"] if heads else None,
        middle_heads=read_json(patterns)["middle_heads"] if patterns else None,
    )
    return method.resolve(spec["method_config"], spec["finetune"]["lora"], context)


def select_heads(spec: dict, scores: Path, out: Path, results: Path) -> None:
    """MuDAF's target heads for one cell, drawn from the base model's retrieval-head scores."""
    from zoomattn.methods import METHODS
    from zoomattn.methods.mudaf.selection import select_heads as choose

    cfg = METHODS["mudaf"].make_config(spec["method_config"])
    with job_run(spec, "analysis", f"selected_heads/{spec['model']}", results) as run:
        f1 = read_json(scores)["f1"]
        opts = {"selection": cfg.selection, "temperature": cfg.temperature}
        opts["weak_below"] = cfg.weak_below
        selected = choose(f1, cfg.heads, seed=spec["seed"], **opts)
        write_json(
            out,
            {
                "model": spec["model"],
                "scores_of": str(scores),
                "heads": cfg.heads,
                **opts,
                "selected": selected,
                "scores": [f1[layer][head] for layer, head in selected],
            },
        )
        run.set_tags({"mudaf.selected": " ".join(f"{a}-{b}" for a, b in selected)})
        run.log_metrics({"selected": len(selected)})
        run.log_artifacts(out)
