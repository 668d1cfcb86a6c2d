"""A warm fork server for local runs: jobs skip the ~10 s of imports every fresh process pays.

A job process costs ~10 s before it does anything (torch, transformers, peft, datasets, MLflow),
and the grid runs ~90 of them; on 2 cores that is a third of the ``tiny`` grid's wall time. During
a local ``snakemake`` run, ``serve`` imports that stack once and forks a child per job; the job's
own ``python -m zoomattn`` is the client (``run_in_worker``): it hands over its argv, environment,
working directory and stdin/stdout/stderr, forwards signals to the child and exits with its code.
The child is the job: it writes to the job's log, reads the job's environment, and dies with its
client (killing the client kills the job). With no server, or on a cluster where
``ZOOMATTN_WORKER`` is unset, a job runs in its own process as before.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid

ENV_WORKER = "ZOOMATTN_WORKER"
PRELOAD = (
    "torch",
    "transformers.modeling_utils",
    "transformers.models.llama.modeling_llama",
    "peft",
    "datasets",
    "mlflow",
    "mlflow.store.tracking.sqlalchemy_store",
    "zoomattn.stages",
    "zoomattn.tracking",
    "zoomattn.modeling.loading",
    "zoomattn.modeling.pretrain",
    "zoomattn.training.finetune",
    "zoomattn.evaluation.generate",
    "zoomattn.evaluation.attention_share",
    "zoomattn.reporting.build",
    "zoomattn.data.build",
)


def start(python: str, log: str) -> subprocess.Popen:
    """Start a server for this process's jobs (it stops when this process does) and name it in
    the environment its jobs inherit."""
    path = os.path.join(tempfile.gettempdir(), f"zoomattn-worker-{uuid.uuid4().hex[:12]}.sock")
    os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [python, "-m", "zoomattn", "worker", "--socket", path],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    os.environ[ENV_WORKER] = path
    return proc


def stop(proc: subprocess.Popen) -> None:
    os.environ.pop(ENV_WORKER, None)
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _send(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def _receive(lines) -> dict | None:
    """The next message from a connection's ``makefile("rb")``; None once it is closed."""
    line = lines.readline()
    return json.loads(line) if line.endswith(b"\n") else None


def run_in_worker(argv: list[str]) -> int | None:
    """Run this job in the warm server named by ZOOMATTN_WORKER; None if there is none to use."""
    path = os.environ.get(ENV_WORKER)
    if not path or not os.path.exists(path):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        return None  # not listening yet, or gone: run here
    request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
    payload = json.dumps(request).encode() + b"\n"
    try:
        socket.send_fds(conn, [payload[:1]], [0, 1, 2])
        conn.sendall(payload[1:])
    except OSError:
        return None  # e.g. a closed stdin: nothing ran yet, so run here
    lines = conn.makefile("rb")
    started = _receive(lines)
    if started is None:
        return None
    child = started["pid"]

    def forward(signum, _frame):
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    done = _receive(lines)
    if done is None:
        print("zoomattn: the job's worker process died without an exit status", file=sys.stderr)
        return 1
    return done["exit"]


def _child(conn: socket.socket, fds: list[int], request: dict, entry) -> None:
    """In the forked child: become the job, run it, report its exit status, exit."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    for target, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = request["argv"]
    _send(conn, {"pid": os.getpid()})

    def die_with_client():
        try:
            while conn.recv(1):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGKILL)  # the client is gone (killed): so is the job

    threading.Thread(target=die_with_client, daemon=True).start()
    code = 1
    try:
        import torch

        if "OMP_NUM_THREADS" in os.environ:  # what a fresh process would start with
            torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        entry(sys.argv[1:])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            _send(conn, {"exit": code})
        finally:
            os._exit(code)


ENTRY = "zoomattn.__main__:run_stage"


def serve(path: str, preload: tuple[str, ...] = PRELOAD, entry: str = ENTRY) -> None:
    """Preload the job stack, then fork a child per client until SIGTERM or the parent exits.

    Each child runs ``entry`` (``module:function``) on the client's arguments.
    """
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    t0 = time.time()
    for name in preload:
        importlib.import_module(name)
    module, function = entry.split(":")
    run = getattr(importlib.import_module(module), function)
    parent = os.getppid()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{path}.{os.getpid()}"
    server.bind(tmp)
    server.listen(16)
    os.replace(tmp, path)  # clients see the socket only once it is listening
    server.settimeout(1.0)
    print(f"zoomattn worker: ready in {time.time() - t0:.1f} s at {path}", flush=True)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    try:
        while not stopping.is_set() and os.getppid() == parent:
            try:
                conn, _ = server.accept()
            except (TimeoutError, InterruptedError):
                continue
            conn.settimeout(None)
            fds = []
            try:
                first, fds, _, _ = socket.recv_fds(conn, 1, 3)
                request = json.loads(first + conn.makefile("rb").readline())
            except (OSError, ValueError) as exc:  # a client that died mid-request
                print(f"zoomattn worker: dropped a request: {exc!r}", flush=True)
                for fd in fds:
                    os.close(fd)
                conn.close()
                continue
            stage = " ".join(request["argv"][1:2])
            print(f"zoomattn worker: job {stage} {request['cwd']}", flush=True)
            if os.fork() == 0:
                server.close()
                _child(conn, fds, request, run)
            for fd in fds:
                os.close(fd)
            conn.close()
    finally:
        server.close()
        if os.path.exists(path):
            os.unlink(path)
