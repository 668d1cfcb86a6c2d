"""The rectification report of a per_dataset grid (the paper's App. A): each training set's models
fill their own benchmark's Table 1 column, and the README says which set served which benchmark."""

import pandas as pd

from tests.reporting.rectification.test_report import _eval, grid, render

SERVED = {"nq_like": "single_set", "multihop_like": "multihop_set"}
SET_SCORE = {"single_set": 0.71, "multihop_set": 0.33}  # each set's models score apart


def per_dataset_grid():
    """The shared test grid, its fine-tuned models trained once per set and tested on the
    benchmark their set serves only; a third benchmark without a training set."""
    spec, evals, margin = grid(seeds=(0,))
    rect = spec["rectification"]
    rect["train_scheme"] = "per_dataset"
    for b, name in SERVED.items():
        rect["benchmarks"][b]["train"] = name
    rect["benchmarks"]["asqa_like"] = {"family": "single", "metric": "contains", "train": None}
    cells, evals = {}, [e for e in evals if e["model"] == "base"]
    for mid, c in spec["cells"].items():
        for b, name in SERVED.items():
            model = mid.replace("_s0", f"-{name}_s0")
            cells[model] = c | {"dataset": name}
            evals.append(_eval(model, b, c["placement"], SET_SCORE[name]))
    evals += [_eval("base", "asqa_like", p, 0.2) for p in ("vanilla", "reverse")]
    return spec | {"cells": cells}, evals, margin


def test_each_training_sets_models_fill_their_own_benchmarks_column(tmp_path):
    render(*per_dataset_grid(), tmp_path)
    t1 = pd.read_csv(tmp_path / "table1.csv")
    tuned = t1[t1["row"] != "vanilla"]
    for b, name in SERVED.items():
        assert set(tuned[tuned["benchmark"] == b]["score"]) == {SET_SCORE[name] * 100}
    assert set(t1[t1["benchmark"] == "asqa_like"]["row"]) == {"vanilla"}  # the base only
    readme = (tmp_path / "README.md").read_text()
    assert "nq_like ← single_set, multihop_like ← multihop_set" in readme
    assert "No training set for asqa_like: the base row only." in readme
