import copy

import pytest
import yaml

from zoomattn.config import ROOT, load_config
from zoomattn.grid import Grid
from zoomattn.splits import Split
from zoomattn.studies import block_splits

RAW = yaml.safe_load((ROOT / "config.yaml").read_text())


def _cfg(preset="tiny", **mudaf_methods):
    raw = copy.deepcopy(RAW)
    raw["preset"] = preset
    if mudaf_methods:
        raw["studies"]["mudaf"]["methods"] = mudaf_methods
    return load_config(raw)


def test_each_study_names_its_models_and_only_rectification_has_a_placement_in_the_id():
    models = Grid(_cfg()).models
    assert "qlora_s0" in models and "rectification/rectify-xi3-reverse_s0" in models
    sft = models["mudaf/mudaf-heads0_s0"]
    assert (sft.study, sft.base, sft.placement, sft.train_data) == (
        "mudaf",
        "base",
        "vanilla",
        "train-mudaf/vanilla",
    )


def test_opamp_is_a_study_on_the_shared_training_set_with_the_presets_finetune():
    cfg = _cfg()
    opamp, lkg = Grid(cfg).studies["opamp"], Grid(cfg).studies["lkg"]
    k10 = opamp.models["opamp-K10_s0"]
    assert (k10.study, k10.placement, k10.train_data, k10.values["K"]) == (
        "opamp",
        None,
        "train",
        10,
    )
    assert opamp.finetune == cfg["finetune"]
    assert lkg.finetune == {**cfg["finetune"], "steps": 100}  # the block's over the preset's
    assert opamp.train_set(None) == "train" and lkg.train_set("vanilla") == "train-lkg/vanilla"


def test_each_study_runs_the_analyses_its_block_configures():
    grid = Grid(_cfg())
    assert {name: s.analyses for name, s in grid.studies.items()} == {
        "opamp": ["attention"],
        "rectification": ["score_margin"],
        "mudaf": ["retrieval_heads", "selected_heads", "head_masking"],
        "lkg": ["head_patterns"],
        "leaderboard": [],
    }
    mudaf = grid.studies["mudaf"]
    assert mudaf.analysis_set("head_masking") == ("mdqa_like", Split())
    assert grid.studies["rectification"].analysis_set("score_margin") == ("nq_like", Split())
    assert grid.studies["opamp"].analysis_set("attention") == ("coqa_like", Split(noise_ratio=0.9))


def test_splits_come_from_each_benchmarks_noise_ratios_the_blocks_noise_axis_or_its_placements():
    cfg = _cfg()
    assert block_splits(cfg["studies"]["opamp"])["hotpot_like"] == [Split(noise_ratio=0.8)]
    board = block_splits(cfg["studies"]["leaderboard"])
    assert [str(s) for s in board["single_noisy"]] == ["r0", "r0.5", "r0.8", "r0.9"]
    rect = block_splits(cfg["studies"]["rectification"])
    assert rect["nq_like"] == [Split(), Split(placement="reverse")]
    assert block_splits(cfg["studies"]["mudaf"])["mdqa_like"] == [Split()]


def test_head_counts_above_the_models_heads_are_clipped_and_trained_once():
    cfg = _cfg(mudaf={"heads": [8, 32, 64, 100]}, weak={"method": "mudaf", "heads": 50})
    mudaf = Grid(cfg).studies["mudaf"]
    runs = sorted(m.run for m in mudaf.models.values())
    assert runs == ["mudaf-heads32", "mudaf-heads8", "weak"]  # tiny: 4 layers x 8 heads
    assert mudaf.models["mudaf/weak_s0"].values["heads"] == 32
    assert mudaf.clipped_heads() == {64: 32, 100: 32, 50: 32}


def test_a_hub_base_keeps_every_head_count_for_the_selection_to_clip():
    mudaf = Grid(_cfg("paper")).studies["mudaf"]
    assert "mudaf-heads64" in {m.run for m in mudaf.models.values()}
    assert mudaf.clipped_heads() == {}


def test_leaderboard_cells_run_the_leaderboard_seeds_on_its_noise_axis():
    cfg = _cfg()
    grid = Grid(cfg)
    board, block = grid.studies["leaderboard"], cfg["studies"]["leaderboard"]
    models = list(board.models.values())
    assert {m.seed for m in models} == set(block["seeds"]) and len(block["seeds"]) >= 3
    assert len(models) == len(block["methods"]) * len(block["seeds"])
    assert {m.seed for m in grid.studies["lkg"].models.values()} == set(cfg["seeds"])
    sft = board.models["leaderboard/sft_s1"]
    assert (sft.method, sft.values, sft.finetune) == ("mudaf", {"heads": 0}, {"lr": 3.0e-4})
    splits = {(b, s) for _, b, s in board.evaluations(board.models["leaderboard/lkg_s2"])}
    assert splits == {(b, f"r{r:g}") for b in block["benchmarks"] for r in [0.0, 0.5, 0.8, 0.9]}


def test_lkg_robustness_sets_are_evaluated_for_the_listed_entries_only():
    lkg = Grid(_cfg()).studies["lkg"]
    rob = lkg.block["robustness"]
    assert [str(s) for s in lkg.robustness["nq_open"]] == [f"n{k}" for k in rob["passages"]] + [
        f"irr{s:g}" for s in rob["irrelevant"]["shares"]
    ]
    robust = {
        mid
        for mid, m in lkg.models.items()
        if any(s.startswith(("n", "irr")) for _, _, s in lkg.evaluations(m))
    }
    assert robust == {"lkg/lkg_s0", "lkg/qlora_s0"}
    assert lkg.split("nq_open", "irr0.25") == Split(passages=10, irrelevant=0.25)
    assert lkg.split("nq_open", "n6") == Split(passages=6)
    with pytest.raises(KeyError, match="no eval set nq_open/n7"):
        lkg.split("nq_open", "n7")


def test_a_rectification_model_is_evaluated_at_its_own_placement_only():
    rect = Grid(_cfg()).studies["rectification"]
    model = rect.models["rectification/rectify-xi3-reverse_s0"]
    assert rect.evaluations(model) == [
        (model.id, "nq_like", "reverse"),
        (model.id, "multihop_like", "reverse"),
    ]
    assert len(rect.base_evaluations()) == 2 * 2


def test_lkg_cells_remember_the_entry_they_come_from():
    models = Grid(_cfg()).models
    assert models["lkg/lkg_no_rpf_s0"].entry == "lkg_no_rpf"
    assert models["lkg/lkg_no_rpf_s0"].values == {"fusion": False}
