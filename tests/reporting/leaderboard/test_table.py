"""The leaderboard's cells, marks and ties on predictions with known effects."""

import numpy as np
import pytest

from zoomattn.reporting.leaderboard.table import (
    MEAN,
    entry_label,
    leaderboard,
    wide,
    write_leaderboard,
)

N = 120  # examples per set


def _spec(entries: dict[str, tuple[str, dict]], seeds=(0, 1, 2)) -> dict:
    cells = {
        f"leaderboard/{e}_s{s}": {"entry": e, "method": m, "values": v, "seed": s}
        for e, (m, v) in entries.items()
        for s in seeds
    }
    return {
        "cells": cells,
        "benchmarks": {"single_noisy": {}, "multihop_noisy": {}},
        "noise_ratios": [0.0, 0.9],
        "baseline": "qlora",
    }


def _predictions(spec: dict, rate: dict[str, float]) -> dict:
    """Each entry answers right with its rate, independently per seed and example."""
    rng = np.random.default_rng(0)
    out = {}
    for model, cell in spec["cells"].items():
        for b in spec["benchmarks"]:
            for r in spec["noise_ratios"]:
                hits = rng.random(N) < rate[cell["entry"]]
                out[(model, b, f"r{r:g}")] = {f"{b}-{i}": float(h) for i, h in enumerate(hits)}
    return out


ENTRIES = {
    "qlora": ("qlora", {}),
    "opamp": ("opamp", {"K": 10}),
    "lkg": ("lkg", {}),
}


def test_a_clearly_better_entry_is_marked_up_and_alone_in_bold():
    spec = _spec(ENTRIES)
    long = leaderboard(spec, _predictions(spec, {"qlora": 0.3, "opamp": 0.9, "lkg": 0.3}), 500)
    mean = long[long["column"] == MEAN].set_index("entry")
    assert mean.loc["opamp", "vs_baseline_verdict"] == "higher"
    assert mean.loc["lkg", "vs_baseline_verdict"] == "n.s."
    assert mean.loc["qlora", "vs_baseline_verdict"] == "–"
    assert list(mean.index[mean["tied_best"]]) == ["opamp"]
    assert mean.loc["opamp", "seeds"] == 3 and mean.loc["opamp", "examples"] == 4 * N
    table = wide(long)
    assert table.iloc[0]["method"] == "OpAmp (K=10)"  # best first by the mean
    assert table.iloc[0][MEAN].startswith("**") and table.iloc[0][MEAN].endswith(" ↑")


def test_equal_entries_tie_for_best_and_carry_no_mark():
    spec = _spec(ENTRIES)
    long = leaderboard(spec, _predictions(spec, {"qlora": 0.5, "opamp": 0.5, "lkg": 0.5}), 500)
    mean = long[long["column"] == MEAN].set_index("entry")
    assert mean["tied_best"].all()
    assert set(mean["vs_baseline_verdict"]) <= {"n.s.", "–"}


def test_cell_score_is_the_mean_over_seeds_and_examples_with_the_interval_around_it():
    spec = _spec(ENTRIES)
    predictions = _predictions(spec, {"qlora": 0.3, "opamp": 0.6, "lkg": 0.4})
    long = leaderboard(spec, predictions, 500).set_index(["entry", "column"])
    hand = np.mean(
        [
            list(predictions[(f"leaderboard/lkg_s{s}", "single_noisy", "r0.9")].values())
            for s in (0, 1, 2)
        ]
    )
    row = long.loc[("lkg", "single_noisy r=0.9")]
    assert row["score"] == pytest.approx(100 * hand)
    assert row["ci_low"] < row["score"] < row["ci_high"]


def test_labels_name_each_methods_setting():
    assert entry_label("mudaf", {"heads": 0}) == "Vanilla SFT (full)"
    assert entry_label("mudaf", {"heads": 8}) == "MuDAF (n=8)"
    assert entry_label("opamp", {"K": "inf"}) == "OpAmp (K=∞)"
    assert entry_label("rectify", {"xi": 3, "g": "max"}) == "Rectification (ξ=3)"
    assert entry_label("lkg", {"estimator": "reranker"}) == "LKG-RALM (BM25 α)"


def test_write_leaderboard_writes_the_table_in_every_form(tmp_path):
    spec = _spec(ENTRIES, seeds=(0,))
    write_leaderboard(
        spec, _predictions(spec, {"qlora": 0.3, "opamp": 0.5, "lkg": 0.4}), tmp_path, resamples=200
    )
    for name in (
        "leaderboard.csv",
        "leaderboard.md",
        "leaderboard.html",
        "leaderboard.png",
        "leaderboard_long.csv",
    ):
        assert (tmp_path / name).stat().st_size > 0, name
