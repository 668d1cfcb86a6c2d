"""MLflow: one experiment per preset, a parent run per snakemake invocation, a child run per job.

The store (default ``sqlite:///<results>/mlflow.db``; ``MLFLOW_TRACKING_URI`` overrides) and the
experiment are created once, before jobs fan out (docs/notes.md §3: creating either from many
processes at once loses runs). The parent run id and experiment id reach the jobs through the
environment.

Every run names the process it lives in (host, pid, the pid's start time): a new invocation closes,
as KILLED, the RUNNING runs whose process is gone (a ``kill -9``, a lost node), so that the store
never shows a dead run as running. The project's own store keeps its artifacts under its results
directory: an invocation of a copied or moved project re-roots them there.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import platform
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from zoomattn.dead_runs import TAG_SLURM_JOB, close_dead_runs, process_tags
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
EXPERIMENT_PREFIX = "zoomattn-"
log = logging.getLogger("zoomattn")


def own_store_uri(results: str | Path) -> str:
    """The project's own store, inside its results directory."""
    return f"sqlite:///{Path(results).resolve()}/mlflow.db"


_EXPORTED: set[str] = set()  # own stores this process used (mlflow exports the last one)


def tracking_uri(results: str | Path) -> str:
    """MLFLOW_TRACKING_URI where the user set it, else the results directory's own store."""
    chosen = os.environ.get("MLFLOW_TRACKING_URI")
    return chosen if chosen and chosen not in _EXPORTED else own_store_uri(results)


def use_store(results: str | Path) -> str:
    """Make the results' store mlflow's current one; return its URI.

    ``mlflow.set_tracking_uri`` exports the URI as MLFLOW_TRACKING_URI: without remembering which
    ones were ours, a later call for other results would take it for the user's choice.
    """
    import mlflow

    uri = tracking_uri(results)
    if uri != os.environ.get("MLFLOW_TRACKING_URI"):
        _EXPORTED.add(uri)
    mlflow.set_tracking_uri(uri)
    return uri


def experiment_name(preset: str) -> str:
    return f"{EXPERIMENT_PREFIX}{preset}"


def artifact_root(results: str | Path, preset: str) -> Path:
    """Where the own store keeps a preset's artifacts: inside the results directory."""
    return Path(results).resolve() / "mlartifacts" / preset


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
    uri = use_store(results)
    client = mlflow.MlflowClient()
    if uri == own_store_uri(results):
        reroot_moved_artifacts(client, results)
    exp = client.get_experiment_by_name(experiment_name(preset))
    if exp is not None:
        return exp.experiment_id
    if uri.startswith(("http://", "https://")):
        return client.create_experiment(experiment_name(preset))  # the server's artifact store
    artifacts = artifact_root(results, preset).as_uri()
    return client.create_experiment(experiment_name(preset), artifact_location=artifacts)


def reroot_moved_artifacts(client, results: str | Path) -> None:
    """Point the own store's experiments, and their runs, at this results directory's artifacts.

    MLflow stores artifact locations as absolute URIs (it resolves a relative one against the
    working directory at creation): in a copied or moved project they still name the original,
    which new runs would write into and the UI would show.
    """
    from mlflow.entities import ViewType
    from mlflow.utils.file_utils import local_file_uri_to_path

    experiments = client.search_experiments(
        view_type=ViewType.ALL, filter_string=f"name LIKE '{EXPERIMENT_PREFIX}%'"
    )
    for exp in experiments:
        if not exp.artifact_location.startswith("file:"):
            continue
        here = artifact_root(results, exp.name.removeprefix(EXPERIMENT_PREFIX))
        if Path(local_file_uri_to_path(exp.artifact_location)) == here:
            continue
        _move_artifact_root(client, exp.experiment_id, exp.artifact_location, here.as_uri())
        log.warning(
            "experiment %s: artifacts re-rooted from %s to %s (the project was copied or moved)",
            exp.name,
            exp.artifact_location,
            here.as_uri(),
        )


def _move_artifact_root(client, experiment_id: str, old: str, new: str) -> None:
    """Replace the artifact root ``old`` by ``new`` in an experiment and its runs (MLflow has no
    API to change either)."""
    from mlflow.store.tracking.dbmodels.models import SqlExperiment, SqlRun
    from mlflow.utils.validation import _validate_experiment_artifact_location_length

    _validate_experiment_artifact_location_length(new)
    store = client._tracking_client.store
    with store.ManagedSessionMaker(read_only=False) as session:
        exp = session.query(SqlExperiment).filter_by(experiment_id=int(experiment_id)).one()
        exp.artifact_location = new
        for run in session.query(SqlRun).filter_by(experiment_id=int(experiment_id)):
            if run.artifact_uri and run.artifact_uri.startswith(old + "/"):
                run.artifact_uri = new + run.artifact_uri[len(old) :]


def start_parent(
    results, preset: str, config: dict, command: str, owner_pid: int | None = None
) -> tuple[str, str]:
    """The invocation's parent run; returns (experiment id, run id).

    ``owner_pid`` is the invocation's process, by default this one's parent: ``mlflow-start``
    runs as a child of the snakemake process. The runs of dead earlier invocations are closed.
    """
    import mlflow

    owner_pid = os.getppid() if owner_pid is None else owner_pid
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
            **process_tags(owner_pid),
        },
    )
    now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    closed_by = f"invocation {run.info.run_id} (pid {owner_pid} on {socket.gethostname()}, {now})"
    exps = client.search_experiments(filter_string=f"name LIKE '{EXPERIMENT_PREFIX}%'")
    closed = close_dead_runs(client, [e.experiment_id for e in exps], closed_by, run.info.run_id)
    for run_id, why in closed.items():
        log.warning("closed run %s as KILLED: %s", run_id, why)
    if closed:  # the runs: search tags.`zoomattn.closed_by` LIKE '%<this run id>%'
        client.set_tag(run.info.run_id, "zoomattn.closed_dead_runs", str(len(closed)))
    client.log_dict(run.info.run_id, config, "config.effective.json")
    return exp_id, run.info.run_id


def end_parent(results, run_id: str, ok: bool) -> None:
    import mlflow

    use_store(results)
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

    use_store(results)
    exp_id = os.environ.get(ENV_EXPERIMENT) or init_store(results, spec["preset"])
    tags = {
        "zoomattn.kind": "job",
        "zoomattn.stage": stage,
        "zoomattn.preset": spec["preset"],
        "zoomattn.git_commit": git_commit(),
        "zoomattn.config_hash": os.environ.get(ENV_CONFIG_HASH, "unknown"),
        "zoomattn.argv": " ".join(sys.argv),
        **process_tags(os.getpid()),
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
        tags[TAG_SLURM_JOB] = os.environ["SLURM_JOB_ID"]
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
