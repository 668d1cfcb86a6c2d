import numpy as np
import pandas as pd
import pytest

from zoomattn.reporting.rectification import build_report
from zoomattn.reporting.rectification import published as paper


def render(spec, evals, margin, out):
    """The report of these inputs, as the report stage calls it."""
    build_report(spec, {"evals": evals, "margin": [margin]}, out)


RUNS = {  # run -> (method, values)
    "qlora": ("qlora", {}),
    "rectify-xi0": ("rectify", {"xi": 0, "g": "max"}),
    "rectify-xi3": ("rectify", {"xi": 3, "g": "max"}),
    "rectify-xiauto": ("rectify", {"xi": "auto", "g": "max"}),
    "rectify_g-gtanh": ("rectify", {"xi": 3, "g": "tanh"}),
}
SCORE = {"base": 0.40, "qlora": 0.50, "rectify-xi0": 0.52, "rectify-xi3": 0.60}
SCORE |= {"rectify-xiauto": 0.58, "rectify_g-gtanh": 0.55}
BENCH_OFFSET = {"nq_like": 0.0, "multihop_like": 0.1}
PLACEMENT_OFFSET = {"reverse": 0.02, "vanilla": 0.0}
SEED_OFFSET = {0: 0.0, 1: 0.04}  # seed 1 scores 4 points above seed 0


def score(run: str, bench: str, placement: str, seed: int) -> float:
    s = SCORE[run] + BENCH_OFFSET[bench] + PLACEMENT_OFFSET[placement]
    return round(s + (0.0 if run == "base" else SEED_OFFSET[seed]), 6)


def _eval(model, bench, placement, s, gap=12.0):
    return {
        "model": model,
        "benchmark": bench,
        "split": placement,
        "placement": placement,
        "metric": "contains",
        "score": s,
        "ci_low": s - 0.05,
        "ci_high": s + 0.05,
        "n": 300,
        "answer_gap": gap,
        "answer_gap_ci_low": None if gap is None else gap - 2,
        "answer_gap_ci_high": None if gap is None else gap + 2,
        "answer_gap_examples": 100,
    }


def grid(placements=("vanilla", "reverse"), seeds=(0, 1), published=True, runs=RUNS, gap=12.0):
    benchmarks = {
        "nq_like": {"family": "single", "metric": "contains", "published": "NQ"},
        "multihop_like": {"family": "multihop", "metric": "contains", "published": "HotpotQA"},
    }
    if not published:
        benchmarks = {
            b: {k: v for k, v in s.items() if k != "published"} for b, s in benchmarks.items()
        }
    cells = {
        f"rectification/{run}-{p}_s{seed}": {
            "run": run,
            "method": method,
            "values": values,
            "placement": p,
            "seed": seed,
        }
        for run, (method, values) in runs.items()
        for p in placements
        for seed in seeds
    }
    spec = {
        "preset": "tiny",
        "seeds": list(seeds),
        "base": "base",
        "code": "abc",
        "rectification": {
            "placements": list(placements),
            "distractors": 3,
            "methods": {},
            "benchmarks": benchmarks,
        },
        "cells": cells,
    }
    evals = [
        _eval("base", b, p, score("base", b, p, 0), gap) for b in benchmarks for p in placements
    ]
    evals += [
        _eval(m, b, c["placement"], score(c["run"], b, c["placement"], c["seed"]), gap)
        for m, c in cells.items()
        for b in benchmarks
    ]
    rng = np.random.default_rng(0)
    margins = rng.normal(6.0, 1.0, size=(5, 4, 8))
    margin = {
        "model": "base",
        "examples": 5,
        "margins": margins.round(4).tolist(),
        "median": 5.9,
        "p10": 4.7,
        "p90": 7.3,
        "per_layer_median": [5.8, 5.9, 6.0, 6.1],
        "xi_auto": 2.95,
    }
    return spec, evals, margin


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("rect")
    render(*grid(), out)
    return out


def test_every_table_figure_and_readme_is_written_and_non_empty(report):
    names = ["README.md", "table1.csv", "table1.md", "table1_xi.png", "table1_published.md"]
    names += ["table1_published.png", "table1_comparison.csv", "table1_comparison.md"]
    names += ["fig3_answer_gap.csv", "fig3_answer_gap.md", "fig3_answer_gap.png"]
    names += ["fig4_g_variants.csv", "fig4_g_variants.md", "fig4_g_variants.png"]
    names += ["fig5_margin.csv", "fig5_margin.md", "fig5_margin.png"]
    for name in names:
        assert (report / name).stat().st_size > 0, name
    readme = (report / "README.md").read_text()
    assert readme.startswith(
        "# Attention rectification part: preset tiny, seeds 0, 1, 95% bootstrap CI"
    )
    for png in [n for n in names if n.endswith(".png")]:
        assert f"({png})" in readme
    assert "synthetic analogues" in readme and "trends, not values" in readme


def test_table1_csv_holds_seed_averaged_scores_x100_with_ci_envelope(report):
    t1 = pd.read_csv(report / "table1.csv").set_index(["row", "benchmark", "placement"])
    xi3 = t1.loc[("ξ=3", "nq_like", "reverse")]  # seeds: 62.0 and 66.0
    assert xi3["score"] == pytest.approx(64.0)
    assert xi3["ci_low"] == pytest.approx(57.0)  # lowest lower bound (seed 0)
    assert xi3["ci_high"] == pytest.approx(71.0)  # highest upper bound (seed 1)
    assert xi3["seeds"] == 2
    assert t1.loc[("LoRA", "multihop_like", "vanilla"), "score"] == pytest.approx(62.0)
    base = t1.loc[("vanilla", "nq_like", "vanilla")]  # the base model, evaluated once
    assert (base["score"], base["seeds"]) == (pytest.approx(40.0), 1)
    assert "tanh" not in set(t1.index.get_level_values("row"))  # only g = max enters Table 1
    md = (report / "table1.md").read_text()
    assert "64.0 [57.0, 71.0]" in md


def test_table1_rows_in_paper_order_with_auto_labelled_by_the_margins_xi(report):
    rows = list(dict.fromkeys(pd.read_csv(report / "table1.csv")["row"]))
    assert rows == ["vanilla", "LoRA", "ξ=0", "ξ=3", "ξ=auto (=2.95)"]
    md = (report / "table1.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| row"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert cols[1:] == [
        "nq_like reverse",
        "nq_like vanilla",
        "multihop_like reverse",
        "multihop_like vanilla",
        "mean",
    ]


def test_published_table_carries_grid_numbers_and_delta_is_ours_minus_published(report):
    md = (report / "table1_published.md").read_text().splitlines()
    xi3 = [c.strip() for c in next(r for r in md if r.startswith("| ξ=3 ")).strip("|").split("|")]
    assert xi3[:3] == ["ξ=3", "67.7", "64.2"]  # NQ reverse, NQ vanilla
    pub = pd.read_csv(report / "table1_published.csv", index_col="row")
    assert pub.loc["ξ=3", "NQ reverse"] == 67.7
    assert pub.loc["vanilla", "HotpotQA vanilla"] == 54.3
    cmp = pd.read_csv(report / "table1_comparison.csv")
    row = cmp[
        (cmp["row"] == "ξ=3") & (cmp["benchmark"] == "nq_like") & (cmp["placement"] == "reverse")
    ]
    assert row["published"].item() == 67.7
    assert row["Δ"].item() == pytest.approx(64.0 - 67.7)
    assert (cmp["Δ"] - (cmp["ours"] - cmp["published"])).abs().max() < 1e-9
    assert "ξ=auto (=2.95)" not in set(cmp["row"])  # the paper has no such row


def test_fig4_table_has_one_row_per_g_with_max_from_the_xi3_sweep_run(report):
    g = pd.read_csv(report / "fig4_g_variants.csv")
    assert list(dict.fromkeys(g["row"])) == ["max", "tanh"]
    assert set(g.loc[g["row"] == "max", "run"]) == {"rectify-xi3"}
    t1 = pd.read_csv(report / "table1.csv").set_index(["row", "benchmark", "placement"])
    for r in g[g["row"] == "max"].itertuples():
        assert r.score == pytest.approx(t1.loc[("ξ=3", r.benchmark, r.placement), "score"])
    tanh = g.set_index(["row", "benchmark", "placement"]).loc[("tanh", "nq_like", "vanilla")]
    assert tanh["score"] == pytest.approx(57.0)  # seeds 55 and 59


def test_answer_gap_and_margin_tables_and_notes(report):
    gaps = pd.read_csv(report / "fig3_answer_gap.csv")
    assert set(gaps["row"]) == {"vanilla", "LoRA", "ξ=0", "ξ=3", "ξ=auto (=2.95)"}
    assert gaps["answer_gap"].eq(12.0).all()
    readme = (report / "README.md").read_text()
    assert "no numbers" in readme  # Fig. 3 and 4 are charts only in the paper
    assert "lies about 6" in readme
    stats = pd.read_csv(report / "fig5_margin.csv", index_col="statistic")["value"]
    assert stats["median"] == 5.9 and stats["xi_auto"] == 2.95 and stats["layer 3 median"] == 6.1


def test_single_placement_without_published_names_still_builds(tmp_path):
    spec, evals, margin = grid(placements=("reverse",), seeds=(0,), published=False)
    render(spec, evals, margin, tmp_path)
    readme = (tmp_path / "README.md").read_text()
    assert "seeds 0, 95% bootstrap CI" in readme
    assert "no comparison table" in readme
    assert not (tmp_path / "table1_comparison.csv").exists()
    assert (tmp_path / "table1_published.md").exists()  # the paper's table stands on its own
    t1 = pd.read_csv(tmp_path / "table1.csv")
    assert set(t1["placement"]) == {"reverse"}
    assert (tmp_path / "table1_xi.png").stat().st_size > 0


def test_missing_auto_g_variants_answer_gaps_and_margins_are_skipped_with_a_sentence(tmp_path):
    runs = {k: v for k, v in RUNS.items() if k in ("qlora", "rectify-xi0", "rectify-xi3")}
    spec, evals, _ = grid(runs=runs, gap=None)
    render(spec, evals, {}, tmp_path)
    readme = (tmp_path / "README.md").read_text()
    assert "No ξ=auto cell" in readme
    assert "No g variants" in readme
    assert "No answer-gap measurements" in readme
    assert "No margin measurements" in readme
    for name in ("fig3_answer_gap.png", "fig4_g_variants.png", "fig5_margin.png"):
        assert not (tmp_path / name).exists()
    assert (tmp_path / "table1_xi.png").exists()


def test_published_lookup_and_column_aliases():
    assert paper.lookup("ξ=3", "NQ", "reverse") == 67.7
    assert paper.lookup("LoRA", "ASQA", "vanilla") == 42.2
    assert paper.lookup("ξ=auto", "NQ", "reverse") is None
    assert paper.column({"published": "Hotpot"}) == "HotpotQA"
    assert paper.column({"published": "TriviaQA"}) == "TriviaQA"
    assert paper.column({}) is None
    for row, values in paper.TABLE1.items():  # the transcription: the mean column agrees
        assert abs(sum(values[:-1]) / 10 - values[-1]) < 0.051, row


def test_xi_rows_follow_the_value_of_xi_not_the_json_order_of_the_cells():
    from zoomattn.reporting.rectification import grid_rows

    cells = {  # as the rule's JSON spec (sort_keys) delivers them: xi10 before xi3
        f"rectification/rectify-xi{x}-reverse_s0": {
            "run": f"rectify-xi{x}",
            "method": "rectify",
            "values": {"xi": x, "g": "max"},
        }
        for x in sorted(["0", "1", "10", "3", "5", "auto"])
    }
    cells = {
        k: v | {"values": v["values"] | {"xi": _num(v["values"]["xi"])}} for k, v in cells.items()
    }
    rows = [r.label for r in grid_rows({"cells": cells}, {"xi_auto": 4.2}) if r.kind == "xi"]
    assert rows == ["ξ=0", "ξ=1", "ξ=3", "ξ=5", "ξ=10", "ξ=auto (=4.2)"]


def _num(x: str):
    return x if x == "auto" else int(x)


def _with_rule(evals, bench="nq_like", rule="alce_contains", shift=0.2):
    """The evals with ``bench`` also scored by a published rule, ``shift`` above the standard."""
    out = []
    for e in evals:
        if e["benchmark"] == bench:
            s = e["score"] + shift
            e = e | {"published_rule": {"rule": rule, "score": s, "ci_low": s - 0.05}}
            e["published_rule"]["ci_high"] = s + 0.05
        out.append(e)
    return out


def test_a_published_rule_adds_its_columns_beside_the_comparison_and_leaves_table1_as_is(tmp_path):
    spec, evals, margin = grid()
    (tmp_path / "plain").mkdir(), (tmp_path / "rule").mkdir()
    render(spec, evals, margin, tmp_path / "plain")
    render(spec, _with_rule(evals), margin, tmp_path / "rule")
    for name in ("table1.csv", "table1.md", "table1_published.csv"):
        assert (tmp_path / "plain" / name).read_bytes() == (tmp_path / "rule" / name).read_bytes()
    plain = pd.read_csv(tmp_path / "plain" / "table1_comparison.csv")
    ruled = pd.read_csv(tmp_path / "rule" / "table1_comparison.csv")
    assert "rule" not in plain.columns
    assert ruled[plain.columns].equals(plain)  # the standard comparison unchanged
    nq = ruled[ruled["benchmark"] == "nq_like"]
    assert set(nq["rule"]) == {"alce_contains"}
    assert np.allclose(nq["ours (rule)"].astype(float), nq["ours"] + 20.0, atol=0.11)
    assert np.allclose(
        nq["Δ (rule)"].astype(float), nq["ours (rule)"].astype(float) - nq["published"]
    )
    assert set(ruled[ruled["benchmark"] == "multihop_like"]["ours (rule)"]) == {"–"}
    assert "ours (rule)" in (tmp_path / "rule" / "table1_comparison.md").read_text()
