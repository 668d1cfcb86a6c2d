"""The warm fork server: a job run through it behaves like the same job in its own process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zoomattn.config import ROOT
from zoomattn.worker import ENV_WORKER, run_in_worker

CLIENT = "import sys; from zoomattn.worker import run_in_worker; sys.exit(run_in_worker(sys.argv))"


@pytest.fixture
def server(tmp_path):
    """A server with nothing preloaded whose children run tests/worker_entry.py functions."""
    path = str(tmp_path / "w.sock")

    def start(entry: str):
        code = f"from zoomattn.worker import serve; serve({path!r}, (), {entry!r})"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-c", code], env=env)
        for _ in range(100):
            if os.path.exists(path):
                return path, proc
            time.sleep(0.1)
        raise AssertionError("worker did not start")

    procs = []
    yield lambda entry: procs.append(start(entry)) or procs[-1][0]
    for _, proc in procs:
        proc.terminate()
        proc.wait(timeout=10)
        assert not os.path.exists(path), "a stopped server removes its socket"


def client(path: str, *args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, ENV_WORKER: path, "ZOOMATTN_TEST_VALUE": "from-client"}
    return subprocess.Popen([sys.executable, "-c", CLIENT, *args], env=env, **kw)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_for(predicate, seconds: float = 10.0) -> bool:
    end = time.time() + seconds
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_job_in_the_worker_gets_the_clients_argv_env_cwd_stdio_and_exit_code(server, tmp_path):
    path = server("tests.worker_entry:echo")
    cwd = tmp_path / "here"
    cwd.mkdir()
    with open(tmp_path / "out.log", "w") as out, open(tmp_path / "err.log", "w") as err:
        done = client(path, "3", "hello", cwd=cwd, stdout=out, stderr=err).wait(timeout=30)
    assert done == 3
    assert (tmp_path / "out.log").read_text() == f"3 hello from-client {cwd}\n"
    assert (tmp_path / "err.log").read_text() == "to stderr\n"


def _sleeping_job(server, tmp_path) -> tuple[subprocess.Popen, int]:
    """A client whose job sleeps in the worker, and the pid of the child running that job."""
    path = server("tests.worker_entry:sleep")
    pid_file = tmp_path / "pid"
    job = client(path, str(pid_file))
    assert _wait_for(pid_file.exists)
    return job, int(pid_file.read_text())


def test_killing_the_client_kills_its_job(server, tmp_path):
    job, child = _sleeping_job(server, tmp_path)
    job.kill()  # SIGKILL: the client cannot forward it
    assert _wait_for(lambda: not _alive(child)), "the job outlived its killed client"


def test_sigterm_to_the_client_stops_its_job_and_fails_the_client(server, tmp_path):
    job, child = _sleeping_job(server, tmp_path)
    job.send_signal(signal.SIGTERM)
    assert job.wait(timeout=10) != 0
    assert _wait_for(lambda: not _alive(child))


def test_without_a_server_a_job_runs_in_its_own_process(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_WORKER, raising=False)
    assert run_in_worker(["x"]) is None
    monkeypatch.setenv(ENV_WORKER, str(tmp_path / "missing.sock"))
    assert run_in_worker(["x"]) is None
    Path(tmp_path / "stale.sock").write_text("")  # a socket file nobody listens on
    monkeypatch.setenv(ENV_WORKER, str(tmp_path / "stale.sock"))
    assert run_in_worker(["x"]) is None
