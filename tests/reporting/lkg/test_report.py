"""The LKG-RALM report from hand-made metric files (test fixtures, not real runs): every expected
number below is computed by hand from the fixture scores."""

import json

import pandas as pd
import pytest

from zoomattn.reporting.lkg import build_report, table2_rows
from zoomattn.reporting.lkg import published as paper
from zoomattn.reporting.lkg.report import robustness_frame
from zoomattn.reporting.lkg.table2 import parse_split, scores_frame


def render(spec, evals, patterns, train, out):
    """The report of these inputs, as the report stage calls it."""
    build_report(spec, {"evals": evals, "patterns": patterns, "train_metrics": train}, out)


RUNS = {  # run -> (method, values), in config order
    "qlora": ("qlora", {}),
    "lkg": ("lkg", {"adapter_dim": 64}),
    "lkg_no_lpr": ("lkg", {"estimator": "reranker"}),
    "lkg_no_els": ("lkg", {"entropy": False}),
    "lkg_no_rpf": ("lkg", {"fusion": False}),
    "lkg_no_aux": ("lkg", {"aux_weight": 0.0}),
}
SCORE = {"base": 0.20, "qlora": 0.30, "lkg": 0.50, "lkg_no_lpr": 0.44, "lkg_no_els": 0.48}
SCORE |= {"lkg_no_rpf": 0.25, "lkg_no_aux": 0.49}
BENCH_OFFSET = {"nq_open": 0.0, "hotpot_open": -0.10}
HALF_CI = 0.025  # every interval: score ± 2.5 points
ROBUST = {"lkg": {"n0": 0.10, "n1": 0.30, "n3": 0.40, "n10": 0.55}, "qlora": {"n0": 0.10}}
ROBUST["lkg"] |= {"irr0": 0.55, "irr0.25": 0.50, "irr1": 0.20}
ROBUST["qlora"] |= {"n1": 0.20, "n3": 0.25, "n10": 0.30, "irr0": 0.30, "irr0.25": 0.28}
ROBUST["qlora"] |= {"irr1": 0.05}
BASE_CLASSES = [["edge", "edge", "middle", "uniform"], ["edge", "other", "edge", "middle"]]


def _eval(model, bench, split, s, n=200):
    s = round(s, 6)
    return {"model": model, "benchmark": bench, "split": split, "metric": "em", "score": s} | {
        "ci_low": round(s - HALF_CI, 6),
        "ci_high": round(s + HALF_CI, 6),
        "n": n,
    }


def _patterns(model, classes=BASE_CLASSES):
    flat = [c for layer in classes for c in layer]
    dist = {c: flat.count(c) / len(flat) for c in ("edge", "uniform", "middle", "other")}
    middle = [
        [i, j] for i, layer in enumerate(classes) for j, c in enumerate(layer) if c == "middle"
    ]
    return {
        "model": model,
        "examples": 8,
        "layers": len(classes),
        "heads": len(classes[0]),
        "classes": ["edge", "uniform", "middle", "other"],
        "head_class": classes,
        "distribution": dist,
        "example_distribution": {"edge": 0.6, "uniform": 0.1, "middle": 0.2, "other": 0.1},
        "mean_mass": {"head": 0.5, "middle": 0.3, "tail": 0.2},
        "middle_heads": middle,
    }


def grid(runs=RUNS, seeds=(0,), robustness=True, benchmarks=None):
    benchmarks = benchmarks or {
        "nq_open": {"family": "single", "metric": "em", "published": "NQ"},
        "hotpot_open": {"family": "multihop", "metric": "em", "published": "hotpotqa"},
    }
    cells = {
        f"lkg/{run}_s{seed}": {"run": run, "entry": run, "method": m, "values": v, "seed": seed}
        for run, (m, v) in runs.items()
        for seed in seeds
    }
    block = {"distractors": 9, "benchmarks": benchmarks}
    block["head_patterns"] = {"benchmark": "nq_open", "examples": 8}
    if robustness:
        block["robustness"] = {"benchmark": "nq_open", "models": ["lkg", "qlora"]}
        block["robustness"] |= {"passages": [0, 1, 3, 10]}
        block["robustness"]["irrelevant"] = {"passages": 10, "shares": [0.0, 0.25, 1.0]}
    spec = {"preset": "tiny", "lkg": block, "cells": cells, "base": "base", "seeds": list(seeds)}
    evals = [_eval("base", b, "vanilla", SCORE["base"] + off) for b, off in BENCH_OFFSET.items()]
    for model, c in cells.items():
        bump = 0.04 * c["seed"]  # seed 1 scores 4 points above seed 0
        evals += [
            _eval(model, b, "vanilla", SCORE.get(c["run"], 0.5) + off + bump)
            for b, off in BENCH_OFFSET.items()
            if b in benchmarks
        ]
        if robustness and c["run"] in ROBUST:  # splits deliberately out of numeric order
            for split in ("n10", "irr1", "n0", "irr0.25", "n3", "irr0", "n1"):
                evals.append(_eval(model, "nq_open", split, ROBUST[c["run"]][split] + bump))
    patterns = [_patterns("base")] + [_patterns(m) for m in cells]
    patterns.append(_patterns("mudaf/mudaf-heads2_s0", [["edge"] * 4, ["edge"] * 4]))
    train = [
        {"model": "lkg/lkg_s0", "steps": 6, "trainable_params": 1234, "relevance_loss": 0.4},
        {"model": "lkg/qlora_s0", "steps": 6, "trainable_params": 1000},
    ]
    return spec, evals, patterns, train


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("lkg")
    render(*grid(), out)
    return out


def test_row_labels_come_from_method_and_values_not_from_run_names():
    runs = {
        "plain": ("qlora", {}),
        "a": ("lkg", {"estimator": "reranker"}),
        "b": ("lkg", {"entropy": False, "fusion": False}),
        "c": ("lkg", {"aux_weight": 0}),
        "d": ("lkg", {"beta": 0.5}),
        "e": ("lkg", {"estimator": "layerwise"}),  # the default estimator: the full method
    }
    spec = grid(runs=runs)[0]
    labels = {r.run: r.label for r in table2_rows(spec)}
    assert labels == {
        "base": "+ Retrieval (base)",
        "plain": "+ Fine-tuning (LoRA)",
        "a": "w/o LPR",
        "b": "w/o ELS & w/o RPF",
        "c": "w/o Auxiliary Loss",
        "d": "LKG-RALM",
        "e": "LKG-RALM (e)",  # taken by d (config order): the run name is appended
    }
    order = [r.label for r in table2_rows(spec)]
    assert order == [
        "+ Retrieval (base)",
        "+ Fine-tuning (LoRA)",
        "LKG-RALM",
        "LKG-RALM (e)",
        "w/o LPR",
        "w/o Auxiliary Loss",
        "w/o ELS & w/o RPF",
    ]


def test_table2_deltas_against_our_full_row_and_the_papers_full_row(report):
    t2 = pd.read_csv(report / "table2_ablations.csv").set_index(["row", "benchmark"])
    lpr = t2.loc[("w/o LPR", "nq_open")]
    assert (lpr["score"], lpr["ci_low"], lpr["ci_high"]) == pytest.approx((44.0, 41.5, 46.5))
    assert lpr["Δ full"] == pytest.approx(-6.0)  # 44.0 − 50.0
    assert not lpr["overlaps full"]  # [41.5, 46.5] vs [47.5, 52.5]
    assert lpr["paper Δ full"] == pytest.approx(-4.7)  # 50.6 − 55.3
    els = t2.loc[("w/o ELS", "hotpot_open")]
    assert els["Δ full"] == pytest.approx(-2.0)  # 38.0 − 40.0
    assert els["overlaps full"]  # [35.5, 40.5] vs [37.5, 42.5]
    assert els["paper Δ full"] == pytest.approx(-1.3)  # 41.8 − 43.1
    base = t2.loc[("+ Retrieval (base)", "nq_open")]
    assert base["Δ full"] == pytest.approx(-30.0)
    assert base["published"] == pytest.approx(30.9)  # Table 1's "+ Retrieval"
    assert base["paper Δ full"] == pytest.approx(-24.4)
    md = (report / "table2_ablations.md").read_text()
    assert "44.0 [41.5, 46.5]" in md
    assert "| w/o LPR " in md and "-6.00" in md  # mean Δ over both benchmarks
    assert "-4.15" in md  # the paper's over NQ and HotpotQA: (−4.7 − 3.6) / 2
    assert "-3.96" in md  # the paper's over its five columns


def test_published_columns_join_by_the_benchmarks_published_name(tmp_path):
    benchmarks = {
        "nq_open": {"family": "single", "metric": "em", "published": "NQ"},
        "hotpot_open": {"family": "multihop", "metric": "em", "published": "Hotpot-QA"},
        "mine": {"family": "single", "metric": "em"},  # no paper column
    }
    spec, evals, patterns, train = grid(benchmarks=benchmarks, robustness=False)
    evals += [_eval(m, "mine", "vanilla", 0.5) for m in ["base", *spec["cells"]]]
    render(spec, evals, patterns, train, tmp_path)
    t2 = pd.read_csv(tmp_path / "table2_ablations.csv").set_index(["row", "benchmark"])
    assert t2.loc[("w/o RPF", "hotpot_open"), "paper column"] == "HotpotQA"
    assert t2.loc[("w/o RPF", "hotpot_open"), "published"] == pytest.approx(26.0)
    assert t2.loc[("+ Fine-tuning (LoRA)", "nq_open"), "published"] == pytest.approx(35.7)
    assert pd.isna(t2.loc[("LKG-RALM", "mine"), "published"])
    header = (tmp_path / "table2_ablations.md").read_text().split("| row")[1].split("\n")[0]
    assert "paper NQ" in header and "paper HotpotQA" in header
    assert "mine Δ" in header and "paper mine" not in header
    assert "same columns" in header  # its mean is "–": the paper has no column for "mine"


def test_robustness_splits_parse_to_numbers():
    assert parse_split("n10") == ("passages", 10.0)
    assert parse_split("irr0.25") == ("irrelevant", 0.25)
    assert parse_split("irr1") == ("irrelevant", 1.0)
    assert parse_split("vanilla") is None


def test_robustness_table_is_ordered_by_axis_model_and_numeric_x(report):
    rob = pd.read_csv(report / "robustness.csv")
    got = list(zip(rob["axis"], rob["row"], rob["x"], strict=True))
    want = [("passages", "LKG-RALM", x) for x in (0, 1, 3, 10)]
    want += [("passages", "+ Fine-tuning (LoRA)", x) for x in (0, 1, 3, 10)]
    want += [("irrelevant", "LKG-RALM", x) for x in (0, 0.25, 1)]
    want += [("irrelevant", "+ Fine-tuning (LoRA)", x) for x in (0, 0.25, 1)]
    assert got == want
    at = rob.set_index(["row", "split"])
    assert at.loc[("LKG-RALM", "irr0.25"), "score"] == pytest.approx(50.0)
    md = (report / "robustness.md").read_text()
    headers = [line.split("|")[2:-1] for line in md.splitlines() if line.startswith("| row")]
    assert [[h.strip() for h in hs] for hs in headers] == [
        ["k=0", "k=1", "k=3", "k=10"],
        ["0%", "25%", "100%"],
    ]
    assert "LKG-RALM: 55.0 at 0% → 20.0 at 100% (Δ -35.0)" in md
    assert "LKG-RALM: 10.0 at k=0 → 55.0 at k=10 (peak 55.0 at k=10)" in md
    # k=0: both 10.0 (overlap); k=1: [27.5, 32.5] vs [17.5, 22.5] (above)
    assert "LKG-RALM vs + Fine-tuning (LoRA) (95% intervals): above at k=1, k=3, k=10; " in md


def test_figures_are_written_and_linked(report):
    for name in ("fig6a_passages.png", "fig6b_irrelevant.png", "fig2_head_patterns.png"):
        assert (report / name).stat().st_size > 1000, name
        assert f"({name})" in (report / "README.md").read_text()
    for name in ("table2_ablations", "robustness", "head_patterns", "training"):
        assert (report / f"{name}.csv").stat().st_size > 0
        assert (report / f"{name}.md").stat().st_size > 0


def test_readme_states_preset_seeds_n_and_interval_overlaps(report):
    readme = (report / "README.md").read_text()
    assert readme.startswith("# LKG-RALM part: preset tiny, seeds 0, 95% bootstrap CI")
    assert "nq_open n=200 (vanilla, n0, n1, n3, n10, irr0, irr0.25, irr1)" in readme
    assert "synthetic analogues" in readme
    assert "- **w/o LPR**: nq_open: Δ -6.0, interval separate from the full method's" in readme
    assert "hotpot_open: Δ -2.0, interval overlaps the full method's (paper Δ -1.3)" in readme
    # every ablation is below the full method on both benchmarks; LPR and RPF apart on both
    assert "every interval separate from the full method's: w/o LPR, w/o RPF." in readme
    assert "Largest mean drop (ours): w/o RPF (-25.00)" in readme
    assert "Skipped or missing" not in readme


def test_head_patterns_show_base_and_study_models_and_the_csv_holds_every_model(report):
    csv = pd.read_csv(report / "head_patterns.csv")
    assert list(csv["model"])[:2] == ["base", "lkg/qlora_s0"]  # base, then Table 2's order
    assert "mudaf/mudaf-heads2_s0" in set(csv["model"])
    base = csv.set_index("model").loc["base"]
    assert (base["edge %"], base["uniform %"], base["middle %"]) == pytest.approx((50, 12.5, 25))
    assert base["middle heads"] == 2
    md = (report / "head_patterns.md").read_text()
    assert "mudaf" not in md.split("\n\n", 2)[2]
    assert "| paper (Llama-3.1-8B) |" in md and "10.63" in md
    assert "the base's heads are 50.0% edge, 12.5% uniform, 25.0% middle-focused" in md


def test_training_table_shows_what_is_there_and_leaves_missing_keys_blank(report):
    csv = pd.read_csv(report / "training.csv").set_index("model")
    assert list(csv.columns) == ["row", "steps", "trainable_params", "relevance_loss"]
    assert csv.loc["lkg/lkg_s0", "relevance_loss"] == pytest.approx(0.4)
    assert pd.isna(csv.loc["lkg/qlora_s0", "relevance_loss"])
    md = (report / "training.md").read_text()
    assert "| lkg/qlora_s0 | + Fine-tuning (LoRA) | 6       | 1000               |  " in md


def test_summary_json_holds_every_number_the_readme_quotes(report):
    s = json.loads((report / "summary.json").read_text())
    assert s["preset"] == "tiny" and s["seeds"] == [0]
    lpr = next(r for r in s["table2"] if (r["row"], r["benchmark"]) == ("w/o LPR", "nq_open"))
    assert lpr | {"run": "lkg_no_lpr"} == lpr
    assert (lpr["score"], lpr["ci_low"], lpr["ci_high"]) == pytest.approx((44.0, 41.5, 46.5))
    assert (lpr["Δ full"], lpr["published"], lpr["paper Δ full"]) == pytest.approx((-6, 50.6, -4.7))
    assert lpr["overlaps full"] is False
    assert s["table2_mean_delta"]["w/o LPR"]["ours"] == pytest.approx(-6.0)
    assert s["table2_mean_delta"]["w/o LPR"]["paper_all_columns"] == pytest.approx(-3.96)
    point = next(p for p in s["robustness"] if p["split"] == "irr0.25" and p["run"] == "qlora")
    assert (point["x"], point["score"], point["n"]) == pytest.approx((0.25, 28.0, 200))
    base = next(p for p in s["head_patterns"] if p["model"] == "base")
    assert base["other %"] == pytest.approx(12.5)
    assert s["published"]["fig2"] == paper.FIG2
    assert s["notes"] == []


def test_seeds_combine_by_mean_and_ci_envelope(tmp_path):
    render(*grid(seeds=(0, 1)), tmp_path)
    t2 = pd.read_csv(tmp_path / "table2_ablations.csv").set_index(["row", "benchmark"])
    full = t2.loc[("LKG-RALM", "nq_open")]  # seed 0: 50 [47.5, 52.5], seed 1: 54 [51.5, 56.5]
    assert (full["score"], full["ci_low"], full["ci_high"], full["seeds"]) == pytest.approx(
        (52.0, 47.5, 56.5, 2)
    )
    assert "envelope" in (tmp_path / "README.md").read_text()


def test_no_robustness_configured_skips_fig6_with_a_note(tmp_path):
    render(*grid(robustness=False), tmp_path)
    assert not (tmp_path / "fig6a_passages.png").exists()
    readme = (tmp_path / "README.md").read_text()
    assert "Fig. 6 skipped: no robustness sets configured." in readme
    assert json.loads((tmp_path / "summary.json").read_text())["robustness"] == []


def test_missing_robustness_evals_are_noted_and_absent_axes_skipped(tmp_path):
    spec, evals, patterns, train = grid()
    evals = [e for e in evals if not e["split"].startswith("irr")]
    evals = [e for e in evals if (e["model"], e["split"]) != ("lkg/qlora_s0", "n3")]
    render(spec, evals, patterns, train, tmp_path)
    assert (tmp_path / "fig6a_passages.png").exists()
    assert not (tmp_path / "fig6b_irrelevant.png").exists()
    readme = (tmp_path / "README.md").read_text()
    assert "Fig. 6b skipped: no evaluation of ours on this axis." in readme
    said = "lkg/lkg_s0 (irr0, irr0.25, irr1); lkg/qlora_s0 (n3, irr0, irr0.25, irr1)."
    assert f"Robustness evaluations missing (left out of Fig. 6): {said}" in readme


def test_robustness_models_are_the_cells_of_their_entry_not_runs_named_like_it():
    spec, evals, _, _ = grid()
    spec["cells"]["lkg/lkg-beta1_s0"] = {"run": "lkg-beta1", "entry": "lkg_beta"} | {
        "method": "lkg",
        "values": {"beta": 1},
        "seed": 0,
    }
    rows = table2_rows(spec)
    _, labels, _ = robustness_frame(spec, rows, scores_frame(rows, evals), evals)
    assert labels == [paper.FULL_ROW, paper.FT_ROW]  # entries lkg and qlora; not lkg-beta1


def test_no_robustness_evals_at_all_skip_fig6(tmp_path):
    spec, evals, patterns, train = grid()
    evals = [e for e in evals if e["split"] == "vanilla"]
    render(spec, evals, patterns, train, tmp_path)
    assert not (tmp_path / "robustness.csv").exists()
    assert (
        "Fig. 6 skipped: no robustness evaluation among the inputs."
        in (tmp_path / "README.md").read_text()
    )


def test_missing_main_eval_is_an_error_naming_model_and_split(tmp_path):
    spec, evals, patterns, train = grid()
    evals = [
        e for e in evals if (e["model"], e["benchmark"]) != ("lkg/lkg_no_els_s0", "hotpot_open")
    ]
    with pytest.raises(ValueError, match=r"lkg/lkg_no_els_s0 on hotpot_open \(split vanilla\)"):
        render(spec, evals, patterns, train, tmp_path)


def test_missing_patterns_and_training_are_noted_not_errors(tmp_path):
    spec, evals, patterns, _ = grid(robustness=False)
    render(spec, evals, [p for p in patterns if p["model"] != "base"], [], tmp_path)
    readme = (tmp_path / "README.md").read_text()
    assert "Head patterns missing for: base." in readme
    assert "class map skipped: no head patterns of the base" in readme
    assert "Training table skipped" in readme
    assert (tmp_path / "fig2_head_patterns.png").stat().st_size > 0
