import copy

import yaml

from zoomattn.cluster import retries, rule_resources, threads
from zoomattn.config import ROOT, load_config

RAW = yaml.safe_load((ROOT / "config.yaml").read_text())


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
