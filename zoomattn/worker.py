"""A warm fork server for local runs: jobs skip the ~10 s of imports every fresh process pays.

A job process costs ~10 s before it does anything (torch, transformers, peft, datasets, MLflow),
and the grid runs ~90 of them; on 2 cores that is a third of the ``tiny`` grid's wall time. During
a local ``snakemake`` run, ``serve`` imports that stack once and forks a child per job; the job's
own ``python -m zoomattn`` is the client (``run_in_worker``): it hands over its argv, environment,
working directory and stdin/stdout/stderr, forwards signals to the child and exits with its code.
The child is the job: it writes to the job's log, reads the job's environment, and dies with its
client (killing the client kills the job). With no server, or on a cluster where
``ZOOMATTN_WORKER`` is unset, a job runs in its own process as before.

A child forked after its parent initialised CUDA cannot use CUDA ("Cannot re-initialize CUDA in
forked subprocess"), so the server never touches the GPU: it preloads nothing that does, and if a
preloaded module did all the same, it does not serve (its jobs then run in their own processes).

A server removes its socket when it stops, and ``stop`` removes it after a server that could not
(SIGKILL). Where both died at once (``kill -9`` of the whole run), the next server to start
removes the sockets of its dead predecessors: those nobody listens on.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid

ENV_WORKER = "ZOOMATTN_WORKER"
SOCKET_PREFIX = "zoomattn-worker-"
# The third-party stack every job imports. The server preloads it, then every stage's module and
# the package modules each stage's function imports (the stage table in zoomattn/stages).
STACK = (
    "torch",
    "transformers.modeling_utils",
    "transformers.models.llama.modeling_llama",
    "datasets",
    "mlflow",
    "mlflow.store.tracking.sqlalchemy_store",
)
# peft imports bitsandbytes, which asks each GPU for its compute capability at import
# (bitsandbytes/cuda_specs.py): that initialises CUDA. Only a torch built without CUDA is safe.
PRELOAD_WITHOUT_CUDA = ("peft",)


def start(
    python: str, log: str, cwd: str | None = None, env: dict | None = None
) -> subprocess.Popen:
    """Start a server for this process's jobs (it stops when this process does) and name it in
    the environment its jobs inherit. ``cwd`` and ``env``: the server's (default: ours); its
    package is the one ``python -m zoomattn`` finds there."""
    path = os.path.join(tempfile.gettempdir(), f"{SOCKET_PREFIX}{uuid.uuid4().hex[:12]}.sock")
    os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [python, "-m", "zoomattn", "worker", "--socket", path],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
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
        proc.wait()
    path = proc.args[proc.args.index("--socket") + 1]
    with contextlib.suppress(FileNotFoundError):  # a server killed before it could remove it
        os.unlink(path)


def _listening(path: str) -> bool:
    """Whether a server accepts connections on this unix socket (True where it cannot tell)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError:  # another user's socket, a full backlog: leave it
        return True
    finally:
        probe.close()
    return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def remove_stale_sockets(directory: str) -> list[str]:
    """Remove the sockets that dead servers left in ``directory``: a served one that nobody
    listens on, and one a server died binding (named ``<socket>.<its pid>``). Returns them."""
    removed = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        stem, _, pid = name.rpartition(".")
        try:
            if not name.startswith(SOCKET_PREFIX) or not stat.S_ISSOCK(os.lstat(path).st_mode):
                continue
            if name.endswith(".sock"):
                stale = not _listening(path)
            else:
                stale = stem.endswith(".sock") and pid.isdigit() and not _pid_alive(int(pid))
            if stale:
                os.unlink(path)
                removed.append(path)
        except OSError:  # gone meanwhile, or another user's
            continue
    return removed


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


def _child(conn: socket.socket, fds: list[int], request: dict, entry, server_pid: int) -> None:
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
    import torch

    if torch.cuda._is_in_bad_fork():  # the server touched CUDA after all: never fail the job for it
        print(
            "zoomattn worker: the worker touched CUDA, so its children cannot use it;"
            " the job runs in its own process and the worker stops",
            file=sys.stderr,
            flush=True,
        )
        os.kill(server_pid, signal.SIGTERM)
        os._exit(1)  # the client, told no pid, runs the job itself
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


def preload_list() -> tuple[str, ...]:
    """What the server preloads: the stack and the stages' modules, and peft too where torch was
    built without CUDA."""
    import torch

    from zoomattn.code_hash import stage_modules

    preload = (*STACK, *stage_modules())
    cpu_only = torch.version.cuda is None and torch.version.hip is None
    return (*preload, *PRELOAD_WITHOUT_CUDA) if cpu_only else preload


def _why_children_cannot_use_cuda() -> str | None:
    """What made a child forked now unable to use CUDA, or None if it can."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    if torch.cuda.is_initialized():
        return "a preloaded module initialised CUDA"
    # Asking the driver (cudaGetDeviceCount) without initialising CUDA breaks forks just the same;
    # only a forked child tells.
    pid = os.fork()
    if pid == 0:
        os._exit(1 if torch.cuda._is_in_bad_fork() else 0)
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
        return "a preloaded module asked the CUDA driver"
    return None


def serve(path: str, preload: tuple[str, ...] | None = None, entry: str = ENTRY) -> None:
    """Preload the job stack (``preload_list()`` by default), then fork a child per client until
    SIGTERM or the parent exits.

    Each child runs ``entry`` (``module:function``) on the client's arguments. A server whose
    preload touched CUDA does not serve, so that every job, GPU or not, runs in its own process.
    """
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    # torch.cuda.is_available() then asks NVML, which leaves CUDA alone, instead of the driver.
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    t0 = time.time()
    for name in preload_list() if preload is None else preload:
        importlib.import_module(name)
    module, function = entry.split(":")
    run = getattr(importlib.import_module(module), function)
    why = _why_children_cannot_use_cuda()
    if why:
        print(f"zoomattn worker: not serving: {why}; jobs run in their own processes", flush=True)
        return
    parent, server_pid = os.getppid(), os.getpid()
    for stale in remove_stale_sockets(os.path.dirname(path) or "."):
        print(f"zoomattn worker: removed the socket of a dead worker: {stale}", flush=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{path}.{os.getpid()}"
    server.bind(tmp)
    server.listen(16)
    os.replace(tmp, path)  # clients see the socket only once it is listening
    server.settimeout(0.2)  # how soon a SIGTERM (stop) is seen: accept() resumes after it
    print(f"zoomattn worker: ready in {time.time() - t0:.1f} s at {path}", flush=True)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGHUP):  # stop, and remove the socket
        signal.signal(sig, lambda *_: stopping.set())
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
                if not first:  # a probe (remove_stale_sockets of another server): no request
                    conn.close()
                    continue
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
                _child(conn, fds, request, run, server_pid)
            for fd in fds:
                os.close(fd)
            conn.close()
    finally:
        server.close()
        if os.path.exists(path):
            os.unlink(path)
