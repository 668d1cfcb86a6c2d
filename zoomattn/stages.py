"""One function per workflow stage: the single call a Snakemake rule makes.

Each takes the job's ``spec`` (exactly the config values the job depends on: the rule passes it as
a param, so changing any of them reruns the job) and its paths, runs inside an MLflow child run,
and writes its outputs atomically.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from zoomattn.io import read_json, write_json
from zoomattn.tracking import job_run

log = logging.getLogger("zoomattn")


def world(spec: dict, out: Path, results: Path) -> None:
    from zoomattn.data.build import build_world

    with job_run(spec, "data", "world", results) as run:
        manifest = build_world(spec, out)
        run.log_metrics({"vocab_size": manifest["vocab_size"]})
        run.log_artifacts(out / "manifest.json")


def train_data(spec: dict, world_dir: Path | None, out: Path, results: Path) -> None:
    from zoomattn.data.build import build_real_train, build_train

    if spec.get("study") == "rectification":
        return _rect_data(spec, world_dir, out, results)
    with job_run(spec, "data", "train", results) as run:
        if world_dir is None:
            manifest = build_real_train(spec, out)
        else:
            manifest = build_train(spec, world_dir, out)
        run.log_metrics({"examples": manifest["examples"]})
        run.log_artifacts(out / "manifest.json")


def eval_data(spec: dict, world_dir: Path | None, out: Path, results: Path) -> None:
    from zoomattn.data.build import build_eval, build_real_eval

    if spec.get("study") == "rectification":
        return _rect_data(spec, world_dir, out, results)
    name = f"{spec['benchmark']}@{spec['noise_ratio']:g}"
    with job_run(spec, "data", name, results) as run:
        if world_dir is None:
            manifest = build_real_eval(spec, spec["benchmark"], spec["noise_ratio"], out)
        else:
            manifest = build_eval(spec, world_dir, spec["benchmark"], spec["noise_ratio"], out)
        run.log_metrics({"examples": manifest["examples"]})
        run.log_artifacts(out / "manifest.json")


def _rect_data(spec: dict, world_dir: Path | None, out: Path, results: Path) -> None:
    """A training or eval set of the rectification study (data/build.py: build_distractor_set)."""
    from zoomattn.data.build import build_distractor_set

    name = f"{spec.get('benchmark', 'train')}@{spec['placement']}"
    with job_run(spec, "data", f"rectification/{name}", results) as run:
        manifest = build_distractor_set(spec, world_dir, out)
        run.log_metrics({"examples": manifest["examples"]})
        run.log_artifacts(out / "manifest.json")


def pretrain(
    spec: dict, world_dir: Path, out: Path, ckpt: Path, threads: int, results: Path
) -> None:
    from zoomattn.data.world import World
    from zoomattn.io import atomic_dir
    from zoomattn.modeling.loading import load_tokenizer
    from zoomattn.modeling.pretrain import pretrain as run_pretrain

    with job_run(spec, "pretrain", "base", results) as run, atomic_dir(out) as tmp:
        t0 = time.time()
        world_ = World.load(world_dir / "world.json")
        tok = load_tokenizer(world_dir / "tokenizer")
        metrics = run_pretrain(
            world_, tok, spec["base_model"], spec["pretrain"], tmp, ckpt, threads, run.log_metrics
        )
        write_json(tmp / "metrics.json", metrics)
        run.log_metrics({"wall_seconds": time.time() - t0})
        run.log_artifacts(tmp / "metrics.json")
    _clear(ckpt)


def base_model(spec: dict, out: Path, results: Path) -> None:
    """A hub or local base model: resolved, checked and recorded (modeling/hub.py)."""
    from zoomattn.io import atomic_dir
    from zoomattn.modeling.hub import prepare_base

    with job_run(spec, "pretrain", "base", results) as run, atomic_dir(out) as tmp:
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
) -> None:
    from zoomattn.io import atomic_dir
    from zoomattn.methods import METHODS
    from zoomattn.training.finetune import finetune as run_finetune

    with job_run(spec, "finetune", spec["run"], results) as run, atomic_dir(out) as tmp:
        t0 = time.time()
        xi_auto = read_json(margin)["xi_auto"] if margin else None
        values = METHODS[spec["method"]].resolve(
            spec["method_config"], spec["finetune"]["lora"], xi_auto=xi_auto
        )
        run.set_tags({f"method.{k}": str(v) for k, v in values.items()})
        spec = {**spec, "method_config": values}
        metrics = run_finetune(spec, data_dir, base_dir, tmp, ckpt, threads, run.log_metrics)
        write_json(tmp / "metrics.json", metrics)
        run.log_metrics({**metrics, "wall_seconds": time.time() - t0})
        run.log_artifacts(tmp, "adapter")
    _clear(ckpt)


def _load_model(spec: dict, model_dir: Path, base_dir: Path, threads: int):
    import torch

    from zoomattn.modeling.loading import load_for_eval, load_tokenizer

    torch.manual_seed(0)
    torch.set_num_threads(threads)
    return load_for_eval(model_dir, base_dir, spec["quantization"]), load_tokenizer(base_dir)


def evaluate(
    spec: dict,
    model_dir: Path,
    base_dir: Path,
    split_dir: Path,
    out: Path,
    predictions: Path,
    threads: int,
    results: Path,
) -> None:
    import json

    from zoomattn.data.build import load_split
    from zoomattn.evaluation.generate import evaluate_records

    name = f"{spec['model']}/{spec['benchmark']}@{spec['split']}"
    with job_run(spec, "evaluate", name, results) as run:
        model, tok = _load_model(spec, model_dir, base_dir, threads)
        ev = spec["evaluation"]
        records = load_split(split_dir)
        metrics, rows = evaluate_records(
            model, tok, records, spec["metric"], ev["batch_size"], ev["max_new_tokens"], desc=name
        )
        metrics.update(model=spec["model"], benchmark=spec["benchmark"], split=spec["split"])
        if "noise_ratio" in spec:
            metrics["noise_ratio"] = spec["noise_ratio"]
        if spec.get("answer_gap_examples"):  # the rectification paper's Fig. 3
            from zoomattn.evaluation.rectification import answer_gap

            metrics.update(placement=spec["placement"])
            metrics.update(answer_gap(model, tok, records[: spec["answer_gap_examples"]]))
        predictions.parent.mkdir(parents=True, exist_ok=True)
        predictions.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        write_json(out, metrics)
        flat = {
            "score": metrics["score"],
            "ci_low": metrics["ci_low"],
            "ci_high": metrics["ci_high"],
        }
        flat.update({f"{k}.score": v["score"] for k, v in metrics.get("subsets", {}).items()})
        if metrics.get("answer_gap") is not None:
            flat["answer_gap"] = metrics["answer_gap"]
        run.log_metrics(flat)
        run.log_artifacts(predictions, "predictions")
        run.log_artifacts(out)


def attention(
    spec: dict,
    model_dir: Path,
    base_dir: Path,
    split_dir: Path,
    out: Path,
    threads: int,
    results: Path,
) -> None:
    from zoomattn.data.build import load_split
    from zoomattn.evaluation.attention_share import golden_attention

    with job_run(spec, "attention", spec["model"], results) as run:
        model, tok = _load_model(spec, model_dir, base_dir, threads)
        records = load_split(split_dir)[: spec["attention_examples"]]
        summary = golden_attention(model, tok, records)
        summary["model"] = spec["model"]
        write_json(out, summary)
        run.log_metrics(
            {
                "mean_golden_share": summary["mean_golden_share"],
                "golden_is_top": summary["golden_is_top"],
            }
        )
        run.log_artifacts(out)


def report(
    spec: dict,
    eval_files: list[Path],
    attention_files: list[Path],
    base_metrics: Path,
    out: Path,
    results: Path,
) -> None:
    from zoomattn.io import atomic_dir
    from zoomattn.reporting.build import build_report

    with job_run(spec, "report", "opamp", results) as run, atomic_dir(out) as tmp:
        build_report(
            spec,
            [read_json(p) for p in eval_files],
            [read_json(p) for p in attention_files],
            read_json(base_metrics),
            tmp,
        )
        run.log_artifacts(tmp, "report")


def score_margin(
    spec: dict,
    model_dir: Path,
    base_dir: Path,
    split_dir: Path,
    out: Path,
    threads: int,
    results: Path,
) -> None:
    """The base model's pre-softmax score margins (Fig. 5) and the ξ that covers them."""
    from zoomattn.data.build import load_split
    from zoomattn.evaluation.rectification import score_margins

    with job_run(spec, "analysis", f"score_margin/{spec['model']}", results) as run:
        model, tok = _load_model(spec, model_dir, base_dir, threads)
        summary = score_margins(model, tok, load_split(split_dir)[: spec["examples"]])
        summary["model"] = spec["model"]
        write_json(out, summary)
        run.log_metrics({k: summary[k] for k in ("median", "p10", "p90", "xi_auto")})
        run.log_artifacts(out)


def rect_report(spec: dict, eval_files: list[Path], margin: Path, out: Path, results: Path) -> None:
    from zoomattn.io import atomic_dir
    from zoomattn.reporting.rectification import build_report

    with job_run(spec, "report", "rectification", results) as run, atomic_dir(out) as tmp:
        build_report(spec, [read_json(p) for p in eval_files], read_json(margin), tmp)
        run.log_artifacts(tmp, "report")


def _clear(ckpt: Path) -> None:
    from zoomattn.training.checkpoint import Checkpointer

    Checkpointer(ckpt, 0).clear()
