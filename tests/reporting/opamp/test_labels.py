import pandas as pd
import pytest

from zoomattn.reporting.opamp import build_report, label_of, rows, scores_frame


def _cell(run: str, method: str, seed: int = 0, **values) -> dict:
    return {"run": run, "method": method, "values": values, "seed": seed}


CELLS = {  # as the spec's JSON holds them: sorted by model id, not by K
    "opamp-K10_s0": _cell("opamp-K10", "opamp", K=10, every=2),
    "opamp-K1_s0": _cell("opamp-K1", "opamp", K=1, every=2),
    "opamp-Kinf_s0": _cell("opamp-Kinf", "opamp", K="inf", every=2),
    "opamp_big_s0": _cell("opamp_big", "opamp", K=10, adapter_dim=64),
    "opamp_half_s0": _cell("opamp_half", "opamp", K=2.5),
    "qlora_s0": _cell("qlora", "qlora"),
    "qlora_s1": _cell("qlora", "qlora", seed=1),
    "rectify-xi3_s0": _cell("rectify-xi3", "rectify", xi=3),
}


def test_rows_are_named_by_method_and_k_and_ordered_base_qlora_other_then_by_k():
    got = [(r.label, r.kind, r.models) for r in rows(CELLS)]
    assert got == [
        ("base (no fine-tune)", "base", ("base",)),
        ("QLoRA", "qlora", ("qlora_s0", "qlora_s1")),
        ("rectify-xi3", "other", ("rectify-xi3_s0",)),  # a method the paper has no name for
        ("K=1", "opamp", ("opamp-K1_s0",)),
        ("K=2.5", "opamp", ("opamp_half_s0",)),
        ("K=10", "opamp", ("opamp-K10_s0",)),
        ("K=10 (opamp_big)", "opamp", ("opamp_big_s0",)),  # the same K: its run tells them apart
        ("K=∞", "opamp", ("opamp-Kinf_s0",)),
    ]


def test_an_entry_not_named_after_its_k_is_labelled_and_ordered_by_its_cell():
    cells = {"opamp_big_s0": _cell("opamp_big", "opamp", K=10), "qlora_s0": _cell("qlora", "qlora")}
    assert label_of(rows(cells, base="base")) == {
        "base": "base (no fine-tune)",
        "opamp_big_s0": "K=10",  # its published row
        "qlora_s0": "QLoRA",
    }


def test_an_opamp_cell_without_k_is_an_error_naming_its_run():
    with pytest.raises(ValueError, match="'opamp_big' has no K"):
        rows({"opamp_big_s0": _cell("opamp_big", "opamp")})


def _eval(model: str, score: float, noise: float = 0.8) -> dict:
    return {"model": model, "benchmark": "coqa_like", "noise_ratio": noise, "metric": "em"} | {
        "score": score,
        "ci_low": score - 0.05,
        "ci_high": score + 0.05,
    }


def test_scores_follow_the_rows_order_and_an_unknown_model_is_an_error():
    cells = {m: CELLS[m] for m in ("opamp_big_s0", "opamp-K1_s0", "qlora_s0")}
    table = scores_frame([_eval(m, 0.5) for m in ["opamp_big_s0", "base", *cells]], rows(cells))
    assert list(table["label"]) == ["base (no fine-tune)", "QLoRA", "K=1", "K=10"]
    with pytest.raises(ValueError, match="opamp-K5_s0 is neither its base nor a cell"):
        scores_frame([_eval("opamp-K5_s0", 0.5)], rows(cells))


def _attention(model: str) -> dict:
    positions = [{"position": p, "golden_share": 0.1 * p, "noise_share": 0.1} for p in (1, 2)]
    return {"model": model, "by_position": positions, "n_examples": 20} | {
        "mean_golden_share": 0.15,
        "golden_is_top": 0.5,
        "uniform_share": 0.1,
    }


def test_the_report_of_a_grid_with_an_entry_named_opamp_big_labels_it_by_k(tmp_path):
    cells = {m: CELLS[m] for m in ("opamp_big_s0", "opamp-K1_s0", "qlora_s0")}
    models = ["base", *cells]
    benchmarks = {"coqa_like": {"family": "single", "metric": "em", "noise_ratios": [0.0, 0.8]}}
    spec = {"preset": "smoke", "seeds": [0], "benchmarks": benchmarks, "cells": cells}
    inputs = {
        "evals": [_eval(m, 0.1 * i, r) for i, m in enumerate(models) for r in (0.0, 0.8)],
        "attention": [_attention(m) for m in models],
        "base_metrics": [{"source": "hub"}],
    }
    build_report(spec, inputs, tmp_path)
    t3 = pd.read_csv(tmp_path / "table3_cmrr.csv")
    assert list(t3["model"]) == ["base (no fine-tune)", "QLoRA", "K=1", "K=10"]
    assert list(t3["published Avg"]) == ["–", "52.4", "54.1", "55.4"]  # K=10: the paper's row
    readme = (tmp_path / "README.md").read_text()
    assert "| K=10 | 0.150 |" in readme  # its golden attention share
