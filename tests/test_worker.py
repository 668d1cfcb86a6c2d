"""The warm fork server: a job run through it behaves like the same job in its own process."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
from inspect import getsource
from pathlib import Path

import pytest

from tests.polling import wait_until
from zoomattn import stages, worker
from zoomattn.config import ROOT
from zoomattn.stages import STAGES
from zoomattn.worker import ENV_WORKER, run_in_worker

CLIENT = "import sys; from zoomattn.worker import run_in_worker; sys.exit(run_in_worker(sys.argv))"
# As zoomattn.__main__.main: the job runs here when no worker takes it.
CLIENT_OR_HERE = (
    "import sys; from zoomattn.worker import run_in_worker; from tests.worker_entry import echo; "
    "code = run_in_worker(sys.argv); sys.exit(code) if code is not None else echo(sys.argv[1:])"
)


@pytest.fixture
def server(tmp_path):
    """Start a server whose children run a tests/worker_entry.py function, with nothing preloaded
    unless asked (None: the real preload), after ``prelude`` (Python code); its stdout goes to
    worker.log. Return its socket path and process once it serves, or once it exited."""
    path = str(tmp_path / "w.sock")
    procs = []

    def start(entry: str, preload=(), prelude: str = "", timeout: float = 10.0):
        code = (
            f"{prelude}\nfrom zoomattn.worker import serve; serve({path!r}, {preload!r}, {entry!r})"
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
        with open(tmp_path / "worker.log", "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-c", code], env=env, stdout=log, stderr=subprocess.STDOUT
            )
        procs.append(proc)
        started = wait_until(lambda: os.path.exists(path) or proc.poll() is not None, timeout)
        assert started, "worker did not start"
        return path, proc

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)
        assert not os.path.exists(path), "a stopped server removes its socket"


def client(path: str, *args: str, code: str = CLIENT, **kw) -> subprocess.Popen:
    env = {**os.environ, ENV_WORKER: path, "ZOOMATTN_TEST_VALUE": "from-client"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, **kw)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _echo_job(path: str, tmp_path: Path, code: str = CLIENT) -> str:
    """Run the echo job through ``path``, check what it printed and its exit code; return the
    rest of its stderr."""
    cwd = tmp_path / "here"
    cwd.mkdir()
    with open(tmp_path / "out.log", "w") as out, open(tmp_path / "err.log", "w") as err:
        done = client(path, "3", "hello", code=code, cwd=cwd, stdout=out, stderr=err)
        assert done.wait(timeout=30) == 3
    assert (tmp_path / "out.log").read_text() == f"3 hello from-client {cwd}\n"
    err = (tmp_path / "err.log").read_text()
    assert err.endswith("to stderr\n")
    return err.removesuffix("to stderr\n")


def test_a_job_in_the_worker_gets_the_clients_argv_env_cwd_stdio_and_exit_code(server, tmp_path):
    path, _ = server("tests.worker_entry:echo")
    assert _echo_job(path, tmp_path) == ""


def _sleeping_job(server, tmp_path) -> tuple[subprocess.Popen, int]:
    """A client whose job sleeps in the worker, and the pid of the child running that job."""
    path, _ = server("tests.worker_entry:sleep")
    pid_file = tmp_path / "pid"
    job = client(path, str(pid_file))
    assert wait_until(pid_file.exists, 10)
    return job, int(pid_file.read_text())


def test_killing_the_client_kills_its_job(server, tmp_path):
    job, child = _sleeping_job(server, tmp_path)
    job.kill()  # SIGKILL: the client cannot forward it
    assert wait_until(lambda: not _alive(child), 10), "the job outlived its killed client"


def test_sigterm_to_the_client_stops_its_job_and_fails_the_client(server, tmp_path):
    job, child = _sleeping_job(server, tmp_path)
    job.send_signal(signal.SIGTERM)
    assert job.wait(timeout=10) != 0
    assert wait_until(lambda: not _alive(child), 10)


def test_without_a_server_a_job_runs_in_its_own_process(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_WORKER, raising=False)
    assert run_in_worker(["x"]) is None
    monkeypatch.setenv(ENV_WORKER, str(tmp_path / "missing.sock"))
    assert run_in_worker(["x"]) is None
    Path(tmp_path / "stale.sock").write_text("")  # a socket file nobody listens on
    monkeypatch.setenv(ENV_WORKER, str(tmp_path / "stale.sock"))
    assert run_in_worker(["x"]) is None


def test_the_server_preloads_nothing_that_asks_the_gpu(server, tmp_path):
    """A child forked after its parent initialised CUDA cannot use it: on a GPU machine, every
    job run through the server would fail. Here torch pretends to be a CUDA build with a card,
    and records every call that would ask it something, while the server preloads what it does
    on a GPU machine (peft would: it imports bitsandbytes, which asks the card's capability)."""
    record = tmp_path / "cuda-calls.txt"
    prelude = f"from tests.worker_entry import pretend_cuda; pretend_cuda({str(record)!r})"
    path, _ = server(worker.ENTRY, preload=None, prelude=prelude, timeout=180)
    assert not record.exists(), "a preloaded module asked the GPU:\n" + record.read_text()
    assert os.path.exists(path), (tmp_path / "worker.log").read_text()


def test_without_cuda_in_torch_the_server_preloads_peft_too(monkeypatch):
    import torch

    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.version, "cuda", None)
    cpu_only = worker.preload_list()
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    assert cpu_only == (*worker.preload_list(), "peft")


def _package_imports(function) -> set[str]:
    """What the ``from zoomattn... import name`` lines of a function's source import: the module,
    or ``module.name`` where that is one."""
    out = set()
    imports = re.findall(r"from (zoomattn[\w.]*) import ([\w, ]+)", getsource(function))
    for module, names in imports:
        for name in (n.split(" as ")[0].strip() for n in names.split(",")):
            out.add(f"{module}.{name}" if _is_module(f"{module}.{name}") else module)
    return out


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a name inside a module
        return False


def test_the_server_preloads_every_stage_and_what_its_function_imports():
    """Read off the stage table (zoomattn/stages): each stage's module and the package modules
    its function's body imports, beside the third-party stack."""
    preload = worker.preload_list()
    assert preload[: len(worker.STACK)] == worker.STACK
    for stage in STAGES:
        function = stages.function(stage)
        assert function.__module__ in preload, stage
        assert _package_imports(function) <= set(preload), stage
    assert "zoomattn.worker" not in preload and "zoomattn.__main__" not in preload


TOUCHES_CUDA = {
    "initialised": "import torch\ntorch.cuda.is_initialized = lambda: True\n",
    # what cudaGetDeviceCount leaves: forked children are marked, CUDA is not initialised
    "asked-the-driver": (
        "import os, torch\nserver = os.getpid()\n"
        "torch.cuda._is_in_bad_fork = lambda: os.getpid() != server\n"
    ),
}


@pytest.mark.parametrize("touch", TOUCHES_CUDA.values(), ids=TOUCHES_CUDA.keys())
def test_a_server_whose_preload_touched_cuda_does_not_serve_and_jobs_run_anyway(
    server, tmp_path, touch
):
    (tmp_path / "touches_cuda.py").write_text(touch)
    path, proc = server("tests.worker_entry:echo", preload=("touches_cuda",))
    assert proc.wait(timeout=10) == 0
    assert "not serving" in (tmp_path / "worker.log").read_text()
    assert not os.path.exists(path)
    assert _echo_job(path, tmp_path, CLIENT_OR_HERE) == ""  # in the client's own process


def test_a_child_that_cannot_use_cuda_hands_its_job_back_and_stops_the_server(server, tmp_path):
    touched = tmp_path / "touched"
    (tmp_path / "touches_cuda_later.py").write_text(
        f"import os, torch\ntorch.cuda._is_in_bad_fork = lambda: os.path.exists({str(touched)!r})\n"
    )
    path, proc = server("tests.worker_entry:echo", preload=("touches_cuda_later",))
    assert os.path.exists(path)
    touched.touch()  # as if the server had touched CUDA once serving
    assert "the worker touched CUDA" in _echo_job(path, tmp_path, CLIENT_OR_HERE)
    assert proc.wait(timeout=10) == 0
    assert not os.path.exists(path)


def _serve_elsewhere(path: Path, log: Path, *extra: str) -> subprocess.Popen:
    """A server at ``path`` (nothing preloaded, echo jobs) besides the fixture's; ``extra``:
    more command-line arguments, ignored by it."""
    code = f"from zoomattn.worker import serve; serve({str(path)!r}, (), 'tests.worker_entry:echo')"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *extra], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    assert wait_until(lambda: path.exists() or proc.poll() is not None, 10), "server did not start"
    return proc


def _half_bound(path: Path) -> None:
    """A socket file as a server leaves it that died between binding and listening."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()


def test_a_starting_server_removes_the_sockets_of_dead_servers_and_keeps_live_ones(
    server, tmp_path
):
    live = tmp_path / f"{worker.SOCKET_PREFIX}live.sock"
    other = _serve_elsewhere(live, tmp_path / "live.log")
    dead = tmp_path / f"{worker.SOCKET_PREFIX}dead.sock"
    killed = _serve_elsewhere(dead, tmp_path / "dead.log")
    killed.kill()  # SIGKILL: no chance to remove its socket
    killed.wait()
    assert dead.exists()
    dead_binding = tmp_path / f"{worker.SOCKET_PREFIX}half.sock.{killed.pid}"
    _half_bound(dead_binding)
    live_binding = tmp_path / f"{worker.SOCKET_PREFIX}busy.sock.{os.getpid()}"
    _half_bound(live_binding)
    not_a_socket = tmp_path / f"{worker.SOCKET_PREFIX}note.sock"
    not_a_socket.write_text("")
    try:
        server("tests.worker_entry:echo")  # in the same directory
        assert not dead.exists() and not dead_binding.exists()
        assert live.exists() and live_binding.exists() and not_a_socket.exists()
        assert (
            f"removed the socket of a dead worker: {dead}" in (tmp_path / "worker.log").read_text()
        )
        assert _echo_job(str(live), tmp_path) == ""  # the live server still serves
        assert "dropped" not in (tmp_path / "live.log").read_text()  # a probe is no request
    finally:
        other.terminate()
        other.wait(timeout=10)


def test_stop_removes_the_socket_of_a_server_killed_before_it_could(tmp_path, monkeypatch):
    path = tmp_path / f"{worker.SOCKET_PREFIX}killed.sock"
    proc = _serve_elsewhere(path, tmp_path / "killed.log", "--socket", str(path))
    monkeypatch.setenv(ENV_WORKER, str(path))
    proc.kill()
    proc.wait()
    assert path.exists()
    worker.stop(proc)
    assert not path.exists()


def test_a_server_hung_up_on_removes_its_socket(server):
    path, proc = server("tests.worker_entry:echo")
    proc.send_signal(signal.SIGHUP)
    assert proc.wait(timeout=10) == 0
    assert not os.path.exists(path)
