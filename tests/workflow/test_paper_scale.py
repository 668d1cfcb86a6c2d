"""The paper-scale path without a GPU or the hub: the shipped paper/small presets' dry runs, and a
real Snakemake run of that path on a local Llama-3-style model and real-format dataset copies."""

from __future__ import annotations

import json
import re

import pytest
import torch
import yaml
from transformers import LlamaConfig, LlamaForCausalLM

from tests.data.sources.chat_faith_fixtures import coqa_turns, write_chatrag, write_faitheval
from tests.modeling.family_tokenizers import family_tokenizer
from tests.workflow.scratch import copy_workflow, mlflow_runs, snakemake

pytestmark = pytest.mark.slow


JOB = re.compile(r"(?:local)?rule (\w+):|Job \d+: (\w+) ")  # a job's listing, or its message


def dry_run_jobs(workdir, preset, *args):
    """rule -> list of its jobs' resources (as dicts) in a dry run of ``preset``; a job listed by
    its message (a fine-tune of several processes) also has its message under "message"."""
    out = snakemake(workdir, "-n", *args, "--config", f"preset={preset}").stdout
    jobs = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:|Job \d+: )", out):
        m = JOB.match(block.strip())
        if m:
            res = re.search(r"resources: (.*)", block)
            pairs = [kv.split("=", 1) for kv in res.group(1).split(", ")] if res else []
            job = dict(pairs)
            trained = re.search(r"(?:trained=|Job \d+: finetune )([\w/.-]+)", block)
            if trained:
                job["trained"] = trained.group(1).rstrip(":")
            if m.group(2):
                job["message"] = block.strip().split("\n", 1)[0]
            jobs.setdefault(m.group(1) or m.group(2), []).append(job)
    return jobs


@pytest.mark.parametrize("preset", ["paper", "small"])
def test_dry_run_lists_every_job_with_gpus_for_training_and_evaluation(tmp_path, preset):
    wd = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((wd / "config.yaml").read_text())["presets"][preset]
    studies = cfg["studies"]
    # the paper preset through the shipped Slurm profile (a dry run submits nothing)
    jobs = dry_run_jobs(wd, preset, *(("--profile", "slurm") if preset == "paper" else ()))
    n_cells = sum(len(b["noise_ratios"]) for b in studies["opamp"]["benchmarks"].values())
    n_runs = 1 + len(studies["opamp"]["methods"]["opamp"]["K"])
    rect = studies.get("rectification")
    n_rect = 0
    n_rect_sets = 1  # pooled: one model per cell and placement
    if rect:  # paper: LoRA, 5 ξ and 3 g variants, each trained and tested at both placements
        if rect.get("train_scheme") == "per_dataset":  # and once per training set (App. A)
            n_rect_sets = len(rect["train"])
        n_rect = (1 + len(rect["methods"]["rectify"]["xi"]) + 3) * 2 * n_rect_sets
        assert len(jobs["base_model"]) == 2  # the OpAmp base and the rectification Instruct model
    lkg = studies.get("lkg")
    n_lkg = len(lkg["methods"]) if lkg else 0  # paper: LoRA, the full method, four ablations
    mudaf = studies.get("mudaf")
    n_mudaf = 0
    if mudaf:  # paper: n = 0 (SFT) and 6 head counts, and MuDAF-weak; the preset's base
        n_mudaf = len(mudaf["methods"]["mudaf"]["heads"]) + 1
    # the two bases and every fine-tuned model: each goes through the studies' head analyses
    n_models = 2 + n_runs + n_rect + n_mudaf + n_lkg
    if mudaf:
        assert len(jobs["select_heads"]) == n_mudaf - 1  # n = 0 selects no head
        assert len(jobs["retrieval_heads"]) == n_models and len(jobs["head_masking"]) == 1
    n_robust = 0
    if lkg:
        rob = lkg["robustness"]
        n_robust = len(rob["passages"]) + len(rob["irrelevant"]["shares"])
        assert len(jobs["head_patterns"]) == n_models
    n_study_sets = (2 * len(rect["benchmarks"]) if rect else 0) + (
        len(mudaf["benchmarks"]) if mudaf else 0
    )
    n_study_sets += len(lkg["benchmarks"]) + n_robust if lkg else 0
    assert n_study_sets == (16 + 5 + 17 if rect else 0)
    assert len(jobs["finetune"]) == n_runs + n_rect + n_mudaf + n_lkg
    assert len(jobs["report"]) == 1 + sum(map(bool, (rect, mudaf, lkg)))  # one per study
    # the base on every set at both placements; a per_dataset model on its own benchmark only
    n_rect_evals = (n_rect // n_rect_sets + 2) * len(rect["benchmarks"]) if rect else 0
    if rect and n_rect_sets > 1:
        served = [b for b in rect["benchmarks"].values() if b.get("train")]
        n_rect_evals = 2 * len(rect["benchmarks"]) + n_rect // n_rect_sets * len(served)
    n_mudaf_evals = (n_mudaf + 1) * len(mudaf["benchmarks"]) if mudaf else 0
    n_lkg_evals = (n_lkg + 1) * len(lkg["benchmarks"]) + len(rob["models"]) * n_robust if lkg else 0
    assert len(jobs["evaluate"]) == (
        (1 + n_runs) * n_cells + n_rect_evals + n_mudaf_evals + n_lkg_evals
    )
    assert len(jobs["eval_data"]) == n_cells + n_study_sets and "pretrain" not in jobs
    for rule in ("evaluate", "attention"):
        want = cfg["resources"]["evaluate"]
        for res in jobs[rule]:
            assert res["gpu"] == "1" and res["mem_mb"] == str(want["mem_mb"]), rule
            assert res["runtime"] == str(want["runtime"]), rule
    assert_finetunes_ask_for_their_processes(jobs["finetune"], cfg)
    for rule in ("base_model", "train_data", "eval_data"):
        assert all("gpu" not in res for res in jobs[rule]), rule


def assert_finetunes_ask_for_their_processes(finetunes: list[dict], cfg: dict) -> None:
    """Each fine-tune asks for one GPU, its CPUs and memory per process of its study, and one of
    several processes names its launcher; the paper preset runs OpAmp, rectification and MuDAF
    on 8 GPUs, LKG-RALM on one (config.yaml, docs/papers.md)."""
    want = cfg["resources"]["finetune"]
    processes = {"opamp": cfg["finetune"].get("processes", 1)}
    for name, block in cfg["studies"].items():
        if block and name != "opamp":
            processes[name] = block.get("finetune", {}).get("processes", processes["opamp"])
    seen = set()
    for res in finetunes:
        study = res["trained"].split("/")[0] if "/" in res["trained"] else "opamp"
        n = int(res["gpu"])
        assert n == processes[study], res["trained"]
        assert res["mem_mb"] == str(n * want["mem_mb"]) and res["nodes"] == "1"
        assert res["cpus_per_gpu"] == str(want["cpus"]) and res["runtime"] == str(want["runtime"])
        if n > 1:
            assert f"{n} processes, torchrun --standalone --nproc_per_node {n}" in res["message"]
        else:
            assert "message" not in res
        seen.add(n)
    assert seen == set(processes.values())


WORDS = sorted(
    {
        w
        for t in json.dumps(coqa_turns()).replace("\\n", " ").split()
        for w in re.findall(r"\w+|[^\w\s]+", t)
    }
)


def small_workflow(root, device: str = "cpu"):
    """The `small` preset pointed at a local Llama-3-style model and local dataset copies, its
    model jobs on ``device`` (``cpu`` pins them there; ``auto`` keeps the preset's GPU request)."""
    wd = copy_workflow(root / "wf")
    model_dir, data = root / "llama3", root / "data"
    tok = family_tokenizer("llama3", WORDS)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    write_chatrag(data / "chatrag", "coqa", coqa_turns())
    write_faitheval(data / "faitheval", "unanswerable")
    chatrag = {"subset": "coqa", "path": str(data / "chatrag")}
    raw = yaml.safe_load((wd / "config.yaml").read_text())
    small = raw["presets"]["small"]
    small["studies"]["opamp"] = dict(
        methods={"qlora": {}, "opamp": {"K": [10], "every": 1, "adapter_dim": 8, "dropout": 0.0}},
        benchmarks={
            "coqa": {
                "source": "chatrag",
                "options": chatrag,
                "metric": "em",
                "noise_ratios": [0.0, 0.5],
                "published": "CoQA",
            },
            "faitheval_unanswerable": {
                "source": "faitheval_unanswerable",
                "options": {"path": str(data / "faitheval" / "unanswerable")},
                "metric": "faitheval",
                "noise_ratios": [0.0],
                "published": "FaithEval",
            },
        },
        attention={"benchmark": "coqa", "noise_ratio": 0.5},
    )
    small.update(
        data={"train": {"chatrag": chatrag}, "n_eval": 12},
        base_model={
            "source": str(model_dir),
            "hidden": 32,
            "layers": 2,
            "heads": 4,
            "kv_heads": 2,
            "intermediate": 64,
        },
        evaluation={"batch_size": 4, "max_new_tokens": 4, "attention_examples": 4},
    )
    small["finetune"].update(
        steps=4,
        batch_size=4,
        micro_batch_size=2,
        max_length=512,
        gradient_checkpointing=False,
        lr=1e-3,
        optimizer="adamw",
        log_every=2,
        checkpoint_every=2,
    )
    small["finetune"]["lora"]["r"] = 4
    small["device"] = device
    if device == "cpu":
        small["finetune"]["quantization"]["compute_dtype"] = "float32"
    for kind in small["resources"].values():
        kind["cpus"] = 1
    (wd / "config.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return wd


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    wd = small_workflow(tmp_path_factory.mktemp("paper_scale"))
    snakemake(wd, "-j", "2", "--config", "preset=small")
    return wd


def test_hub_style_base_is_recorded_with_its_chat_family(real_run):
    base = json.loads((real_run / "results/small/models/base/base.json").read_text())
    assert base["chat_family"] == "llama3" and base["architecture"]["layers"] == 2
    runs, default = mlflow_runs(real_run, "small")
    assert default == []
    base_run = next(r for r in runs if r.data.tags.get("zoomattn.stage") == "pretrain")
    assert base_run.data.tags["base.chat_family"] == "llama3"
    assert {r.info.status for r in runs} == {"FINISHED"}


def test_every_real_eval_set_holds_the_builders_records(real_run):
    out = real_run / "results/small"
    coqa = [
        json.loads(x) for x in (out / "data/eval/coqa/r0.5/records.jsonl").read_text().splitlines()
    ]
    assert len(coqa) == 12 and all(len(r["documents"]) == 2 for r in coqa)
    metrics = list((out / "eval").rglob("r*.json"))
    assert len(metrics) == 3 * 3  # base, QLoRA, K=10 on coqa r0 / r0.5 and FaithEval
    faith = json.loads((out / "eval/qlora_s0/faitheval_unanswerable/r0.json").read_text())
    assert faith["metric"] == "faitheval" and "unanswerable" in faith["subsets"]


def test_report_puts_published_numbers_and_deltas_beside_ours(real_run):
    report = real_run / "results/small/report/opamp"
    text = (report / "README.md").read_text()
    assert "analogue" not in text.split("\n", 1)[0] and "Table 3: CMRR sweep" in text
    for name in ("table3_cmrr.png", "table4_coqa.png", "table5_faitheval.md", "fig5_attention.png"):
        assert (report / name).stat().st_size > 0, name
    import pandas as pd

    cmp = pd.read_csv(report / "comparison.csv")
    coqa = cmp[(cmp["benchmark"] == "coqa") & (cmp["noise"] == 0.0)].set_index("model")
    assert coqa.loc["QLoRA", "published"] == 89.8 and coqa.loc["K=10", "published"] == 91.2
    scores = pd.read_csv(report / "scores.csv")
    ours = scores[
        (scores["benchmark"] == "coqa")
        & (scores["noise"] == 0.0)
        & (scores["subset"].isna())
        & (scores["label"] == "QLoRA")
    ]["score"].iloc[0]
    assert coqa.loc["QLoRA", "Δ"] == round(ours - 89.8, 1)
    faith = cmp[cmp["benchmark"] == "faitheval_unanswerable / unanswerable"].set_index("model")
    assert faith.loc["QLoRA", "published"] == 46.1
    assert "base (no fine-tune)" not in cmp["model"].tolist()  # the paper has no base row
