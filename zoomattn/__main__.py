"""Command line of the workflow's jobs: ``python -m zoomattn STAGE --spec JSON [paths]``.

Snakemake rules call this (see workflow/rules); ``mlflow-start``/``mlflow-end`` are used by the
Snakefile's onstart/onsuccess/onerror handlers.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from zoomattn.gpus import claim_for_spec

# bitsandbytes wraps its CPU 4-bit ops in torch.compile; compiling them costs ~6 s in every job
# process and changed no prediction in our runs (measured). Set TORCHDYNAMO_DISABLE=0 to compile.
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

# stage -> its path arguments (all but --spec, --results and --threads)
STAGES = {
    "world": ["out"],
    "train-data": ["out"],  # and --world-dir at the synthetic scale
    "eval-data": ["out"],
    "pretrain": ["world_dir", "out", "ckpt"],
    "base-model": ["out"],
    "finetune": ["data_dir", "base_dir", "out", "ckpt"],
    "evaluate": ["model_dir", "base_dir", "split_dir", "out", "predictions"],
    "attention": ["model_dir", "base_dir", "split_dir", "out"],
    "report": ["base_metrics", "out"],
    "score-margin": ["model_dir", "base_dir", "split_dir", "out"],
    "rect-report": ["margin", "out"],
    "retrieval-heads": ["model_dir", "base_dir", "split_dir", "out"],
    "head-patterns": ["model_dir", "base_dir", "split_dir", "out"],
    "head-masking": ["model_dir", "base_dir", "split_dir", "scores", "out"],
    "select-heads": ["scores", "out"],
    "mudaf-report": ["out"],
    "lkg-report": ["out"],
    "leaderboard-report": ["out"],
}
THREADED = {
    "pretrain",
    "finetune",
    "evaluate",
    "attention",
    "score-margin",
    "retrieval-heads",
    "head-masking",
    "head-patterns",
}


def main(argv: list[str] | None = None) -> None:
    """A job stage runs in the warm worker when the local run started one, else right here."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in STAGES:
        from zoomattn.worker import run_in_worker

        code = run_in_worker([sys.argv[0], *argv])
        if code is not None:
            sys.exit(code)
    run_stage(argv)


def run_stage(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="zoomattn")
    sub = parser.add_subparsers(dest="stage", required=True)
    for stage, paths in STAGES.items():
        p = sub.add_parser(stage)
        p.add_argument("--spec", required=True, help="the job's config values, as JSON")
        p.add_argument("--results", required=True, type=Path, help="results root (MLflow store)")
        for name in paths:
            p.add_argument(f"--{name.replace('_', '-')}", dest=name, required=True, type=Path)
        if stage in ("train-data", "eval-data"):
            p.add_argument("--world-dir", type=Path, help="the synthetic world (tiny, smoke)")
        if stage in THREADED:
            p.add_argument("--threads", type=int, default=1)
        if stage in ("report", "rect-report", "mudaf-report", "lkg-report", "leaderboard-report"):
            p.add_argument("--eval-files", nargs="+", type=Path, required=True)
        if stage == "mudaf-report":
            p.add_argument("--heads-files", nargs="+", type=Path, required=True)
            p.add_argument("--masking-files", nargs="*", type=Path, default=[])
            p.add_argument("--selection-files", nargs="*", type=Path, default=[])
        if stage == "lkg-report":
            p.add_argument("--patterns-files", nargs="*", type=Path, default=[])
            p.add_argument("--train-files", nargs="*", type=Path, default=[])
        if stage == "report":
            p.add_argument("--attention-files", nargs="+", type=Path, required=True)
        if stage == "leaderboard-report":
            for name in ("attention", "heads", "patterns"):
                p.add_argument(f"--{name}-files", nargs="*", type=Path, default=[])
        if stage == "finetune":
            p.add_argument("--margin", type=Path, help="the base's score margin (xi: auto)")
            p.add_argument("--heads", type=Path, help="the selected target heads (MuDAF)")
            p.add_argument("--patterns", type=Path, help="the base's head patterns (LKG-RALM)")
    sub.add_parser("worker").add_argument("--socket", required=True, help="unix socket to serve")
    p = sub.add_parser("regenerate", help="the cross-method report again, from the metric files")
    p.add_argument(
        "--config",
        nargs="+",
        type=Path,
        default=[Path("config.yaml")],
        help="config.yaml, then any --configfile overrides of the run, in order",
    )
    p.add_argument("--out", type=Path, required=True)
    for name in ("mlflow-start", "mlflow-end"):
        p = sub.add_parser(name)
        p.add_argument("--results", required=True, type=Path)
        p.add_argument("--preset")
        p.add_argument("--run-id")
        p.add_argument("--failed", action="store_true")
    args = vars(parser.parse_args(argv))
    stage = args.pop("stage")
    if stage == "worker":  # before logging is configured: its children configure their own
        from zoomattn.worker import serve

        serve(args["socket"])
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    from zoomattn import stages, tracking

    if stage == "mlflow-start":
        exp, run = tracking.start_parent(
            args["results"], args["preset"], json.load(sys.stdin), " ".join(sys.argv)
        )
        print(json.dumps({"experiment_id": exp, "run_id": run}))
        return
    if stage == "regenerate":
        stages.regenerate(args["config"], args["out"])
        return
    if stage == "mlflow-end":
        tracking.end_parent(args["results"], args["run_id"], ok=not args["failed"])
        return
    args["spec"] = json.loads(args["spec"])
    claim_for_spec(args["spec"])  # before the stage can initialise CUDA, which reads the cards once
    getattr(stages, stage.replace("-", "_"))(**args)


if __name__ == "__main__":
    main()
