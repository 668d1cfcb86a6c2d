"""What each rule asks the scheduler for: config ``resources`` (per rule kind) + site ``cluster``.

Locally, Snakemake uses ``threads``, ``mem_mb`` and ``gpu`` to schedule jobs on the cores and
GPUs it was given (``snakemake -j N --resources gpu=M``); through ``snakemake --profile slurm``
the executor plugin turns the same resources into the ``sbatch`` request (``--cpus-per-task`` or
``--cpus-per-gpu``, ``--gpus``, ``--nodes``, ``--mem``, ``-t``, ``--partition``, ``--account``).
Memory grows with each retry (attempt × ``mem_mb``), so a job killed for memory comes back with
more.

``resources.<kind>`` describes one process. A fine-tune of N processes (``finetune.processes``,
started by torchrun inside the job) asks for N times its CPUs, memory and GPUs, all on one node
(``torchrun --standalone``). It stays one Slurm task: torchrun starts the processes, and the
plugin would turn a ``tasks`` resource of a GPU job into ``--ntasks-per-gpu``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from zoomattn.placement import job_gpus, plan

SITE_DEFAULTS = {"account": None, "partition": None, "gpu_partition": None, "gpu_model": None}
KIND_DEFAULTS = {"gpus": 0, "retries": 0}
# what a multi-process fine-tune runs; zoomattn/training/distributed.py starts exactly this
LAUNCHER = "torchrun --standalone --nproc_per_node {n}"


def threads(cfg: dict, kind: str, processes: int = 1) -> int:
    return cfg["resources"][kind]["cpus"] * processes


def retries(cfg: dict, kind: str) -> int:
    return cfg["resources"][kind]["retries"]


def rule_resources(cfg: dict, kind: str, processes: int = 1) -> dict:
    """Snakemake ``resources`` of a job of a rule kind running ``processes`` processes
    (``mem_mb`` is a function of the attempt). GPUs are what the kind's jobs are planned to use
    (``placement.plan``), for each process: none when ``device: cpu``."""
    r, site = cfg["resources"][kind], cfg["cluster"]
    mem_mb = r["mem_mb"] * processes
    res = {"mem_mb": lambda wildcards, attempt: mem_mb * attempt, "runtime": r["runtime"]}
    partition = site["partition"]
    gpus = job_gpus(plan(cfg, kind), processes)
    if gpus:
        res["gpu"] = gpus
        res["cpus_per_gpu"] = -(-threads(cfg, kind, processes) // gpus)
        res["nodes"] = 1  # --gpus=N alone may spread the cards over nodes
        if site["gpu_model"]:
            res["gpu_model"] = site["gpu_model"]
        partition = site["gpu_partition"] or partition
    if partition:
        res["slurm_partition"] = partition
    if site["account"]:
        res["slurm_account"] = site["account"]
    return res


def with_defaults(cfg: dict) -> dict:
    """Fill the optional ``cluster`` keys and per-kind ``gpus``/``retries`` (in place)."""
    cfg["cluster"] = {**SITE_DEFAULTS, **(cfg.get("cluster") or {})}
    cfg["resources"] = {k: {**KIND_DEFAULTS, **v} for k, v in cfg["resources"].items()}
    return cfg


def launcher(processes: int) -> str | None:
    """How a job of ``processes`` processes starts them (None: one process, no launcher)."""
    return LAUNCHER.format(n=processes) if processes > 1 else None


def launch_message(model: str, processes: int, threads: int, resources) -> str:
    """The line Snakemake prints for a multi-process fine-tune (its ``message``; empty for one
    process, which keeps Snakemake's own job listing): the launcher and what the job asks for."""
    if processes == 1:
        return ""
    asked = ", ".join(
        f"{key}={resources.get(key)}"
        for key in ("gpu", "cpus_per_gpu", "nodes", "mem_mb", "runtime", "slurm_partition")
        if resources.get(key) is not None
    )
    return (
        f"finetune {model}: {processes} processes, {launcher(processes)}\n"
        f"    threads: {threads}\n    resources: {asked}"
    )


@dataclass(frozen=True)
class JobKind:
    """What every rule of one kind asks for: its rules' ``threads``, ``resources`` and
    ``retries``."""

    threads: int | Callable
    resources: dict
    retries: int

    @classmethod
    def of(cls, cfg: dict, kind: str, processes: int = 1) -> JobKind:
        return cls(
            threads(cfg, kind, processes), rule_resources(cfg, kind, processes), retries(cfg, kind)
        )

    @classmethod
    def per_job(cls, cfg: dict, kind: str, processes_of: Callable) -> JobKind:
        """A kind whose jobs run different numbers of processes (``processes_of(wildcards)``, a
        study's ``finetune.processes``): threads and each resource a function of the job."""
        by_processes = cache(lambda n: cls.of(cfg, kind, n))

        def job(wildcards) -> JobKind:
            return by_processes(processes_of(wildcards))

        def resource(key: str) -> Callable:
            if key == "mem_mb":
                return lambda wildcards, attempt: job(wildcards).resources[key](wildcards, attempt)
            return lambda wildcards: job(wildcards).resources[key]

        return cls(
            threads=lambda wildcards: job(wildcards).threads,
            resources={key: resource(key) for key in by_processes(1).resources},
            retries=retries(cfg, kind),
        )
