"""Rectification's ``train_scheme`` in real Snakemake plans (dry runs, nothing trained): the
paper's per-dataset protocol (App. A: "3 epochs for each dataset") trains each cell once per
training set and tests that model on its own benchmark only; the pooled default plans what it
always did."""

from __future__ import annotations

import copy
import json
from collections import Counter

import pytest
import yaml

from tests.workflow.scratch import copy_workflow, planned_jobs
from zoomattn.config import ROOT, load_config
from zoomattn.config_checks import ConfigError
from zoomattn.grid import Grid
from zoomattn.specs import Specs

RAW = yaml.safe_load((ROOT / "config.yaml").read_text())
SMOKE_BLOCK = RAW["presets"]["smoke"]["studies"]["rectification"]

# the smoke block's cells: LoRA and ξ=3 at both placements, the sigmoid g and ξ=auto at reverse
SMOKE_CELLS = {
    "qlora-vanilla",
    "qlora-reverse",
    "rectify-xi3-vanilla",
    "rectify-xi3-reverse",
    "rectify_g-gsigmoid-reverse",
    "rectify_auto-reverse",
}


def per_dataset_block(block: dict) -> dict:
    """The smoke rectification block with two training sets, each serving one benchmark, the
    second with a budget of its own."""
    block = copy.deepcopy(block)
    block["train_scheme"] = "per_dataset"
    block["benchmarks"]["nq_like"]["train"] = "single_set"
    block["benchmarks"]["multihop_like"] = {"family": "multihop", "metric": "contains"}
    block["benchmarks"]["multihop_like"]["train"] = "multihop_set"
    block["train"] = {
        "single_set": {"n_train": 60, "mix": {"single": 1.0}},
        "multihop_set": {"n_train": 40, "mix": {"multihop": 1.0}, "steps": 3},
    }
    return block


def with_smoke_block(block: dict) -> dict:
    """The whole raw config, the smoke preset's rectification block replaced."""
    raw = copy.deepcopy(RAW)
    raw["presets"]["smoke"]["studies"]["rectification"] = block
    return raw


def write_config(wd, raw: dict) -> None:
    """A scratch copy's config.yaml, in the config's own order (an override file would merge the
    two ``train:`` blocks, not replace one)."""
    (wd / "config.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """(the shipped smoke plan, the plan with the per_dataset block)."""
    tmp = tmp_path_factory.mktemp("per_dataset")
    shipped = planned_jobs(copy_workflow(tmp / "shipped"))
    wd = copy_workflow(tmp / "per_dataset")
    write_config(wd, with_smoke_block(per_dataset_block(SMOKE_BLOCK)))
    return shipped, planned_jobs(wd)


def rect_jobs(jobs, rule):
    return [w for r, w in jobs if r == rule and "rectification" in json.dumps(w)]


def test_per_dataset_trains_each_cell_once_per_training_set(plans):
    _, jobs = plans
    trained = {w["trained"] for w in rect_jobs(jobs, "finetune")}
    assert trained == {
        f"rectification/{cell}-{dataset}_s0"
        for cell in SMOKE_CELLS
        for dataset in ("single_set", "multihop_set")
    }
    train_sets = {w["train_set"] for w in rect_jobs(jobs, "train_data")}
    assert train_sets == {
        f"train-rectification/{p}-{d}"
        for p in ("vanilla", "reverse")
        for d in ("single_set", "multihop_set")
    }


def test_per_dataset_models_are_evaluated_only_on_their_own_benchmark(plans):
    _, jobs = plans
    evals = [w for w in rect_jobs(jobs, "evaluate") if w["model"] != "base"]
    for w in evals:
        served = {"single_set": "nq_like", "multihop_set": "multihop_like"}
        assert w["benchmark"] == served[w["model"].rsplit("-", 1)[1].removesuffix("_s0")]
        assert w["model"].split("/")[1].split("-")[-2] == w["split"]  # at its own placement
    assert len(evals) == 2 * len(SMOKE_CELLS)  # one benchmark, one placement per model
    base = Counter(w["benchmark"] for r, w in jobs if r == "evaluate" and w["model"] == "base")
    assert base["nq_like"] == base["multihop_like"] == 2  # the base: every set, both placements


def test_per_dataset_training_sets_read_their_own_entry_and_budget():
    raw = with_smoke_block(per_dataset_block(SMOKE_BLOCK))
    specs = Specs(load_config({**raw, "preset": "smoke"}))
    multihop = specs.finetune("rectification/qlora-reverse-multihop_set_s0")
    assert multihop["finetune"]["steps"] == 3 and multihop["dataset"] == "multihop_set"
    single = specs.finetune("rectification/qlora-reverse-single_set_s0")
    assert single["finetune"]["steps"] == 6  # no steps of its own: the study's (smoke: 6)
    data = specs.train_data("train-rectification/reverse-multihop_set")
    assert data["train"] == {"n_train": 40, "mix": {"multihop": 1.0}}  # its entry, no budget


def test_the_pooled_default_plans_the_models_and_evaluations_it_always_did(plans, tmp_path):
    shipped, _ = plans
    wd = copy_workflow(tmp_path / "pooled")
    write_config(wd, with_smoke_block({**SMOKE_BLOCK, "train_scheme": "pooled"}))  # said out loud
    pooled = planned_jobs(wd)
    trained = {w["trained"] for w in rect_jobs(shipped, "finetune")}
    assert trained == {f"rectification/{cell}_s0" for cell in SMOKE_CELLS}
    assert sorted(map(json.dumps, rect_jobs(pooled, "evaluate"))) == sorted(
        map(json.dumps, rect_jobs(shipped, "evaluate"))
    )
    assert {w["trained"] for w in rect_jobs(pooled, "finetune")} == trained


def test_a_benchmark_naming_an_unknown_training_set_is_an_error_naming_the_key():
    block = per_dataset_block(SMOKE_BLOCK)
    block["benchmarks"]["nq_like"]["train"] = "single_sett"
    raw = {**with_smoke_block(block), "preset": "smoke"}
    with pytest.raises(ConfigError) as err:
        load_config(raw)
    assert "rectification: benchmarks.nq_like.train: 'single_sett' is not one of" in str(err.value)


@pytest.mark.parametrize(
    "change, key",
    [
        (lambda b: b.update(train_scheme="by_set"), "train_scheme: 'by_set' is not one of"),
        (lambda b: b.update(train=SMOKE_BLOCK["train"]), "train: per_dataset needs one entry"),
        (
            lambda b: b["benchmarks"]["nq_like"].pop("train"),
            "benchmarks.nq_like.train: per_dataset",
        ),
        (lambda b: b["benchmarks"]["multihop_like"].update(train=None), "train.multihop_set: no "),
        (lambda b: b["train"]["multihop_set"].update(steps=0), "train.multihop_set.steps"),
    ],
)
def test_a_per_dataset_block_that_does_not_fit_is_an_error_naming_the_key(change, key):
    block = per_dataset_block(SMOKE_BLOCK)
    change(block)
    with pytest.raises(ConfigError) as err:
        load_config({**with_smoke_block(block), "preset": "smoke"})
    assert "studies.rectification" in str(err.value) and key in str(err.value)


def test_the_paper_preset_trains_one_model_per_training_set_and_asqa_reads_the_base():
    rect = Grid(load_config({**RAW, "preset": "paper"})).studies["rectification"]
    assert rect.datasets.scheme == "per_dataset"
    assert rect.datasets.budgets == {s: {"steps": 2625} for s in rect.block["train"]}
    ids = set(rect.models)
    assert "rectification/rectify-xi3-reverse-dpr_nq_s0" in ids and len(ids) == 9 * 2 * 4
    asqa = [e for m in rect.models.values() for e in rect.evaluations(m) if e[1] == "asqa"]
    assert asqa == [] and ("base-rectification", "asqa", "reverse") in rect.base_evaluations()
