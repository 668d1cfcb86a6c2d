"""What each rule asks the scheduler for: config ``resources`` (per rule kind) + site ``cluster``.

Locally, Snakemake uses ``threads`` and ``mem_mb`` to schedule jobs on the cores it was given;
through ``snakemake --profile slurm`` the executor plugin turns the same resources into the
``sbatch`` request (``--cpus-per-task`` or ``--cpus-per-gpu``, ``--gpus``, ``--mem``, ``-t``,
``--partition``, ``--account``). Memory grows with each retry (attempt × ``mem_mb``), so a job
killed for memory comes back with more.
"""

from __future__ import annotations

from dataclasses import dataclass

from zoomattn.placement import plan

SITE_DEFAULTS = {"account": None, "partition": None, "gpu_partition": None, "gpu_model": None}
KIND_DEFAULTS = {"gpus": 0, "retries": 0}


def threads(cfg: dict, kind: str) -> int:
    return cfg["resources"][kind]["cpus"]


def retries(cfg: dict, kind: str) -> int:
    return cfg["resources"][kind]["retries"]


def rule_resources(cfg: dict, kind: str) -> dict:
    """Snakemake ``resources`` of a rule kind (``mem_mb`` is a function of the attempt). GPUs are
    what the kind's jobs are planned to use (``placement.plan``): none when ``device: cpu``."""
    r, site = cfg["resources"][kind], cfg["cluster"]
    mem_mb = r["mem_mb"]
    res = {"mem_mb": lambda wildcards, attempt: mem_mb * attempt, "runtime": r["runtime"]}
    partition = site["partition"]
    gpus = plan(cfg, kind).gpus
    if gpus:
        res["gpu"] = gpus
        res["cpus_per_gpu"] = -(-r["cpus"] // gpus)
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


@dataclass(frozen=True)
class JobKind:
    """What every rule of one kind asks for: its rules' ``threads``, ``resources`` and
    ``retries``."""

    threads: int
    resources: dict
    retries: int

    @classmethod
    def of(cls, cfg: dict, kind: str) -> JobKind:
        return cls(threads(cfg, kind), rule_resources(cfg, kind), retries(cfg, kind))
