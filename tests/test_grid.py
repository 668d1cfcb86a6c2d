import copy

import pytest
import yaml

from zoomattn import grid as grid_module
from zoomattn.config import ROOT, load_config
from zoomattn.grid import Grid

RAW = yaml.safe_load((ROOT / "config.yaml").read_text())


def _cfg(preset="tiny"):
    raw = copy.deepcopy(RAW)
    raw["preset"] = preset
    return load_config(raw)


def test_studies_come_in_report_order_whatever_the_configs_order():
    raw = copy.deepcopy(RAW)
    raw["studies"] = dict(reversed(list(raw["studies"].items())))
    names = list(Grid(load_config(raw)).studies)
    assert names == ["opamp", "rectification", "mudaf", "lkg", "leaderboard"]


def test_every_mudaf_model_and_the_base_are_evaluated_on_every_mudaf_benchmark():
    cfg = _cfg()
    grid = Grid(cfg)
    benchmarks = cfg["studies"]["mudaf"]["benchmarks"]
    evals = [(m, b, s) for m, b, s in grid.evaluations if b in benchmarks]
    mudaf = [m for m in grid.models if m.startswith("mudaf/")]
    assert sorted({m for m, _, _ in evals}) == sorted(["base", *mudaf])
    assert len(evals) == (1 + len(mudaf)) * len(benchmarks)
    assert {s for _, _, s in evals} == {"vanilla"}
    assert grid.study_of_benchmark("mdqa_like").name == "mudaf"
    with pytest.raises(KeyError, match="no study of the grid has a benchmark 'nope'"):
        grid.study_of_benchmark("nope")


def test_the_bases_evaluations_come_first_then_each_studys_models():
    grid = Grid(_cfg("smoke"))
    evals = grid.evaluations
    first_model = next(i for i, (m, _, _) in enumerate(evals) if m != "base")
    assert all(m != "base" for m, _, _ in evals[first_model:])
    assert evals[0] == ("base", "coqa_like", "r0")
    assert [m for m, _, _ in evals[first_model:]][:3] == ["qlora_s0"] * 3


def test_a_study_set_to_null_leaves_the_grid():
    raw = copy.deepcopy(RAW)
    raw["studies"]["mudaf"] = None
    raw["studies"]["leaderboard"]["methods"].pop("mudaf")  # it reuses the MuDAF study's scores
    grid = Grid(load_config(raw))
    assert list(grid.studies) == ["opamp", "rectification", "lkg", "leaderboard"]
    assert not any(m.startswith("mudaf/") for m in grid.models)
    assert grid.analysis("retrieval_heads") is None


def test_a_study_with_its_own_base_model_starts_from_it():
    grid = Grid(_cfg("paper"))
    assert list(grid.bases) == ["base", "base-rectification"]
    assert grid.studies["rectification"].base == "base-rectification"
    assert grid.base_of("rectification/qlora-vanilla-dpr_nq_s0") == "base-rectification"
    assert grid.base_of("base-rectification") == "base-rectification"
    assert grid.method("mudaf/mudaf_weak_s0") == "mudaf" and grid.method("base") is None


def test_every_training_set_names_its_study_and_placement():
    grid = Grid(_cfg())
    sets = {name: (study.name, placement) for name, (study, placement) in grid.train_sets.items()}
    assert sets == {
        "train": ("opamp", None),
        "train-rectification/vanilla": ("rectification", "vanilla"),
        "train-rectification/reverse": ("rectification", "reverse"),
        "train-mudaf/vanilla": ("mudaf", "vanilla"),
        "train-lkg/vanilla": ("lkg", "vanilla"),
        "train-leaderboard/vanilla": ("leaderboard", "vanilla"),
    }


def test_seeds_of_a_study_out_of_the_grid_are_the_grids():
    grid = Grid(_cfg("small"))
    assert grid.seeds("leaderboard") == grid.seeds("opamp") == [0]
    assert Grid(_cfg()).seeds("leaderboard") == [0, 1, 2]


def test_split_names_of_a_study_block_are_its_benchmarks_eval_sets_as_before():
    cfg = _cfg()
    opamp = cfg["studies"]["opamp"]
    assert grid_module.split_names({"benchmarks": opamp["benchmarks"]})[:3] == [
        ("coqa_like", "r0"),
        ("coqa_like", "r0.8"),
        ("coqa_like", "r0.9"),
    ]
    rect = grid_module.split_names(cfg["studies"]["rectification"])
    assert rect == [
        ("nq_like", "vanilla"),
        ("nq_like", "reverse"),
        ("multihop_like", "vanilla"),
        ("multihop_like", "reverse"),
    ]
