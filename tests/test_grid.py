import copy

import pytest
import yaml

from zoomattn import grid
from zoomattn.config import ROOT, ConfigError, load_config

RAW = yaml.safe_load((ROOT / "config.yaml").read_text())


def _cfg(preset="tiny", **mudaf_methods):
    raw = copy.deepcopy(RAW)
    raw["preset"] = preset
    if mudaf_methods:
        raw["mudaf"]["methods"] = mudaf_methods
    return load_config(raw)


def test_each_study_names_its_models_and_only_rectification_has_a_placement_in_the_id():
    models = grid.trained_models(_cfg())
    assert "qlora_s0" in models and "rectification/rectify-xi3-reverse_s0" in models
    sft = models["mudaf/mudaf-heads0_s0"]
    assert (sft.study, sft.base, sft.placement, sft.train_data) == (
        "mudaf",
        "base",
        "vanilla",
        "train-mudaf/vanilla",
    )


def test_head_counts_above_the_models_heads_are_clipped_and_trained_once():
    cfg = _cfg(mudaf={"heads": [8, 32, 64, 100]}, weak={"method": "mudaf", "heads": 50})
    models = grid.trained_models(cfg)
    runs = sorted(m.run for m in models.values() if m.study == "mudaf")
    assert runs == ["mudaf-heads32", "mudaf-heads8", "weak"]  # tiny: 4 layers x 8 heads
    assert models["mudaf/weak_s0"].values["heads"] == 32
    assert grid.clipped_heads(cfg) == {64: 32, 100: 32, 50: 32}


def test_a_hub_base_keeps_every_head_count_for_the_selection_to_clip():
    cfg = _cfg("paper")
    runs = {m.run for m in grid.trained_models(cfg).values() if m.study == "mudaf"}
    assert "mudaf-heads64" in runs and grid.clipped_heads(cfg) == {}


def test_every_mudaf_model_and_the_base_are_evaluated_on_every_mudaf_benchmark():
    cfg = _cfg()
    evals = [(m, b, s) for m, b, s in grid.evaluations(cfg) if b in cfg["mudaf"]["benchmarks"]]
    mudaf = [m for m in grid.trained_models(cfg) if m.startswith("mudaf/")]
    assert sorted({m for m, _, _ in evals}) == sorted(["base", *mudaf])
    assert len(evals) == (1 + len(mudaf)) * len(cfg["mudaf"]["benchmarks"])
    assert {s for _, _, s in evals} == {"vanilla"}
    assert grid.study_of_benchmark(cfg, "mdqa_like") == "mudaf"


def test_a_study_set_to_null_leaves_the_grid():
    raw = copy.deepcopy(RAW)
    raw["mudaf"] = None
    raw["leaderboard"]["methods"].pop("mudaf")  # it reuses the MuDAF study's head scores
    cfg = load_config(raw)
    assert grid.studies(cfg) == ["rectification", "lkg", "leaderboard"]
    assert not any(m.startswith("mudaf/") for m in grid.trained_models(cfg))


def test_a_leaderboard_entry_needs_the_study_whose_analyses_it_reuses():
    raw = copy.deepcopy(RAW)
    raw["lkg"] = None
    with pytest.raises(ConfigError, match=r"leaderboard\.methods\.lkg: lkg needs the lkg study"):
        load_config(raw)


def test_leaderboard_cells_run_the_leaderboard_seeds_on_its_noise_axis():
    cfg = _cfg()
    board = cfg["leaderboard"]
    models = [m for m in grid.trained_models(cfg).values() if m.study == "leaderboard"]
    assert {m.seed for m in models} == set(board["seeds"]) and len(board["seeds"]) >= 3
    assert len(models) == len(board["methods"]) * len(board["seeds"])
    assert {m.seed for m in grid.trained_models(cfg).values() if m.study == "lkg"} == set(
        cfg["seeds"]
    )
    sft = grid.trained_models(cfg)["leaderboard/sft_s1"]
    assert (sft.method, sft.values, sft.finetune) == ("mudaf", {"heads": 0}, {"lr": 3.0e-4})
    splits = {(b, s) for m, b, s in grid.evaluations(cfg) if m == "leaderboard/lkg_s2"}
    assert splits == {(b, f"r{r:g}") for b in board["benchmarks"] for r in [0.0, 0.5, 0.8, 0.9]}


def test_a_leaderboard_entry_may_not_change_the_training_budget():
    raw = copy.deepcopy(RAW)
    raw["leaderboard"]["methods"]["sft"]["finetune"] = {"lr": 1e-4, "steps": 500}
    with pytest.raises(ConfigError, match=r"methods\.sft\.finetune: only lr.*steps"):
        load_config(raw)


def test_a_leaderboard_entry_is_one_setting_and_its_baseline_an_entry():
    raw = copy.deepcopy(RAW)
    raw["leaderboard"]["methods"]["opamp"]["K"] = [5, 10]
    with pytest.raises(ConfigError, match=r"methods\.opamp: a leaderboard entry is one setting"):
        load_config(raw)
    raw = copy.deepcopy(RAW)
    raw["leaderboard"]["baseline"] = "lora"
    with pytest.raises(ConfigError, match=r"leaderboard\.baseline: 'lora' is not an entry"):
        load_config(raw)


def test_lkg_robustness_sets_are_evaluated_for_the_listed_entries_only():
    cfg = _cfg()
    rob = cfg["lkg"]["robustness"]
    splits = [s for _, s in grid.robustness_splits(cfg)]
    assert splits == [f"n{k}" for k in rob["passages"]] + [
        f"irr{s:g}" for s in rob["irrelevant"]["shares"]
    ]
    evals = grid.evaluations(cfg)
    robust = {m for m, _, s in evals if s.startswith(("n", "irr"))}
    assert robust == {"lkg/lkg_s0", "lkg/qlora_s0"}
    main = {m for m, b, s in evals if b in cfg["lkg"]["benchmarks"] and s == "vanilla"}
    assert main == {"base", *(m for m in grid.trained_models(cfg) if m.startswith("lkg/"))}
    assert grid.robustness_set(cfg, "irr0.25") == {"passages": 10, "irrelevant": 0.25}
    assert grid.robustness_set(cfg, "n6") == {"passages": 6, "irrelevant": 0.0}


def test_lkg_cells_remember_the_entry_they_come_from():
    models = grid.trained_models(_cfg())
    assert models["lkg/lkg_no_rpf_s0"].entry == "lkg_no_rpf"
    assert models["lkg/lkg_no_rpf_s0"].values == {"fusion": False}
