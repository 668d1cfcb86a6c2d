import copy
import importlib

import pytest
import yaml

from zoomattn.config import ROOT, load_config
from zoomattn.grid import Grid
from zoomattn.layout import Layout

RAW = yaml.safe_load((ROOT / "config.yaml").read_text())


@pytest.fixture(scope="module")
def layout():
    raw = copy.deepcopy(RAW)
    raw["preset"] = "smoke"
    return Layout("out", Grid(load_config(raw)))


def test_each_study_hands_its_report_package_exactly_the_kinds_it_reads(layout):
    for name, study in layout.grid.studies.items():
        package = importlib.import_module(f"zoomattn.reporting.{name}")
        assert tuple(layout.report_inputs(study)) == tuple(package.KINDS), name


def test_the_cross_report_reads_the_predictions_beside_every_evaluation(layout):
    cross = layout.report_inputs(layout.grid.studies["leaderboard"])
    assert cross["predictions"] == [
        f.removesuffix(".json") + ".predictions.jsonl" for f in cross["evals"]
    ]


def test_the_cross_inputs_regenerate_reads_are_there_with_the_leaderboard_off():
    raw = copy.deepcopy(RAW)
    raw["preset"] = "smoke"
    raw["presets"]["smoke"]["studies"]["leaderboard"] = None
    layout = Layout("out", Grid(load_config(raw)))
    cross = layout.cross_inputs()
    assert len(cross["evals"]) == len(layout.grid.evaluations) > 0
    assert [f.removesuffix(".predictions.jsonl") for f in cross["predictions"]] == [
        f.removesuffix(".json") for f in cross["evals"]
    ]


def test_a_study_report_reads_its_own_evaluations_and_the_cross_report_every_one(layout):
    grid = layout.grid
    opamp = layout.report_inputs(grid.studies["opamp"])
    assert opamp["evals"][0] == "out/eval/base/coqa_like/r0.json"
    assert len(opamp["evals"]) == 4 * 3  # base, QLoRA, K 10 and inf on three sets
    assert opamp["attention"] == [
        f"out/attention/{m}.json" for m in ("base", "qlora_s0", "opamp-K10_s0", "opamp-Kinf_s0")
    ]
    assert opamp["base_metrics"] == ["out/models/base/metrics.json"]
    cross = layout.report_inputs(grid.studies["leaderboard"])
    assert len(cross["evals"]) == len(grid.evaluations) and len(cross["attention"]) == 1 + len(
        grid.models
    )
    assert cross == layout.cross_inputs()


def test_the_mudaf_report_reads_every_models_heads_and_masks_all_but_the_leaderboards(layout):
    mudaf = layout.report_inputs(layout.grid.studies["mudaf"])
    assert len(mudaf["heads"]) == len(layout.all_models)
    masked = layout.masked_models()
    assert "base" in masked and not any(m.startswith("leaderboard/") for m in masked)
    assert mudaf["selections"] == [
        "out/analysis/selected_heads/mudaf/mudaf-heads2_s0.json",
        "out/analysis/selected_heads/mudaf/mudaf_weak_s0.json",
    ]
    lkg = layout.report_inputs(layout.grid.studies["lkg"])
    assert lkg["train_metrics"][0] == "out/models/lkg/qlora_s0/metrics.json"


def test_a_finetune_reads_its_training_set_its_base_and_what_its_method_needs(layout):
    assert layout.finetune_inputs("qlora_s0") == {
        "data": "out/data/train",
        "base": "out/models/base",
    }
    auto = layout.finetune_inputs("rectification/rectify_auto-reverse_s0")
    assert auto["data"] == "out/data/train-rectification/reverse"
    assert auto["margin"] == "out/analysis/score_margin/base.json"
    assert layout.finetune_inputs("leaderboard/mudaf_s0")["heads"] == (
        "out/analysis/selected_heads/leaderboard/mudaf_s0.json"
    )
    assert "heads" not in layout.finetune_inputs("leaderboard/sft_s0")  # heads 0: Vanilla SFT
    assert (
        layout.finetune_inputs("lkg/lkg_s0")["patterns"] == "out/analysis/head_patterns/base.json"
    )
