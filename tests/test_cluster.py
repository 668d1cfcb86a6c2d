import copy
import os
import subprocess
import sys
from functools import cache
from types import SimpleNamespace

import yaml

from zoomattn.cluster import (
    JobKind,
    launch_message,
    launcher,
    retries,
    rule_resources,
    threads,
)
from zoomattn.config import ROOT, load_config

RAW = yaml.safe_load((ROOT / "config.yaml").read_text())


@cache  # a config is read, never changed, by these tests
def _config(preset="tiny", **cluster):
    raw = copy.deepcopy(RAW)
    raw["preset"] = preset
    raw["cluster"] = {**raw.get("cluster", {}), **cluster}
    return load_config(raw)


def test_cpu_jobs_ask_for_their_threads_memory_and_time_on_the_site_partition():
    cfg = _config(partition="cpu", account="lab", gpu_partition="gpu")
    res = rule_resources(cfg, "pretrain")
    want = RAW["presets"]["tiny"]["resources"]["pretrain"]
    assert threads(cfg, "pretrain") == want["cpus"]
    assert res["runtime"] == want["runtime"] and res["mem_mb"](None, 1) == want["mem_mb"]
    assert res["slurm_partition"] == "cpu" and res["slurm_account"] == "lab"
    assert "gpu" not in res and "cpus_per_gpu" not in res


def test_memory_grows_with_each_retry():
    cfg = _config()
    mem = rule_resources(cfg, "finetune")["mem_mb"]
    assert [mem(None, a) for a in (1, 2, 3)] == [mem(None, 1) * a for a in (1, 2, 3)]
    assert retries(cfg, "finetune") == RAW["presets"]["tiny"]["resources"]["finetune"]["retries"]


def test_gpu_jobs_go_to_the_gpu_partition_with_the_site_gpu_model():
    cfg = _config("paper", partition="cpu", gpu_partition="gpu", gpu_model="a100")
    want = RAW["presets"]["paper"]["resources"]["finetune"]
    res = rule_resources(cfg, "finetune")
    assert res["gpu"] == want["gpus"] and res["gpu_model"] == "a100"
    assert res["cpus_per_gpu"] * want["gpus"] >= want["cpus"]
    assert res["slurm_partition"] == "gpu"
    assert rule_resources(cfg, "data")["slurm_partition"] == "cpu"


def test_unset_site_values_leave_the_choice_to_the_cluster():
    res = rule_resources(_config("paper"), "finetune")
    assert not {"slurm_partition", "slurm_account", "gpu_model"} & set(res)
    assert res["gpu"] == 1


def _snakemake_args(monkeypatch, *argv):
    """The settings a `snakemake` command line from the repository root runs with, profiles read."""
    from snakemake.cli import parse_args

    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("SNAKEMAKE_PROFILE", raising=False)
    return parse_args(list(argv))[1]


def test_a_local_run_reads_the_default_profile(monkeypatch):
    args = _snakemake_args(monkeypatch, "-j", "2")
    assert args.rerun_incomplete and args.show_failed_logs
    assert args.jobs == 2 and args.executor in (None, "local")


def test_the_default_profile_leaves_the_slurm_profile_its_executor_and_jobs(monkeypatch):
    slurm = yaml.safe_load((ROOT / "slurm/profile.yaml").read_text())
    args = _snakemake_args(monkeypatch, "--profile", "slurm")
    assert args.executor == "slurm" and args.jobs == slurm["jobs"]
    assert args.keep_going and args.rerun_incomplete and args.show_failed_logs


def test_the_default_profile_can_be_switched_off(monkeypatch):
    args = _snakemake_args(monkeypatch, "-j", "2", "--workflow-profile", "none")
    assert not args.rerun_incomplete and not args.show_failed_logs


def test_a_fine_tune_of_n_processes_asks_for_n_times_one_process_with_its_gpus_on_one_node():
    cfg = _config("paper")
    one = RAW["presets"]["paper"]["resources"]["finetune"]
    res = rule_resources(cfg, "finetune", processes=8)
    assert threads(cfg, "finetune", 8) == 8 * one["cpus"]
    assert res["gpu"] == 8 and res["cpus_per_gpu"] == one["cpus"] and res["nodes"] == 1
    assert [res["mem_mb"](None, a) for a in (1, 2)] == [8 * one["mem_mb"], 16 * one["mem_mb"]]
    assert res["runtime"] == one["runtime"]


def test_on_the_cpu_several_processes_ask_for_threads_and_memory_but_no_gpu():
    cfg = _config("tiny")
    one = RAW["presets"]["tiny"]["resources"]["finetune"]
    res = rule_resources(cfg, "finetune", processes=2)
    assert threads(cfg, "finetune", 2) == 2 * one["cpus"]
    assert res["mem_mb"](None, 1) == 2 * one["mem_mb"]
    assert not {"gpu", "cpus_per_gpu", "nodes"} & set(res)


def test_per_job_resources_follow_each_jobs_processes_with_the_same_keys():
    cfg = _config("paper", gpu_partition="gpu")
    jobs = JobKind.per_job(cfg, "finetune", lambda w: w.processes)
    one, eight = SimpleNamespace(processes=1), SimpleNamespace(processes=8)
    assert set(jobs.resources) == set(JobKind.of(cfg, "finetune").resources)
    assert jobs.threads(eight) == threads(cfg, "finetune", 8)
    assert jobs.resources["gpu"](one) == 1 and jobs.resources["gpu"](eight) == 8
    assert jobs.resources["mem_mb"](eight, 2) == rule_resources(cfg, "finetune", 8)["mem_mb"](
        None, 2
    )
    assert jobs.resources["slurm_partition"](eight) == "gpu"
    assert jobs.retries == retries(cfg, "finetune")


def test_the_launch_message_names_torchrun_and_the_request_and_is_empty_for_one_process():
    res = {"gpu": 8, "cpus_per_gpu": 8, "nodes": 1, "mem_mb": 1024000, "runtime": 4320}
    assert launch_message("m", 1, 8, res) == ""
    msg = launch_message("m", 8, 64, res)
    assert "torchrun --standalone --nproc_per_node 8" in msg and "threads: 64" in msg
    assert "resources: gpu=8, cpus_per_gpu=8, nodes=1, mem_mb=1024000, runtime=4320" in msg


def test_the_launcher_named_is_the_one_a_fine_tune_starts(monkeypatch):
    from zoomattn.training import distributed

    started = []
    monkeypatch.setattr(distributed.os, "execv", lambda exe, argv: started.append(argv))
    monkeypatch.setattr(distributed.sys, "argv", ["zoomattn", "finetune", "--spec", "{}"])
    distributed.relaunch_under_torchrun(4)
    argv = " ".join(started[0]).replace("=", " ")
    assert "torch.distributed.run " + launcher(4).removeprefix("torchrun ") in argv


class _Resources(dict):
    __getattr__ = dict.__getitem__


def test_slurm_gets_one_task_with_every_gpu_of_the_job_on_one_node():
    """The sbatch line the pinned snakemake-executor-plugin-slurm builds (as its executor does:
    the submit command, then the GPU request) for a paper fine-tune of 8 processes."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    cfg = _config("paper", gpu_partition="gpu")
    jobs = JobKind.per_job(cfg, "finetune", lambda w: 8)
    res = {k: f(None, 1) if k == "mem_mb" else f(None) for k, f in jobs.resources.items()}
    job = SimpleNamespace(resources=_Resources(res), threads=jobs.threads(None))
    params = dict(run_uuid="u", slurm_logfile="l", comment_str="c", account="", partition="")
    sbatch = (get_submit_command(job, {**params, "workdir": None}) + set_gres_string(job)).split()
    one = RAW["presets"]["paper"]["resources"]["finetune"]
    assert {"--gpus=8", "--nodes=1", f"--cpus-per-gpu={one['cpus']}"} <= set(sbatch)
    assert sbatch[sbatch.index("--mem") + 1] == str(8 * one["mem_mb"])
    assert not [a for a in sbatch if a.startswith(("--ntasks", "--cpus-per-task"))]


LOCAL_RUN = """
from zoomattn.cluster import JobKind, SITE_DEFAULTS
CFG = {"resources": {"finetune": {"cpus": 1, "mem_mb": 10, "runtime": 1, "gpus": 1,
                                  "retries": 0}},
       "cluster": SITE_DEFAULTS}
PROCESSES = {"two": 2, "one_a": 1, "one_b": 1}
JOBS = JobKind.per_job(CFG, "finetune", lambda w: PROCESSES[w.x])
rule all:
    input: expand("{x}.done", x=PROCESSES)
rule job:
    output: "{x}.done"
    threads: JOBS.threads
    resources: **JOBS.resources
    shell: "date +%s.%N > {output}; sleep 1.5; date +%s.%N >> {output}"
"""


def test_locally_a_two_gpu_job_starts_only_when_two_of_the_cards_are_free(tmp_path):
    """Snakemake schedules the per-job GPU counts: with 2 cards, the 2-GPU job never runs beside
    a 1-GPU one (the two 1-GPU jobs may run together)."""
    (tmp_path / "Snakefile").write_text(LOCAL_RUN)
    cmd = [sys.executable, "-m", "snakemake", "-j", "4", "--resources", "gpu=2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    spans = {x: [float(t) for t in (tmp_path / f"{x}.done").read_text().split()] for x in
             ("two", "one_a", "one_b")}  # fmt: skip
    for one in ("one_a", "one_b"):
        assert spans["two"][1] <= spans[one][0] or spans[one][1] <= spans["two"][0], spans
