"""A killed training job resumes only its own checkpoint: real fine-tune processes on the smoke
grid's data and base (the session's ``workdir``), killed with SIGKILL and run again."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
import yaml

pytestmark = pytest.mark.slow


def _job_env(workdir) -> dict:
    """A job's environment: the scratch copy's package, and no MLFLOW_TRACKING_URI (an earlier
    test's mlflow.set_tracking_uri leaves one in this process) so --results names the store."""
    env = {**os.environ, "PYTHONPATH": str(workdir)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory):
    """An MLflow sqlite store with its tables and no experiment, made once: each job's store starts
    as a copy (the tables' migrations would otherwise take seconds in every job)."""
    import mlflow

    store = tmp_path_factory.mktemp("empty_store") / "mlflow.db"
    mlflow.MlflowClient(f"sqlite:///{store}").search_experiments()
    return store


def _new_store(empty_store, path) -> None:
    path.mkdir()
    shutil.copy(empty_store, path / "mlflow.db")


def _finetune_spec(workdir, **finetune) -> dict:
    """The smoke grid's QLoRA cell, long enough (60 steps, a checkpoint every 10) to be killed."""
    preset = yaml.safe_load((workdir / "config.yaml").read_text())["presets"]["smoke"]
    steps = {"steps": 60, "checkpoint_every": 10}
    return {
        "preset": "smoke",
        "run": "qlora",
        "seed": 0,
        "method": "qlora",
        "method_config": {},
        "finetune": {**preset["finetune"], **steps, **finetune},
        "code": "before-edit",
    }


def _finetune_command(workdir, tmp_path, spec: dict, name: str, store: str = "mlflow") -> list:
    """A fine-tune job as the rule runs it, into tmp_path/name with checkpoints in ckpt_<name>."""
    out = workdir / "results/smoke"
    return [
        sys.executable,
        "-m",
        "zoomattn",
        "finetune",
        "--spec",
        json.dumps(spec),
        "--results",
        str(tmp_path / store),
        "--data-dir",
        str(out / "data/train"),
        "--base-dir",
        str(out / "models/base"),
        "--out",
        str(tmp_path / name),
        "--ckpt",
        str(tmp_path / f"ckpt_{name}"),
        "--threads",
        "1",
    ]


def _kill_after_its_first_checkpoint(command: list, env: dict, state) -> None:
    job = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not state.exists() and time.time() < deadline and job.poll() is None:
        time.sleep(0.05)
    job.kill()  # SIGKILL: no cleanup runs
    job.wait()
    assert state.exists(), "the job ended before its first checkpoint"


def _same_model_files(a, b) -> None:
    for name in ("adapter_model.safetensors", "metrics.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def _finetune_runs(store) -> tuple:
    """(client, the fine-tune runs) of an MLflow store that jobs wrote with --results store."""
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{store}/mlflow.db")
    exp = client.get_experiment_by_name("zoomattn-smoke")
    return client, client.search_runs([exp.experiment_id], "attributes.run_name = 'finetune:qlora'")


def test_a_killed_finetune_job_resumes_from_its_checkpoint_to_the_same_weights(
    workdir, tmp_path, empty_store
):
    spec = _finetune_spec(workdir)
    env = _job_env(workdir)
    command = lambda name, store="mlflow": _finetune_command(  # noqa: E731
        workdir, tmp_path, spec, name, store
    )
    _new_store(empty_store, tmp_path / "mlflow")
    _new_store(empty_store, tmp_path / "mlflow_reference")
    # the reference in its own store, beside the job that is killed (the two at once)
    reference = subprocess.Popen(
        command("reference", "mlflow_reference"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    state = tmp_path / "ckpt_killed/state.pt"
    _kill_after_its_first_checkpoint(command("killed"), env, state)
    assert not (tmp_path / "killed").exists()
    assert reference.wait(timeout=600) == 0
    rerun = subprocess.run(command("killed"), env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    resumed_from = re.search(r"resumed qlora from step ([1-9]\d*)", rerun.stderr)
    assert resumed_from and "discarding" not in rerun.stderr
    _same_model_files(tmp_path / "killed", tmp_path / "reference")
    assert not state.exists()  # a finished job leaves no checkpoint behind
    # the resumed MLflow run says so, and holds the loss history from the first logged step
    history = {}
    for store, tags in (("mlflow_reference", {"0"}), ("mlflow", {resumed_from.group(1)})):
        client, runs = _finetune_runs(tmp_path / store)
        finished = {
            r.data.tags["zoomattn.resumed_from_step"]: r
            for r in runs
            if r.info.status == "FINISHED"
        }
        assert set(finished) == tags, store  # the killed run: not among the finished ones
        for tag, r in finished.items():
            metric = client.get_metric_history(r.info.run_id, "train_loss")
            history[tag] = [(m.step, m.value) for m in metric]
    log_every = spec["finetune"]["log_every"]
    assert [s for s, _ in sorted(history["0"])] == list(range(log_every, 61, log_every))
    assert sorted(history[resumed_from.group(1)]) == sorted(history["0"])


def test_a_killed_finetune_rerun_with_another_lr_or_code_discards_its_checkpoint(
    workdir, tmp_path, empty_store
):
    """A checkpoint of lr 1e-3 is continued neither at lr 5e-3 nor after a code edit (another
    spec["code"], the hash Snakemake computes after a source edit): each rerun trains from step
    0, to the bytes of a clean run of its own spec, and its log says the checkpoint was dropped."""
    old = _finetune_spec(workdir, lr=1e-3)
    changed = {"lr": _finetune_spec(workdir, lr=5e-3), "code": {**old, "code": "after-edit"}}
    env = _job_env(workdir)

    def start(spec, name):  # each job its own MLflow store: the two run at once
        _new_store(empty_store, tmp_path / f"mlflow_{name}")
        command = _finetune_command(workdir, tmp_path, spec, name, f"mlflow_{name}")
        with (tmp_path / f"{name}.log").open("w") as log:
            return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)

    clean = [start(spec, f"clean_{what}") for what, spec in changed.items()]
    state = tmp_path / "ckpt_rerun_lr/state.pt"
    _new_store(empty_store, tmp_path / "mlflow_killed")
    _kill_after_its_first_checkpoint(
        _finetune_command(workdir, tmp_path, old, "rerun_lr", "mlflow_killed"), env, state
    )
    shutil.copytree(state.parent, tmp_path / "ckpt_rerun_code")
    assert [job.wait(timeout=600) for job in clean] == [0, 0]
    reruns = [start(spec, f"rerun_{what}") for what, spec in changed.items()]
    assert [job.wait(timeout=600) for job in reruns] == [0, 0]
    for what in changed:
        log = (tmp_path / f"rerun_{what}.log").read_text()
        assert re.search(r"discarding checkpoint .* made for another job identity", log), what
        assert "resumed qlora" not in log, what
        _same_model_files(tmp_path / f"rerun_{what}", tmp_path / f"clean_{what}")
