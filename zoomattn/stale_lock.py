"""`make run` after a `kill -9`: the killed run's Snakemake lock is removed once no process of it
is left, so the same command simply goes on.

Snakemake locks the working directory for the length of a run (``.snakemake/locks``) and a run
killed with SIGKILL cannot remove its lock; the next run then stops with "Directory cannot be
locked". The lock is stale when no process works in this directory: no ``snakemake`` (a live run
keeps its lock, and Snakemake's own error is then right) and no ``python -m zoomattn`` job, which
outlives a ``kill -9`` of Snakemake alone and would write its output beside the rerun. Such jobs
are waited for; they end within a job's time.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)
WAIT_SECONDS = 600


def _ancestors() -> set[int]:
    """This process and those above it (`make run`'s shell names zoomattn too)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            pid = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return pids


def _processes_in(root: Path) -> list[tuple[int, str]]:
    """(pid, command line) of every process but this one's line whose working directory is
    ``root``."""
    found, mine = [], _ancestors()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) in mine:
            continue
        try:
            if Path(os.readlink(proc / "cwd")) != root:
                continue
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        found.append((int(proc.name), " ".join(a.decode(errors="replace") for a in argv if a)))
    return found


def run_processes(root: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(snakemake processes, zoomattn job processes) working in ``root``."""
    procs = _processes_in(root.resolve())
    snakemakes = [p for p in procs if "snakemake" in p[1] and "-m zoomattn" not in p[1]]
    jobs = [p for p in procs if "-m zoomattn" in p[1] and " worker " not in p[1] + " "]
    return snakemakes, jobs


def has_lock(root: Path) -> bool:
    locks = root / ".snakemake" / "locks"
    return locks.is_dir() and any(locks.iterdir())


def unlock_if_stale(root: Path, snakemake_args: list[str], wait: float = WAIT_SECONDS) -> str:
    """Remove a stale lock with ``snakemake --unlock`` (the run's own arguments); return what was
    done: "none" (no lock), "live" (a run holds it: left alone) or "unlocked"."""
    if snakemake_args[:1] == ["--"]:
        snakemake_args = snakemake_args[1:]
    if not has_lock(root):
        return "none"
    deadline = time.monotonic() + wait
    while True:
        snakemakes, jobs = run_processes(root)
        if snakemakes:
            log.info("a snakemake run holds the lock here (pid %d): left alone", snakemakes[0][0])
            return "live"
        if not jobs:
            break
        if time.monotonic() > deadline:
            pids = " ".join(str(pid) for pid, _ in jobs)
            raise RuntimeError(
                f"jobs of a killed run still work in {root} after {wait:.0f} s (pids {pids}): "
                f"stop them (kill {pids}), then run again"
            )
        log.info("waiting for %d job(s) of the killed run to end: %s", len(jobs), jobs[0][1][:80])
        time.sleep(2)
    log.info("removing the lock a killed run left in %s (no process of it is alive)", root)
    cmd = [sys.executable, "-m", "snakemake", "--unlock", *snakemake_args]
    subprocess.run(cmd, cwd=root, check=True, capture_output=True, text=True)
    return "unlocked"
