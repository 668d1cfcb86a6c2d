import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from zoomattn.tracking import flatten


def test_flatten_names_nested_config_keys_with_dots():
    assert flatten({"a": {"b": 1, "c": {"d": "x"}}, "e": [1, 2]}) == {
        "a.b": "1",
        "a.c.d": "x",
        "e": "[1, 2]",
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    port = _free_port()
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{tmp_path}/server.db",
            "--artifacts-destination",
            str(tmp_path / "server-artifacts"),
            "--workers",
            "1",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=1)
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("mlflow server did not start within 90 s")
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_a_job_logs_its_run_and_artifacts_to_a_server_given_by_tracking_uri(
    mlflow_server, tmp_path
):
    import mlflow

    spec = {
        "preset": "smoke",
        "world_seed": 1,
        "code": "x",
        "data": {"n_entities": 40, "n_famous": 3},
    }
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_server}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "zoomattn",
            "world",
            "--spec",
            json.dumps(spec),
            "--results",
            str(tmp_path / "results"),
            "--out",
            str(tmp_path / "world"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    client = mlflow.MlflowClient(tracking_uri=mlflow_server)
    exp = client.get_experiment_by_name("zoomattn-smoke")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["data.n_entities"] == "40"
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["manifest.json"]
    assert not (tmp_path / "results" / "mlflow.db").exists()


# ---- a new invocation closes the runs of dead ones; a copied project keeps its own artifacts ----

JOB = """
import sys, time
from pathlib import Path
from zoomattn.tracking import job_run
with job_run({"preset": "smoke"}, "data", sys.argv[2], sys.argv[1]) as run:
    run.log_metrics({"examples": 3})
    Path(sys.argv[3]).write_text("ready")
    time.sleep(120)
"""


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory):
    """An MLflow sqlite store with its tables and nothing else (creating them takes seconds)."""
    import mlflow

    db = tmp_path_factory.mktemp("empty-store") / "mlflow.db"
    mlflow.MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    return db


def _results_with_a_new_store(results, empty_store):
    results.mkdir(parents=True)
    shutil.copy(empty_store, results / "mlflow.db")
    return results


@pytest.fixture
def store(tmp_path, monkeypatch, empty_store):
    """A results directory whose own sqlite store the tracking code uses."""
    from zoomattn.tracking import ENV_EXPERIMENT, ENV_PARENT

    for name in ("MLFLOW_TRACKING_URI", ENV_EXPERIMENT, ENV_PARENT):
        monkeypatch.delenv(name, raising=False)
    return _results_with_a_new_store(tmp_path / "results", empty_store)


@pytest.fixture
def processes():
    """Start processes (killed after the test, if it did not)."""
    procs = []

    def start(*argv: str, env: dict | None = None) -> subprocess.Popen:
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL))
        return procs[-1]

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def _snakemake(processes) -> subprocess.Popen:
    """A stand-in for an invocation's snakemake process."""
    return processes(sys.executable, "-c", "import time; time.sleep(120)")


def _kill(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()  # reaped: its pid is gone


def _client(results):
    import mlflow

    return mlflow.MlflowClient(tracking_uri=f"sqlite:///{results.resolve()}/mlflow.db")


def _invocation(results, owner: int) -> str:
    from zoomattn.tracking import start_parent

    return start_parent(results, "smoke", {"preset": "smoke"}, "snakemake", owner_pid=owner)[1]


def _job_in_its_process(processes, results, parent: str, tmp_path) -> tuple[subprocess.Popen, str]:
    """A job of the invocation ``parent``, RUNNING in a process of its own: (process, run id)."""
    from zoomattn.config import ROOT
    from zoomattn.tracking import ENV_EXPERIMENT, ENV_PARENT, init_store

    ready = tmp_path / f"job-{len(list(tmp_path.glob('job-*')))}"
    env = {**os.environ, ENV_PARENT: parent, ENV_EXPERIMENT: init_store(results, "smoke")}
    env["PYTHONPATH"] = str(ROOT)
    env.pop("MLFLOW_TRACKING_URI", None)  # mlflow.set_tracking_uri's export: the results decide
    proc = processes(sys.executable, "-c", JOB, str(results), ready.name, str(ready), env=env)
    deadline = time.time() + 120
    while not ready.exists():
        assert proc.poll() is None and time.time() < deadline, "the job did not start its run"
        time.sleep(0.1)
    (run,) = _client(results).search_runs(
        [env[ENV_EXPERIMENT]], f"attributes.run_name = 'data:{ready.name}'"
    )
    return proc, run.info.run_id


def _job_elsewhere(results, parent: str, **tags: str) -> str:
    """A job's RUNNING run whose process is on another host (a Slurm node)."""
    from zoomattn.tracking import init_store

    tags = {"zoomattn.kind": "job", "mlflow.parentRunId": parent, **tags}
    tags.update({"zoomattn.host": "node7", "zoomattn.pid": "4242", "zoomattn.pid_start": "99"})
    return _client(results).create_run(init_store(results, "smoke"), tags=tags).info.run_id


def test_a_new_invocation_closes_the_runs_of_a_killed_one_as_killed_at_their_last_activity(
    store, processes, tmp_path
):
    snakemake = _snakemake(processes)
    old = _invocation(store, snakemake.pid)
    job, job_run_id = _job_in_its_process(processes, store, old, tmp_path)
    _kill(job)
    _kill(snakemake)
    new = _invocation(store, os.getpid())
    client = _client(store)
    child, parent = client.get_run(job_run_id), client.get_run(old)
    assert child.info.status == parent.info.status == "KILLED"
    for run, pid in ((child, job.pid), (parent, snakemake.pid)):
        assert new in run.data.tags["zoomattn.closed_by"]
        assert run.data.tags["zoomattn.closed_reason"].startswith(f"its process {pid} on ")
    (examples,) = client.get_metric_history(job_run_id, "examples")
    assert child.info.end_time == examples.timestamp  # its last known activity, not now
    assert parent.info.end_time == child.info.end_time
    assert client.get_run(new).info.status == "RUNNING"
    assert client.get_run(new).data.tags["zoomattn.closed_dead_runs"] == "2"


def test_a_new_invocation_leaves_a_live_concurrent_invocation_and_its_jobs_running(
    store, processes, tmp_path
):
    other = _invocation(store, _snakemake(processes).pid)
    _, job = _job_in_its_process(processes, store, other, tmp_path)
    elsewhere = _job_elsewhere(store, other)
    _invocation(store, os.getpid())
    client = _client(store)
    for run_id in (other, job, elsewhere):
        run = client.get_run(run_id)
        assert run.info.status == "RUNNING" and "zoomattn.closed_by" not in run.data.tags


def test_a_run_whose_pid_now_names_another_process_is_closed(store):
    from zoomattn.dead_runs import process_tags
    from zoomattn.tracking import init_store

    exp = init_store(store, "smoke")
    client = _client(store)
    mine = process_tags(os.getpid())
    assert mine["zoomattn.pid_start"].isdigit()
    live = client.create_run(exp, tags=mine).info.run_id
    reused = client.create_run(exp, tags={**mine, "zoomattn.pid_start": "1"}).info.run_id
    _invocation(store, os.getpid())
    assert client.get_run(live).info.status == "RUNNING"
    assert client.get_run(reused).info.status == "KILLED"


def test_another_hosts_job_is_closed_once_its_invocation_is_dead_or_ended(store, processes):
    dead = _snakemake(processes)
    of_dead = _job_elsewhere(store, _invocation(store, dead.pid))
    _kill(dead)
    ended = _invocation(store, os.getpid())
    _client(store).set_terminated(ended, "FAILED")
    of_ended = _job_elsewhere(store, ended)
    unprobeable = _invocation(store, os.getpid())  # an invocation on another login node
    _client(store).set_tag(unprobeable, "zoomattn.host", "login2")
    of_unprobeable = _job_elsewhere(store, unprobeable)
    _invocation(store, os.getpid())
    client = _client(store)
    assert client.get_run(of_dead).info.status == "KILLED"
    assert client.get_run(of_ended).info.status == "KILLED"
    assert (
        f"invocation {ended} FAILED" in client.get_run(of_ended).data.tags["zoomattn.closed_reason"]
    )
    assert client.get_run(unprobeable).info.status == "RUNNING"
    assert client.get_run(of_unprobeable).info.status == "RUNNING"


SQUEUE = {  # what squeue says of the job -> whether its run is closed
    "echo RUNNING": False,
    "echo COMPLETED": True,
    "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1": True,
    "echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1": False,
}


@pytest.mark.parametrize("squeue", SQUEUE, ids=["running", "completed", "unknown-id", "down"])
def test_another_hosts_job_of_a_dead_invocation_stays_running_while_slurm_runs_it(
    store, processes, tmp_path, monkeypatch, squeue
):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(f"#!/bin/sh\n{squeue}\n")
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    dead = _snakemake(processes)
    job = _job_elsewhere(store, _invocation(store, dead.pid), **{"zoomattn.slurm_job_id": "17"})
    _kill(dead)
    _invocation(store, os.getpid())
    closed = _client(store).get_run(job).info.status == "KILLED"
    assert closed == SQUEUE[squeue]


def test_a_copied_project_logs_new_artifacts_into_its_own_results_and_leaves_the_original_alone(
    store, tmp_path, monkeypatch
):
    import mlflow

    from zoomattn.tracking import ENV_EXPERIMENT, ENV_PARENT, end_parent, job_run, start_parent

    note = tmp_path / "note.txt"
    note.write_text("x")

    def invocation_with_a_job(results) -> str:
        exp, parent = start_parent(results, "smoke", {}, "snakemake", owner_pid=os.getpid())
        monkeypatch.setenv(ENV_EXPERIMENT, exp)
        monkeypatch.setenv(ENV_PARENT, parent)
        with job_run({"preset": "smoke"}, "data", "note", results) as run:
            run.log_artifacts(note)
            job = mlflow.active_run().info.run_id
        end_parent(results, parent, ok=True)
        return job

    a, b = store, tmp_path / "copy" / "results"
    first = invocation_with_a_job(a)
    shutil.copytree(a, b)
    before = {p: p.read_bytes() for p in a.rglob("*") if p.is_file()}
    second = invocation_with_a_job(b)
    after = {p: p.read_bytes() for p in a.rglob("*") if p.is_file()}
    assert after == before  # the original: not a byte changed, no file added
    client = _client(b)
    assert (b / "mlartifacts/smoke" / second / "artifacts/note.txt").is_file()
    for run_id in (first, second):  # the copied run too: its artifacts are the copy's
        assert client.get_run(run_id).info.artifact_uri.startswith(b.resolve().as_uri())
        assert [f.path for f in client.list_artifacts(run_id)] == ["note.txt"]
    exp = client.get_experiment_by_name("zoomattn-smoke")
    assert exp.artifact_location == (b.resolve() / "mlartifacts/smoke").as_uri()


def test_a_stage_jobs_run_names_the_cpu_it_ran_on_and_keeps_a_context_already_set(
    store, monkeypatch
):
    """A CPU run's metrics depend on the CPU type: the CLI tags every run a stage starts with it
    (MLflow's run context, set outside every stage's code hash), beside what a user's
    MLFLOW_RUN_CONTEXT already asked for."""
    import inspect

    import mlflow

    import zoomattn.__main__ as cli
    from zoomattn.stages import data
    from zoomattn.tracking import job_run

    runs = []

    def world(spec, results, out):  # a stage that only opens its job's run
        with job_run({"preset": "smoke"}, "world", "w", results):
            runs.append(mlflow.active_run().info.run_id)

    world.__signature__ = inspect.signature(data.world)
    monkeypatch.setattr(data, "world", world)
    monkeypatch.setattr(cli, "claim_for_spec", lambda spec: None)
    monkeypatch.setenv(cli.ENV_RUN_CONTEXT, json.dumps({"site": "lab-a"}))
    cli.run_stage(["world", "--spec", "{}", "--results", str(store), "--out", "unused"])
    tags = _client(store).get_run(runs[0]).data.tags
    assert tags[cli.TAG_CPU] == cli.cpu_description() and tags["site"] == "lab-a"
    assert tags["zoomattn.stage"] == "world"  # the job's own tags are there too


@pytest.mark.parametrize("value", ["{site: lab-a", "[]", "null"])
def test_a_run_context_that_is_no_json_object_stops_the_job_naming_the_variable(monkeypatch, value):
    import zoomattn.__main__ as cli

    monkeypatch.setenv(cli.ENV_RUN_CONTEXT, value)
    with pytest.raises(SystemExit, match="MLFLOW_RUN_CONTEXT is not a JSON object"):
        cli.tag_every_run({cli.TAG_CPU: "x"})
