"""`make run` after a kill -9: a real Snakemake lock, removed only when no process of its run is
left."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zoomattn.stale_lock import has_lock, run_processes, unlock_if_stale

SNAKEFILE = """
rule all:
    input: "done.txt"

rule slow:
    output: "done.txt"
    shell: "sleep 60 && touch {output}"
"""


def _snakemake(root: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "snakemake", "-j", "1", *args],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _locked_run(root: Path) -> subprocess.Popen:
    (root / "Snakefile").write_text(SNAKEFILE)
    run = _snakemake(root)
    deadline = time.time() + 60
    while not has_lock(root) and time.time() < deadline:
        time.sleep(0.2)
    assert has_lock(root), "snakemake did not lock its directory"
    return run


def _kill_group(run: subprocess.Popen) -> None:
    os.killpg(run.pid, signal.SIGKILL)  # the run and its job, as kill -9 of a whole run
    run.wait()


def test_without_a_lock_nothing_is_done(tmp_path):
    assert unlock_if_stale(tmp_path, []) == "none"


def test_the_lock_of_a_killed_run_is_removed_and_the_next_run_starts(tmp_path):
    _kill_group(_locked_run(tmp_path))
    (tmp_path / "Snakefile").write_text(SNAKEFILE.replace("sleep 60 && ", ""))
    rerun = [sys.executable, "-m", "snakemake", "-j", "1"]
    blocked = subprocess.run(rerun, cwd=tmp_path, capture_output=True, text=True)
    assert blocked.returncode != 0 and "cannot be locked" in blocked.stdout + blocked.stderr
    assert unlock_if_stale(tmp_path, ["--"]) == "unlocked"
    assert not has_lock(tmp_path)
    subprocess.run(rerun, cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "done.txt").exists()


def test_the_lock_of_a_live_run_is_left_alone(tmp_path):
    run = _locked_run(tmp_path)
    try:
        assert unlock_if_stale(tmp_path, []) == "live"
        assert has_lock(tmp_path)
    finally:
        _kill_group(run)


def test_a_job_that_outlived_its_killed_run_is_waited_for_then_named(tmp_path):
    run = _locked_run(tmp_path)
    os.kill(run.pid, signal.SIGKILL)  # snakemake alone: its job goes on
    run.wait()
    job = subprocess.Popen(  # a job process of the run, as the rules start them
        [sys.executable, "-c", "import time; time.sleep(60)", "-m zoomattn", "finetune"],
        cwd=tmp_path,
    )
    try:
        # Popen can return before the kernel has set the new program's command line (it reads
        # empty for a moment, more so under load): the job of this scenario has long been running
        deadline = time.time() + 30
        while job.pid not in [pid for pid, _ in run_processes(tmp_path)[1]]:
            assert time.time() < deadline, "the job process never showed its command line"
            time.sleep(0.05)
        with pytest.raises(RuntimeError, match=rf"still work in .*pids .*{job.pid}"):
            unlock_if_stale(tmp_path, [], wait=1)
        assert has_lock(tmp_path)
    finally:
        job.kill()
        job.wait()
        with contextlib.suppress(ProcessLookupError):  # the run's own job, if still there
            os.killpg(run.pid, signal.SIGKILL)
