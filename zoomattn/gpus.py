"""Cards for a local GPU job: each job process claims its own, so jobs never share a card.

``snakemake --resources gpu=N`` caps how many GPU jobs run at once, but a local run does not tell
a job which card is its: every job would see all of them and use card 0. A job planned for CUDA
calls ``claim_for_spec`` before anything initialises CUDA in its process. ``claim`` takes a free
card by locking a file named after its UUID in LOCK_DIR (``flock``, shared by every process on the
machine, whoever runs it), then sets ``CUDA_VISIBLE_DEVICES`` to the claimed UUIDs. The lock lives
as long as the process: a finished, failed or killed (even ``kill -9``) job frees its card. With
every card taken, it waits. Under Slurm a job's cards are its own already: nothing is claimed.

A fine-tune of N processes claims N cards (one per process) before it starts itself again under
torchrun: the locks are inherited through that exec and live as long as torchrun, and the
processes torchrun starts claim nothing (each takes the card of its LOCAL_RANK among the N).
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import sys
import time

from zoomattn.placement import Placement, job_gpus, processes

log = logging.getLogger(__name__)

LOCK_DIR = "/tmp/zoomattn-gpus"  # not $TMPDIR: every job on the machine, anyone's, looks here
ENV_LOCK_DIR = "ZOOMATTN_GPU_LOCKS"  # another lock directory (tests)
ENV_LISTING = "ZOOMATTN_GPU_LISTING"  # a file with nvidia-smi's answer, read instead (tests)
QUERY = ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"]
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")  # as zoomattn/training/distributed.py reads
PLANNED = (
    "the job was planned for CUDA (config `device`, or `auto` with resources.<kind>.gpus > 0); "
    "set `device: cpu` (e.g. --config device=cpu) to run it on the CPU"
)

_held: list[int] = []  # the lock files of the claimed cards, open until the process exits


def _listing() -> str:
    fake = os.environ.get(ENV_LISTING)
    if fake:
        with open(fake) as f:
            return f.read()
    try:
        done = subprocess.run(QUERY, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise RuntimeError(f"no GPU: nvidia-smi is not on PATH; {PLANNED}") from None
    if done.returncode != 0:
        why = (done.stdout + done.stderr).strip()
        raise RuntimeError(f"no GPU: nvidia-smi failed ({why}); {PLANNED}")
    return done.stdout


def cards(listing: str | None = None) -> list[tuple[str, str]]:
    """(index, UUID) of each card this process may use: nvidia-smi's (or ``listing``, its output),
    narrowed to CUDA_VISIBLE_DEVICES when that is set."""
    listing = _listing() if listing is None else listing
    found = []
    for line in listing.splitlines():
        index, _, uuid = (part.strip() for part in line.partition(","))
        if uuid:
            found.append((index, uuid))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return found
    # Indices as nvidia-smi numbers them (CUDA numbers cards the same way on a machine with one
    # card model, or with CUDA_DEVICE_ORDER=PCI_BUS_ID); UUIDs, or their unique prefixes, as is.
    wanted = [v.strip() for v in visible.split(",") if v.strip()]
    return [
        (index, uuid)
        for index, uuid in found
        if any(w == index or (w.startswith("GPU-") and uuid.startswith(w)) for w in wanted)
    ]


def _try_lock(lock_dir: str, uuid: str) -> int | None:
    # Read-only and without O_CREAT where it exists: a lock file of another user's job then opens
    # (Linux's protected_regular refuses O_CREAT on it in a sticky directory).
    path = os.path.join(lock_dir, f"{uuid}.lock")
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def claim(
    n: int, listing: str | None = None, lock_dir: str | None = None, poll: float = 0.5
) -> list[str]:
    """Give this process ``n`` cards for its lifetime (waiting while none is free) and set
    CUDA_VISIBLE_DEVICES to their UUIDs; return them. ``listing``: nvidia-smi's output, to use
    instead of asking it."""
    if os.environ.get("SLURM_JOB_ID"):
        return [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
    if n < 1:
        raise ValueError(f"a CUDA job claims at least one GPU, not {n}")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise RuntimeError("claim GPUs before CUDA is initialised: CUDA reads the cards only once")
    pool = cards(listing)
    if not pool:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" among CUDA_VISIBLE_DEVICES={visible}" if visible is not None else ""
        raise RuntimeError(f"no GPU: nvidia-smi lists none{where}; {PLANNED}")
    if len(pool) < n:
        raise RuntimeError(f"the job needs {n} GPUs, and this machine has {len(pool)} to give")
    lock_dir = lock_dir or os.environ.get(ENV_LOCK_DIR) or LOCK_DIR
    os.makedirs(lock_dir, exist_ok=True)
    try:
        os.chmod(lock_dir, 0o1777)  # like /tmp: other users' jobs lock the same cards
    except PermissionError:
        pass  # someone else's directory: they made it so
    waiting = False
    while True:
        got = []
        for _, uuid in pool:
            fd = _try_lock(lock_dir, uuid)
            if fd is not None:
                got.append((uuid, fd))
                if len(got) == n:
                    break
        if len(got) == n:
            break
        # Hold nothing while waiting: two 2-card jobs holding one card each would wait forever.
        for _, fd in got:
            os.close(fd)
        if not waiting:
            log.info(
                "waiting for a free GPU: the job needs %d, other jobs hold %d of the %d",
                n,
                len(pool) - len(got),
                len(pool),
            )
            waiting = True
        time.sleep(poll)
    for _, fd in got:  # kept through the exec into torchrun (zoomattn/training/distributed.py)
        os.set_inheritable(fd, True)
    _held.extend(fd for _, fd in got)
    ids = [uuid for uuid, _ in got]
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
    log.info("claimed GPU %s", ",".join(ids))
    return ids


def claim_for_spec(spec: dict) -> list[str] | None:
    """The job's cards when its spec plans it for CUDA (``spec["device"]``, a Placement): one set
    for each of its processes; else None. A process torchrun started has its launcher's cards."""
    placement = Placement.from_spec(spec.get("device"))
    if placement.device != "cuda":
        return None
    if all(name in os.environ for name in TORCHRUN_ENV):
        return [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
    return claim(job_gpus(placement, processes(spec)))
