"""MLflow: one experiment per preset, a parent run per snakemake invocation, a child run per job.

The store (default ``sqlite:///<results>/mlflow.db``; ``MLFLOW_TRACKING_URI`` overrides) and the
experiment are created once, before jobs fan out (FACTS.md: creating either from many processes at
once loses runs). The parent run id and experiment id reach the jobs through the environment.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from zoomattn.placement import Placement

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

ENV_EXPERIMENT = "ZOOMATTN_MLFLOW_EXPERIMENT_ID"
ENV_PARENT = "ZOOMATTN_MLFLOW_PARENT_RUN_ID"
ENV_CONFIG_HASH = "ZOOMATTN_CONFIG_HASH"
PACKAGES = [
    "torch",
    "transformers",
    "peft",
    "bitsandbytes",
    "mlflow",
    "datasets",
    "tokenizers",
    "snakemake",
    "numpy",
]
ROOT = Path(__file__).resolve().parent.parent
SYSTEM_METRICS_SECONDS = 5  # GPU jobs' sampling interval of MLflow's system metrics


def tracking_uri(results: str | Path) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(results).resolve()}/mlflow.db"


def experiment_name(preset: str) -> str:
    return f"zoomattn-{preset}"


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return out + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = "absent"
    return out


def flatten(d: dict, prefix: str = "") -> dict[str, str]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = str(v)
    return out


def init_store(results: str | Path, preset: str) -> str:
    """Create the store and the preset's experiment if needed; return the experiment id."""
    import mlflow

    Path(results).mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(tracking_uri(results))
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name(experiment_name(preset))
    if exp is not None:
        return exp.experiment_id
    if tracking_uri(results).startswith(("http://", "https://")):
        return client.create_experiment(experiment_name(preset))  # the server's artifact store
    artifacts = (Path(results).resolve() / "mlartifacts" / preset).as_uri()
    return client.create_experiment(experiment_name(preset), artifact_location=artifacts)


def start_parent(results, preset: str, config: dict, command: str) -> tuple[str, str]:
    """The invocation's parent run; returns (experiment id, run id)."""
    import mlflow

    exp_id = init_store(results, preset)
    client = mlflow.MlflowClient()
    run = client.create_run(
        exp_id,
        run_name=f"snakemake {preset}",
        tags={
            "zoomattn.kind": "invocation",
            "zoomattn.preset": preset,
            "zoomattn.command": command,
            "zoomattn.git_commit": git_commit(),
            "zoomattn.config_hash": os.environ.get(ENV_CONFIG_HASH, ""),
        },
    )
    client.log_dict(run.info.run_id, config, "config.effective.json")
    return exp_id, run.info.run_id


def end_parent(results, run_id: str, ok: bool) -> None:
    import mlflow

    mlflow.set_tracking_uri(tracking_uri(results))
    mlflow.MlflowClient().set_terminated(run_id, "FINISHED" if ok else "FAILED")


class JobRun:
    def __init__(self, mlflow_module):
        self._mlflow = mlflow_module

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        clean = {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)}
        self._mlflow.log_metrics(clean, step=step)

    def set_tags(self, tags: dict) -> None:
        self._mlflow.set_tags(tags)

    def log_artifacts(self, path: str | Path, name: str | None = None) -> None:
        path = Path(path)
        if path.is_dir():
            self._mlflow.log_artifacts(str(path), name)
        else:
            self._mlflow.log_artifact(str(path), name)


@contextlib.contextmanager
def job_run(spec: dict, stage: str, name: str, results: str | Path) -> Iterator[JobRun]:
    """A child run of the current invocation, with the job's spec and provenance as params."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri(results))
    exp_id = os.environ.get(ENV_EXPERIMENT) or init_store(results, spec["preset"])
    tags = {
        "zoomattn.kind": "job",
        "zoomattn.stage": stage,
        "zoomattn.preset": spec["preset"],
        "zoomattn.git_commit": git_commit(),
        "zoomattn.config_hash": os.environ.get(ENV_CONFIG_HASH, "unknown"),
        "zoomattn.argv": " ".join(sys.argv),
        "zoomattn.host": socket.gethostname(),
    }
    # filters in the MLflow UI: one study, one method, one placement, one model
    tags["zoomattn.study"] = spec.get("study", "opamp")
    for key in ("method", "placement", "model", "benchmark", "run"):
        if spec.get(key) is not None:
            tags[f"zoomattn.{key}"] = str(spec[key])
    model = spec.get("model") or spec.get("run")  # a fine-tune's spec names it "run"
    if isinstance(model, str) and re.search(r"_s\d+$", model):  # one grid cell over its seeds
        tags["zoomattn.cell"], tags["zoomattn.seed"] = model.rsplit("_s", 1)
    if os.environ.get("SLURM_JOB_ID"):  # find the cluster job (sacct, logs) of a run
        tags["zoomattn.slurm_job_id"] = os.environ["SLURM_JOB_ID"]
    on_gpu = False
    if "device" in spec:  # a model job: where it was planned to run (what ran: placement.report)
        placement = Placement.from_spec(spec["device"])
        tags["zoomattn.planned_device"] = f"{placement.device}/{placement.dtype}"
        on_gpu = placement.device == "cuda"
    if on_gpu:  # GPU utilisation and memory in the UI: an idle or saturated card shows
        mlflow.set_system_metrics_sampling_interval(SYSTEM_METRICS_SECONDS)
    with mlflow.start_run(
        experiment_id=exp_id,
        run_name=f"{stage}:{name}",
        tags=tags,
        parent_run_id=os.environ.get(ENV_PARENT) or None,
        log_system_metrics=on_gpu,
    ):
        params = flatten(spec)
        params.update({f"version.{k}": v for k, v in package_versions().items()})
        params.update(
            {"config_hash": tags["zoomattn.config_hash"], "git_commit": tags["zoomattn.git_commit"]}
        )
        mlflow.log_params(params)
        yield JobRun(mlflow)
