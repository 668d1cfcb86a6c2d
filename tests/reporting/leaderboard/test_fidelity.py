"""The fidelity tables on synthetic metric files: published deltas and the claims' verdicts."""

import numpy as np
import pandas as pd
import pytest

from zoomattn.reporting.leaderboard.claims import claims
from zoomattn.reporting.leaderboard.fidelity import fidelity_numbers, write_fidelity
from zoomattn.reporting.mudaf import published as paper_mudaf
from zoomattn.reporting.opamp import published
from zoomattn.reporting.rectification import published as paper_rect

N = 40  # examples per eval set
OPAMP_BENCHMARKS = {
    "coqa_like": {"family": "single", "metric": "em", "noise_ratios": [0.0, 0.9]},
    "faitheval_like": {"family": "faitheval", "metric": "acc", "noise_ratios": [0.0]},
}
SHUFFLE = {"qlora": 1, "opamp-K10": 3, "opamp-K20": 5}  # each run's own order of examples
SUBSETS = ("inconsistent", "unanswerable", "counterfactual")
RECT = {
    "placements": ["vanilla", "reverse"],
    "methods": {"qlora": {}, "rectify": {"xi": [0, 3, 5], "g": "max"}},
    "benchmarks": {"nq_like": {"family": "single", "metric": "contains", "published": "NQ"}},
}
MUDAF = {
    "methods": {"mudaf": {"heads": [0, 8, 16], "selection": "weighted"}},
    "benchmarks": {"mdqa_like": {"family": "multihop", "metric": "pm", "published": "HotpotQA"}},
}
LKG = {
    "methods": {"lkg": {}, "lkg_no_rpf": {"method": "lkg", "fusion": False}},
    "benchmarks": {"nq_open": {"family": "single", "metric": "em", "published": "NQ"}},
}


def hits(k: int, seed: int = 0) -> np.ndarray:
    """N per-example scores with exactly k ones, in an order fixed by ``seed``."""
    x = np.zeros(N)
    x[:k] = 1.0
    return np.random.default_rng(seed).permutation(x)


class World:
    """Eval metric dicts and per-example predictions built as the evaluation writes them."""

    def __init__(self):
        self.evals: list[dict] = []
        self.predictions: dict = {}
        self.cells: dict = {}

    def add(self, model: str, benchmark: str, split: str, scores: np.ndarray, **extra) -> None:
        ids = [f"{benchmark}-{i}" for i in range(N)]  # a placement changes the layout, not ids
        self.predictions[(model, benchmark, split)] = dict(zip(ids, scores.tolist(), strict=True))
        mean = float(scores.mean())
        e = {"model": model, "benchmark": benchmark, "split": split, "metric": "em", "n": N}
        self.evals.append(e | {"score": mean, "ci_low": mean - 0.1, "ci_high": mean + 0.1} | extra)

    def cell(self, model: str, study: str, run: str, method: str, values: dict, **more) -> None:
        entry = run.split("-")[0]
        self.cells[model] = {"study": study, "run": run, "entry": entry, "method": method}
        self.cells[model] |= {"values": values, "seed": more.get("seed", 0)}
        self.cells[model]["placement"] = more.get("placement")

    def spec(self, **studies) -> dict:
        bases = {"opamp": "base"} | {s: "base" for s in studies}
        spec = {"preset": "tiny", "benchmarks": OPAMP_BENCHMARKS, "studies": studies}
        return spec | {"cells": self.cells, "bases": bases}


def opamp_world(k10: int, k20: int, qlora: int, k20_faith: int | None = None) -> World:
    """OpAmp cells with ``k`` correct of N on every set (K=20 on FaithEval: ``k20_faith``)."""
    w = World()
    runs = {
        "qlora": ("qlora", {}, qlora),
        "opamp-K10": ("opamp", {"K": 10}, k10),
        "opamp-K20": ("opamp", {"K": 20}, k20),
    }
    for run, (method, values, k) in runs.items():
        model = f"{run}_s0"
        w.cell(model, "opamp", run, method, values)
        for b, spec in OPAMP_BENCHMARKS.items():
            for r in spec["noise_ratios"]:
                faith = b == "faitheval_like"
                kk = k20_faith if faith and run == "opamp-K20" and k20_faith is not None else k
                scores = hits(kk, seed=SHUFFLE[run])
                subsets = {
                    s: {"score": float(scores[i::3].mean()), "ci_low": 0.0, "ci_high": 1.0, "n": 1}
                    for i, s in enumerate(SUBSETS)
                }
                extra = {"noise_ratio": r} | ({"subsets": subsets} if faith else {})
                w.add(model, b, f"r{r:g}", scores, **extra)
    return w


def verdicts(df: pd.DataFrame) -> dict[str, str]:
    return dict(zip(df["claim"], df["verdict_ours"], strict=True))


def test_a_clear_built_in_effect_holds_and_its_published_verdict_is_the_papers():
    w = opamp_world(k10=34, k20=34, qlora=8)
    df = claims(w.spec(), w.evals, w.predictions)
    row = df.set_index("claim").loc["OpAmp K=10 beats QLoRA"]
    assert row["verdict_ours"] == "holds"
    assert row["diff_ci_low"] > 0
    assert row["examples"] == 3 * N  # coqa r0, r0.9 and faitheval pooled
    assert row["verdict_published"] == "holds"  # 55.4 vs 52.4 Avg
    assert verdicts(df)["K=10 beats QLoRA at noise 0.9"] == "holds"
    t4 = df.set_index("claim").loc["K=10 beats QLoRA at noise 0.9"]
    assert t4["examples"] == N  # only the r0.9 set


def test_a_reversed_effect_is_contradicted():
    w = opamp_world(k10=20, k20=20, qlora=20, k20_faith=38)
    v = verdicts(claims(w.spec(), w.evals, w.predictions))
    assert v["K=10 hallucinates less than K=20 on FaithEval"] == "contradicted"


def test_equal_cells_are_not_shown():
    # K=10 and K=20 get 20 of 40 right on each set, on differently shuffled examples
    w = opamp_world(k10=20, k20=20, qlora=20)
    v = verdicts(claims(w.spec(), w.evals, w.predictions))
    assert v["moderate K (K=10) beats K=20"] == "not shown"
    assert v["OpAmp K=10 beats QLoRA"] == "not shown"


def test_a_claim_whose_cells_are_not_in_the_grid_is_skipped():
    w = opamp_world(k10=34, k20=34, qlora=8)
    del w.cells["opamp-K20_s0"]
    df = claims(w.spec(), w.evals, w.predictions)
    assert "moderate K (K=10) beats K=20" not in set(df["claim"])
    assert "OpAmp K=10 beats QLoRA" in set(df["claim"])


def test_missing_predictions_of_a_cell_fail_loudly():
    w = opamp_world(k10=34, k20=34, qlora=8)
    del w.predictions[("qlora_s0", "coqa_like", "r0.9")]
    with pytest.raises(ValueError, match="qlora_s0 on coqa_like/r0.9"):
        claims(w.spec(), w.evals, w.predictions)


def test_opamp_published_delta_is_ours_minus_table4():
    w = opamp_world(k10=36, k20=20, qlora=20)  # K=10: 36/40 = 90.0 on CoQA at noise 0.9
    df = fidelity_numbers(w.spec(), w.evals)
    line = df[(df["row"] == "K=10") & (df["split"] == "r0.9")].iloc[0]
    assert (line["table"], line["column"]) == ("Table 4", "CoQA r=0.9")
    assert line["published"] == published.TABLE4["CoQA"]["K=10"][2] == 85.4
    assert line["delta"] == pytest.approx(90.0 - 85.4)
    faith = df[(df["table"] == "Table 5") & (df["row"] == "K=20")]
    assert set(faith["column"]) == set(SUBSETS)
    assert not line["same_task"]  # a synthetic analogue


def rect_world(lora: dict, xi: dict, base: int = 10) -> World:
    """Rectification: LoRA and ξ cells with k correct of N per placement, the base at ``base``."""
    w = opamp_world(k10=20, k20=20, qlora=20)
    for p in RECT["placements"]:
        w.add("base", "nq_like", p, hits(base, 1), placement=p)
        runs = {"qlora": ("qlora", {}, lora[p])}
        runs |= {
            f"rectify-xi{x:g}": ("rectify", {"xi": x, "g": "max"}, k[p]) for x, k in xi.items()
        }
        for run, (method, values, k) in runs.items():
            model = f"rectification/{run}-{p}_s0"
            w.cell(model, "rectification", run, method, values, placement=p)
            w.add(model, "nq_like", p, hits(k, len(run)), placement=p)
    return w


def test_rectification_delta_matches_the_hand_computation():
    w = rect_world({"vanilla": 20, "reverse": 28}, {3: {"vanilla": 30, "reverse": 30}})
    df = fidelity_numbers(w.spec(rectification=RECT), w.evals)
    rect = df[df["paper"] == "Rectification"].set_index(["row", "column"])
    line = rect.loc[("LoRA", "NQ reverse")]  # 28/40 = 70.0; the paper: 65.7
    assert line["published"] == paper_rect.TABLE1["LoRA"][0] == 65.7
    assert line["delta"] == pytest.approx(4.3)
    assert rect.loc[("vanilla", "NQ vanilla")]["ours_standard"] == 25.0  # the base: 10/40


def test_rectification_claims_pool_placements_and_the_xi_cells():
    xi = {3: {"vanilla": 36, "reverse": 36}, 5: {"vanilla": 37, "reverse": 37}}
    w = rect_world({"vanilla": 8, "reverse": 30}, xi)
    df = claims(w.spec(rectification=RECT), w.evals, w.predictions).set_index("claim")
    assert df.loc["ξ ≥ 3 beats LoRA", "verdict_ours"] == "holds"
    assert "2 vs 1 runs, 80 examples" in df.loc["ξ ≥ 3 beats LoRA", "ours"]  # ξ 3, 5 stacked
    assert df.loc["the reverse placement beats vanilla (LoRA)", "verdict_ours"] == "holds"
    assert df.loc["the reverse placement beats vanilla (LoRA)", "examples"] == N
    assert df.loc["LoRA fine-tuning beats the untuned model", "verdict_ours"] == "holds"


def test_an_absent_study_gives_no_rows():
    w = rect_world({"vanilla": 20, "reverse": 28}, {3: {"vanilla": 30, "reverse": 30}})
    spec = w.spec()  # rectification not configured: its evals are ignored
    assert "Rectification" not in set(fidelity_numbers(spec, w.evals)["paper"])
    assert "Rectification" not in set(claims(spec, w.evals, w.predictions)["paper"])
    assert "OpAmp" in set(fidelity_numbers(spec, w.evals)["paper"])


def mudaf_world(k: dict[int, int]) -> World:
    w = World()
    w.add("base", "mdqa_like", "vanilla", hits(5, 9))
    for heads, correct in k.items():
        model, run = f"mudaf/mudaf-heads{heads}_s0", f"mudaf-heads{heads}"
        w.cell(model, "mudaf", run, "mudaf", {"heads": heads, "selection": "weighted"})
        w.add(model, "mdqa_like", "vanilla", hits(correct, heads))
    return w


def saturation(k: dict[int, int]) -> pd.Series:
    w = mudaf_world(k)
    spec = w.spec(mudaf=MUDAF) | {"benchmarks": {}}
    return claims(spec, w.evals, w.predictions).set_index("claim").loc["n = 8 heads saturates"]


def test_saturation_holds_when_more_heads_add_nothing_and_eight_beat_none():
    line = saturation({0: 8, 8: 32, 16: 32})
    assert line["verdict_ours"] == "holds"
    assert line["verdict_published"] == "holds"  # 50.0 − 49.4 ≤ 1, 49.4 > 37.8
    assert "n=16 − n=8" in line["ours"]


def test_saturation_is_not_shown_when_more_heads_help_or_eight_do_not():
    assert saturation({0: 8, 8: 24, 16: 39})["verdict_ours"] == "not shown"
    assert saturation({0: 20, 8: 20, 16: 20})["verdict_ours"] == "not shown"


def test_mudaf_numbers_map_rows_to_tables_2_and_4():
    w = mudaf_world({0: 8, 8: 32, 16: 32})
    df = fidelity_numbers(w.spec(mudaf=MUDAF) | {"benchmarks": {}}, w.evals)
    t4 = df[df["table"] == "Table 4"].set_index("row")
    assert t4.loc["n=8", "published"] == paper_mudaf.TABLE4["n=8"][0]
    assert t4.loc["n=8", "delta"] == pytest.approx(80.0 - 71.1)
    assert set(df[df["table"] == "Table 2"]["row"]) == {"Vanilla-SFT", "MuDAF"}


def test_lkg_ablation_claims_use_the_rows_the_config_values_name():
    w = World()
    w.add("base", "nq_open", "vanilla", hits(5))
    for run, values, k in (("lkg", {}, 30), ("lkg_no_rpf", {"fusion": False}, 5)):
        w.cell(f"lkg/{run}_s0", "lkg", run, "lkg", values)
        w.add(f"lkg/{run}_s0", "nq_open", "vanilla", hits(k, len(run)))
    df = claims(w.spec(lkg=LKG) | {"benchmarks": {}}, w.evals, w.predictions)
    assert verdicts(df) == {"w/o RPF collapses (the full method is above it)": "holds"}


def test_write_fidelity_writes_both_tables_in_three_formats(tmp_path):
    w = rect_world({"vanilla": 20, "reverse": 28}, {3: {"vanilla": 30, "reverse": 30}})
    write_fidelity(w.spec(rectification=RECT), w.evals, w.predictions, tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {f"{t}.{x}" for t in ("fidelity", "claims") for x in ("csv", "md", "html")}
    assert "ξ ≥ 3 beats LoRA" in (tmp_path / "claims.md").read_text()
    assert len(pd.read_csv(tmp_path / "fidelity.csv")) > 0
