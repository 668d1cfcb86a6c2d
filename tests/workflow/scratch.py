"""A scratch copy of the workflow and real Snakemake runs in it (shared by the workflow tests).

The copy carries its own ``zoomattn`` package (first on PYTHONPATH), so a test can edit a method's
source there and watch which jobs Snakemake schedules, without touching the checkout.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.polling import wait_until
from zoomattn import worker
from zoomattn.config import ROOT

SMOKE = ["--config", "preset=smoke"]
TORN_MODEL = "mudaf/mudaf-heads2_s0"  # the model tear_model breaks: read by every kind of
# analysis job, by one evaluation and by three reports, so its rebuild is short (10 jobs)


def copy_workflow(dest: Path) -> Path:
    """Snakefile, config, rules, envs, the Slurm and default profiles and the package, copied to
    ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "config.yaml"):
        shutil.copy(ROOT / name, dest / name)
    for name in ("workflow", "envs", "slurm", "profiles"):
        shutil.copytree(ROOT / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "zoomattn", dest / "zoomattn", ignore=ignore)
    return dest


def snakemake(
    workdir: Path, *args: str, check: bool = True, env: dict | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(workdir), **(env or {})}
    env.pop("MLFLOW_TRACKING_URI", None)  # the scratch copy's own sqlite store
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if check and done.returncode:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


@contextlib.contextmanager
def warm_worker(workdir: Path) -> Iterator[Callable[[], None]]:
    """A warm worker (zoomattn/worker.py) serving the scratch copy's package, named in this
    process's environment (so in that of the Snakemake runs it starts) until the block ends.
    Yields a function that waits until it serves (it loads for ~10 s: start it early)."""
    env = {**os.environ, "PYTHONPATH": str(workdir)}
    server = worker.start(sys.executable, str(workdir / "worker.log"), cwd=workdir, env=env)
    socket_path = os.environ[worker.ENV_WORKER]

    def wait_until_ready() -> None:
        wait_until(lambda: os.path.exists(socket_path) or server.poll() is not None, 120, 0.2)
        if not os.path.exists(socket_path):
            log = (workdir / "worker.log").read_text()
            raise AssertionError(f"the worker did not become ready:\n{log}")

    try:
        yield wait_until_ready
    finally:
        worker.stop(server)


def mlflow_client(workdir: Path):
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{workdir}/results/mlflow.db")
    return mlflow.MlflowClient()


def mlflow_runs(workdir: Path, preset: str = "smoke"):
    """(runs of the preset's experiment, runs misfiled into Default) of a scratch copy's store."""
    client = mlflow_client(workdir)
    exp = client.get_experiment_by_name(f"zoomattn-{preset}")
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    default = client.search_runs(["0"], max_results=1000)
    return runs, default


# what a retrained model of any study reruns besides its own report: its evaluations, and the head
# analyses every model of the grid goes through (MuDAF's, LKG-RALM's) with those studies' reports
ANALYSES = [
    "all",
    "evaluate",
    "finetune",
    "head_masking",
    "report[mudaf]",
    "head_patterns",
    "report[lkg]",
    "report[leaderboard]",  # the cross-method report reads every evaluation and head analysis
]


def tear_model(workdir: Path, model: str) -> None:
    """What a forced rerun of ``model``'s fine-tune killed with kill -9 leaves: the model gone
    (Snakemake removed it when the job started) and a torn ``<model>.partial`` beside it."""
    models = workdir / "results/smoke/models"
    shutil.rmtree(models / model)
    partial = models / f"{model}.partial"
    partial.mkdir()
    (partial / "model.safetensors").write_text("torn")


def planned_jobs(workdir: Path, *args: str) -> list[tuple[str, dict]]:
    """(rule, wildcards) of every job a dry run would execute; a report job (one rule for every
    study) as ``("report[<study>]", {})``."""
    out = snakemake(workdir, "-n", *SMOKE, *args).stdout
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        m = re.match(r"(?:local)?rule (\w+):", block.strip())
        if not m:
            continue
        w = re.search(r"wildcards: (.*)", block)
        wildcards = dict(kv.split("=", 1) for kv in w.group(1).split(", ")) if w else {}
        rule = m.group(1)
        if rule == "report":
            rule, wildcards = f"report[{wildcards['study']}]", {}
        jobs.append((rule, wildcards))
    return jobs
