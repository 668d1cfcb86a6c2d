"""The smoke grid through the shipped profile (`snakemake --profile slurm`) on a real Slurm.

Only the site values change for the test cluster (its partition) and the plugin's first status
check comes sooner; everything else is the profile and config a user gets. One thing differs from
a real cluster: every Slurm job's ``python -m zoomattn`` hands its stage to a warm worker the test
starts on this, the cluster's one node (zoomattn/worker.py, as local runs do), instead of paying
~10 s of imports itself: 17 fresh processes on two cores made this module 230 s of the suite,
with the worker 130 s. The Slurm job still runs the client, whose environment (``SLURM_JOB_ID``
included) the stage runs in; stages in fresh processes are what the interruption test
(test_interruptions.py) and the resume tests check. The cluster needs root
(apt install when Slurm is missing, daemons, /etc/slurm/slurm.conf); on a machine where that is
impossible, ZOOMATTN_SKIP_SLURM=1 skips this module with that reason. CI never sets it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
import yaml

from tests.workflow.scratch import SMOKE, copy_workflow, mlflow_runs, snakemake, warm_worker
from tests.workflow.slurm_cluster import PARTITION, one_node_cluster
from zoomattn.rate_limit import DROPPED

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("ZOOMATTN_SKIP_SLURM") == "1",
        reason="ZOOMATTN_SKIP_SLURM=1: no root to install and start a one-node Slurm here",
    ),
]


SLURM_K = [10]  # the smoke preset's first K only
SLURM_RATIOS = [0.9]  # the noise ratio of the attention analysis only


@pytest.fixture(scope="module")
def slurm_run(tmp_path_factory):
    """(workdir, cluster env, snakemake result) of the smoke grid run through Slurm."""
    wd = copy_workflow(tmp_path_factory.mktemp("workflow"))
    cluster_dir = tmp_path_factory.mktemp("slurm")
    # the worker loads while the cluster starts; it serves until the module's tests are done
    with warm_worker(wd) as wait_until_ready, one_node_cluster(cluster_dir) as env:
        site = wd / "site.yaml"
        # the side studies, OpAmp's second K and its clean noise ratio add jobs of kinds the rest
        # already sends through Slurm (each ~5-15 s of start-up there)
        site.write_text(
            yaml.safe_dump(
                {
                    "cluster": {"partition": PARTITION},
                    "presets": {
                        "smoke": {
                            "studies": {
                                "opamp": {
                                    "methods": {"opamp": {"K": SLURM_K}},
                                    "benchmarks": {"coqa_like": {"noise_ratios": SLURM_RATIOS}},
                                },
                                "rectification": None,
                                "mudaf": None,
                                "lkg": None,
                                "leaderboard": None,
                            }
                        }
                    },
                }
            )
        )
        wait_until_ready()
        done = snakemake(
            wd,
            "--profile",
            "slurm",
            *SMOKE,
            "--configfile",
            "config.yaml",
            str(site),
            "--slurm-init-seconds-before-status-checks",
            "5",
            env=env,
        )
        yield wd, env, done


def _scontrol(job_id: str, env: dict) -> dict:
    out = subprocess.run(
        ["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True, check=True
    ).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def test_every_job_ran_as_a_slurm_job_and_finished_in_mlflow(slurm_run):
    wd, _, done = slurm_run
    assert f"zoomattn: {DROPPED}" in done.stderr
    runs, default = mlflow_runs(wd)
    parents = [r for r in runs if r.data.tags.get("zoomattn.kind") == "invocation"]
    jobs = [r for r in runs if r.data.tags.get("zoomattn.kind") == "job"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert default == []
    n_job_logs = len(list((wd / "results/smoke/logs").rglob("*.log")))
    reporting = [r for r in jobs if r.data.tags["zoomattn.stage"] == "report"]
    assert len(jobs) == n_job_logs and len(reporting) == 1
    assert {r.info.status for r in jobs} == {"FINISHED"}
    assert all(r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for r in jobs)
    cluster_jobs = [r for r in jobs if r is not reporting[0]]
    ids = [r.data.tags.get("zoomattn.slurm_job_id") for r in cluster_jobs]
    assert None not in ids and len(set(ids)) == len(ids)  # one Slurm job per rule job
    assert "zoomattn.slurm_job_id" not in reporting[0].data.tags  # localrule: no Slurm job
    served = re.findall(r"job (\S+) ", (wd / "worker.log").read_text())
    assert len(served) == len(jobs)  # each Slurm job's stage ran in the worker (docstring)


def test_slurm_jobs_asked_for_the_configs_resources_on_the_site_partition(slurm_run):
    wd, env, _ = slurm_run
    cfg = yaml.safe_load((wd / "config.yaml").read_text())["presets"]["smoke"]["resources"]
    runs, _ = mlflow_runs(wd)
    for stage in ("pretrain", "finetune", "evaluate", "attention"):
        kind = "evaluate" if stage == "attention" else stage
        run = next(r for r in runs if r.data.tags.get("zoomattn.stage") == stage)
        job = _scontrol(run.data.tags["zoomattn.slurm_job_id"], env)
        assert job["JobState"] == "COMPLETED" and job["Partition"] == PARTITION
        assert int(job["NumCPUs"]) == cfg[kind]["cpus"], stage
        assert job["MinMemoryNode"] == f"{cfg[kind]['mem_mb']}M", stage
        assert job["TimeLimit"] == f"00:{cfg[kind]['runtime']:02d}:00", stage


def test_the_slurm_run_produces_the_same_outputs_as_a_local_one(slurm_run):
    wd, _, _ = slurm_run
    report = wd / "results/smoke/report/opamp"
    for name in (
        "README.md",
        "table3_cmrr.md",  # (no Table 4: the site file keeps one noise ratio)
        "table5_faitheval.md",
        "fig5_attention.png",
        "fig6_attention_k.png",
    ):
        assert (report / name).stat().st_size > 0, name
    metrics = list((wd / "results/smoke/eval").rglob("r*.json"))
    cfg = yaml.safe_load((wd / "config.yaml").read_text())["presets"]["smoke"]
    n_models = 2 + len(SLURM_K)  # the base, QLoRA and OpAmp at each K the site file keeps
    n_cells = len(SLURM_RATIOS) + 1  # coqa_like at the site file's ratios, faitheval_like at 0
    assert len(metrics) == n_models * n_cells
    assert all(json.loads(m.read_text())["n"] == cfg["data"]["n_eval"] for m in metrics)
    assert not list((wd / "results/smoke").rglob("*.partial"))
