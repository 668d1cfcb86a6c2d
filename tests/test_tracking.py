import json
import os
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
