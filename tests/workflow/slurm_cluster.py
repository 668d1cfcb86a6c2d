"""A real one-node Slurm cluster for tests: Debian's slurm-wlm (22.05) and munge, no systemd.

Installed with apt when missing (root needed), configured without cgroups or accounting
(docs/notes.md §4), started in the foreground as child processes and stopped by PID afterwards. The
config goes to the default path, /etc/slurm/slurm.conf: the executor plugin's job step drops
every ``SLURM_*`` variable (``SLURM_CONF`` too) before its inner ``srun``, which then only finds
the default file. A config there that this module did not write is never overwritten.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.polling import wait_until

PARTITION = "debug"
CONF = Path("/etc/slurm/slurm.conf")
MARKER = "# written by zoomattn's test cluster (tests/workflow/slurm_cluster.py)"


def ensure_installed() -> None:
    if all(shutil.which(b) for b in ("slurmctld", "slurmd", "munged", "sbatch")):
        return
    if os.geteuid() != 0:
        raise RuntimeError("Slurm is not installed and only root can apt-get install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "slurm-wlm", "munge"]
    if subprocess.run(install, env=env, capture_output=True).returncode:
        subprocess.run(["apt-get", "update", "-q"], env=env, check=True, capture_output=True)
        subprocess.run(install, env=env, check=True, capture_output=True)


def _munge_works() -> bool:
    cred = subprocess.run(["munge", "-n"], capture_output=True)
    if cred.returncode:
        return False
    return subprocess.run(["unmunge"], input=cred.stdout, capture_output=True).returncode == 0


def _start_munge(procs: list[subprocess.Popen]) -> None:
    if _munge_works():  # a munged of this machine is already serving
        return
    key = Path("/etc/munge/munge.key")
    if not key.exists():
        subprocess.run(["mungekey", "--create", "--keyfile", str(key)], check=True)
        shutil.chown(key, "munge", "munge")
        key.chmod(0o400)
    run_dir = Path("/run/munge")
    run_dir.mkdir(parents=True, exist_ok=True)
    shutil.chown(run_dir, "munge", "munge")
    munged = ["runuser", "-u", "munge", "--", "munged", "--foreground"]
    procs.append(subprocess.Popen(munged, stderr=subprocess.DEVNULL))
    _wait(_munge_works, 20, "munged did not start")


def write_config(workdir: Path) -> Path:
    """slurm.conf for this machine as one node in partition ``debug``, state under workdir."""
    if CONF.exists() and MARKER not in CONF.read_text():
        raise RuntimeError(
            f"{CONF} exists and is not ours: not overwriting a real cluster's config"
        )
    node = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True)
    node_line = node.stdout.splitlines()[0]  # NodeName=… CPUs=… RealMemory=…
    host = socket.gethostname().split(".")[0]
    state, spool = workdir / "state", workdir / "spool"
    state.mkdir(parents=True, exist_ok=True)
    spool.mkdir(parents=True, exist_ok=True)
    CONF.parent.mkdir(parents=True, exist_ok=True)
    CONF.write_text(
        "\n".join(
            [
                MARKER,
                "ClusterName=zoomattn-test",
                f"SlurmctldHost={host}",
                "SlurmUser=root",
                "AuthType=auth/munge",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU_Memory",
                "SchedulerType=sched/backfill",
                "DefMemPerCPU=512",
                "MailProg=/bin/true",
                # >= 3 x the profile's 40 s status wait (what the profile needs); longer so the
                # test can still `scontrol show job` every job after a slow run on a busy machine
                "MinJobAge=1800",
                "ReturnToService=2",
                f"StateSaveLocation={state}",
                f"SlurmdSpoolDir={spool}",
                f"SlurmctldPidFile={workdir / 'slurmctld.pid'}",
                f"SlurmdPidFile={workdir / 'slurmd.pid'}",
                f"SlurmctldLogFile={workdir / 'slurmctld.log'}",
                f"SlurmdLogFile={workdir / 'slurmd.log'}",
                node_line,
                f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    return CONF


@contextlib.contextmanager
def one_node_cluster(workdir: Path) -> Iterator[dict]:
    """Start munge (if not running), slurmctld and slurmd; yield the clients' environment."""
    ensure_installed()
    procs: list[subprocess.Popen] = []
    try:
        _start_munge(procs)
        conf = write_config(workdir)
        env = {**os.environ, "SLURM_CONF": str(conf)}
        for daemon in (["slurmctld", "-D", "-i"], ["slurmd", "-D"]):  # they log to workdir
            cmd = [*daemon, "-f", str(conf)]
            procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL))

        def srun_works() -> bool:  # sinfo may say idle before slurmd has really registered
            srun = ["srun", "-N1", "-t", "1", "true"]
            return subprocess.run(srun, env=env, capture_output=True, timeout=30).returncode == 0

        _wait(srun_works, 90, f"srun never worked; see {workdir}/slurmctld.log, slurmd.log")
        yield env
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if CONF.exists() and MARKER in CONF.read_text():
            CONF.unlink()


def _wait(ok, seconds: float, message: str) -> None:
    if not wait_until(ok, seconds, interval=1):
        raise RuntimeError(message)
