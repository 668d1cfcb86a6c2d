"""Closing the MLflow runs whose process is gone (a ``kill -9``, a lost node).

Every run names the process it lives in: host, pid and the pid's start time. On this host a
run's process is probed directly. A job on another host (a Slurm node) cannot be: it counts as
dead once its invocation is (dead or ended) and Slurm no longer runs its job. An invocation on
another host is never closed: nothing here can tell whether it still runs.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

TAG_HOST, TAG_PID, TAG_PID_START = "zoomattn.host", "zoomattn.pid", "zoomattn.pid_start"
TAG_PARENT = "mlflow.parentRunId"
TAG_SLURM_JOB = "zoomattn.slurm_job_id"
# squeue states of a job that no longer runs (it lists such a job for a few minutes after its end)
SLURM_ENDED = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL"}
SLURM_ENDED |= {"OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT"}


def _proc_stat(pid: int) -> list[str] | None:
    """Fields 3 on of /proc/<pid>/stat (state first, start time at index 19); None: no such pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat[stat.rindex(")") + 2 :].split()  # the name in (...) may hold spaces


def process_tags(pid: int) -> dict[str, str]:
    """Which process a run lives in: host, pid and the pid's start time (clock ticks since boot,
    exact and immune to clock changes; "" where there is no /proc), which tells a reused pid."""
    fields = _proc_stat(pid)
    return {
        TAG_HOST: socket.gethostname(),
        TAG_PID: str(pid),
        TAG_PID_START: fields[19] if fields else "",
    }


def process_gone(tags: dict) -> bool | None:
    """Whether the process a run's tags name is gone; None where this host cannot tell (another
    host's process, or a run that names none)."""
    pid = tags.get(TAG_PID, "")
    if tags.get(TAG_HOST) != socket.gethostname() or not pid.isdigit():
        return None
    if not Path("/proc/self/stat").exists():  # no procfs (macOS): only whether the pid exists
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False
    fields = _proc_stat(int(pid))
    if fields is None or fields[0] in ("Z", "X"):  # Z: exited, not reaped yet
        return True
    recorded = tags.get(TAG_PID_START, "")
    return bool(recorded) and fields[19] != recorded  # the pid now names another process


def _slurm_job_running(job_id: str | None) -> bool:
    """Whether Slurm still runs (or will run) this job; True where squeue cannot say."""
    if not job_id or not shutil.which("squeue"):
        return False
    try:
        done = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return True
    if done.returncode:  # a job id Slurm no longer knows ended long ago
        return "Invalid job id" not in done.stderr
    state = done.stdout.strip()
    return bool(state) and state not in SLURM_ENDED


def _search_all(client, experiment_ids: list[str], filter_string: str) -> list:
    """Every run that matches, over as many pages as it takes."""
    runs, token = [], None
    while experiment_ids:
        page = client.search_runs(experiment_ids, filter_string, page_token=token)
        runs += list(page)
        token = page.token
        if not token:
            break
    return runs


def _status(client, run_id: str) -> str | None:
    from mlflow.exceptions import MlflowException

    try:
        return client.get_run(run_id).info.status
    except MlflowException:
        return None


class _DeadRuns:
    """Why each RUNNING run is dead (None: alive, or nothing tells that it is not)."""

    def __init__(self, client, running: list):
        self.client = client
        self.running = {r.info.run_id: r for r in running}
        self.verdicts: dict[str, str | None] = {}

    def why(self, run) -> str | None:
        run_id = run.info.run_id
        if run_id not in self.verdicts:
            self.verdicts[run_id] = None  # while deciding: a parent cycle reads as alive
            self.verdicts[run_id] = self._decide(run)
        return self.verdicts[run_id]

    def _decide(self, run) -> str | None:
        tags = run.data.tags
        gone = process_gone(tags)
        if gone is not None:
            return f"its process {tags[TAG_PID]} on {tags[TAG_HOST]} is gone" if gone else None
        # Another host's process (a Slurm node): it is dead once its invocation is, unless
        # Slurm still runs its job. An invocation on another host cannot be probed: left alone.
        parent_id = tags.get(TAG_PARENT)
        if not parent_id:
            return None
        if parent_id in self.running:
            parent_dead = self.why(self.running[parent_id])
            ended = parent_dead and f"its invocation {parent_id} is dead ({parent_dead})"
        else:
            status = _status(self.client, parent_id)
            ended = status not in (None, "RUNNING") and f"its invocation {parent_id} {status}"
        if not ended or _slurm_job_running(tags.get(TAG_SLURM_JOB)):
            return None
        return ended

    def last_activity(self, run) -> int:
        """The last time (ms) a dead run is known to have done anything."""
        run_id, times = run.info.run_id, [run.info.start_time or 0]
        for key in run.data.metrics:
            times += [m.timestamp for m in self.client.get_metric_history(run_id, key)]
        if run.data.tags.get("zoomattn.kind") == "invocation":
            exp = run.info.experiment_id
            children = _search_all(self.client, [exp], f"tags.`{TAG_PARENT}` = '{run_id}'")
            times += [c.info.end_time or self.last_activity(c) for c in children]
        return max(times)


def close_dead_runs(
    client, experiment_ids: list[str], closed_by: str, keep: str = ""
) -> dict[str, str]:
    """Close as KILLED every RUNNING run of these experiments whose process is gone, tagged
    with who closed it and why; ``keep``: a run to leave alone. Returns run id -> why."""
    running = _search_all(client, experiment_ids, "attributes.status = 'RUNNING'")
    running = [r for r in running if r.info.run_id != keep]
    dead = _DeadRuns(client, running)
    closed = {}
    for run in running:
        why = dead.why(run)
        if why is None or _status(client, run.info.run_id) != "RUNNING":  # or it just ended
            continue
        end = dead.last_activity(run)
        client.set_tag(run.info.run_id, "zoomattn.closed_by", closed_by)
        client.set_tag(run.info.run_id, "zoomattn.closed_reason", why)
        client.set_terminated(run.info.run_id, "KILLED", end_time=end)
        closed[run.info.run_id] = why
    return closed
