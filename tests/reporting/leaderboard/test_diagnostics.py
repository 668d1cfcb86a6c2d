import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from zoomattn.reporting.leaderboard.diagnostics import (
    build_diagnostics,
    noise_ratio,
    top_share_mean_f1,
)

CLASSES = ("edge", "uniform", "middle", "other")
LEAD_OPAMP = ["leaderboard/opamp_s0", "leaderboard/opamp_s1", "leaderboard/opamp_s2"]
MODELS = {
    "base": {"study": "base", "label": "base", "seed": None},
    "qlora_s0": {"study": "opamp", "label": "QLoRA", "seed": 0},
    "opamp-K10_s0": {"study": "opamp", "label": "OpAmp (K=10)", "seed": 0},
    "rectification/rectify-xi3_s0": {"study": "rectification", "label": "ξ=3", "seed": 0},
    "mudaf/mudaf-heads8_s0": {"study": "mudaf", "label": "n=8", "seed": 0},
    "lkg/lkg_s0": {"study": "lkg", "label": "LKG", "seed": 0},
    "leaderboard/sft_s0": {"study": "leaderboard", "label": "SFT", "seed": 0},
    **{m: {"study": "leaderboard", "label": "OpAmp", "seed": s} for s, m in enumerate(LEAD_OPAMP)},
}
# golden share by position (4 documents) of the models that have an attention file
GOLDEN = {
    "base": [0.4, 0.2, 0.25, 0.3],
    "qlora_s0": [0.5, 0.3, 0.3, 0.4],
    "opamp-K10_s0": [0.6, 0.5, 0.5, 0.6],
    "leaderboard/sft_s0": [0.5, 0.2, 0.3, 0.5],
    LEAD_OPAMP[0]: [0.7, 0.4, 0.5, 0.6],
    LEAD_OPAMP[1]: [0.8, 0.6, 0.6, 0.7],
    LEAD_OPAMP[2]: [0.6, 0.3, None, 0.8],  # no example had its golden document at position 3
    "rectification/rectify-xi3_s0": [0.3, 0.3, 0.3, 0.3],
    "mudaf/mudaf-heads8_s0": [0.45, 0.35, 0.35, 0.45],
}  # lkg/lkg_s0 has none
# the answer gap the attention job takes from the same records (None: no answer found)
COMMON_GAP = {"base": 1.0, LEAD_OPAMP[0]: 2.0, LEAD_OPAMP[1]: 4.0, LEAD_OPAMP[2]: 3.0}
FILES = [
    "diagnostics.csv",
    "diagnostics.md",
    "diagnostics.html",
    "diag_golden_share.png",
    "diag_golden_share.csv",
    "diag_answer_gap.png",
    "diag_answer_gap.csv",
    "diag_answer_gap_every_model.png",
    "diag_retrieval_heads.png",
    "diag_head_patterns.png",
]


def attention_file(model: str, golden: list, gap: float | None = None) -> dict:
    """As ``stages.analysis.attention`` writes ``golden_attention`` (4 documents), with the
    answer gap of its records."""
    n = len(golden)
    by_position = [
        {"position": p + 1, "golden_share": g, "noise_share": 0.1, "n_golden_here": 3}
        for p, g in enumerate(golden)
    ]
    known = [g for g in golden if g is not None]
    return {
        "n_examples": 12,
        "n_documents": n,
        "mean_golden_share": float(np.mean(known)),
        "uniform_share": 1.0 / n,
        "golden_is_top": 0.75,
        "by_position": by_position,
        "mean_share_by_position": [1.0 / n] * n,
        "model": model,
        "answer_gap": gap,
        "answer_gap_examples": 0 if gap is None else 10,
    }


def eval_file(model: str, gap, split: str = "test", **extra) -> dict:
    """An eval metric file; ``gap`` None as ``answer_gap`` writes it when no answer was found."""
    e = {"model": model, "benchmark": "nq_like", "split": split, "metric": "em", "score": 0.5}
    e |= {"ci_low": 0.4, "ci_high": 0.6, "n": 20} | extra
    if gap is None:
        return e | {"answer_gap": None, "answer_gap_examples": 0}
    ci = {"answer_gap_ci_low": gap - 1.0, "answer_gap_ci_high": gap + 2.0}
    return e | {"answer_gap": gap, "answer_gap_examples": 10} | ci


def heads_file(model: str, f1: np.ndarray) -> dict:
    """As ``head_scores`` writes it, plus model and benchmark."""
    order = np.argsort(-f1.ravel(), kind="stable")
    ranking = [
        {"layer": int(i // f1.shape[1]), "head": int(i % f1.shape[1]), "f1": float(f1.flat[i])}
        | {"em": 0.0, "rank": r}
        for r, i in enumerate(order, start=1)
    ]
    return {
        "threshold": 0.1,
        "n_examples": 8,
        "layers": f1.shape[0],
        "heads": f1.shape[1],
        "f1": f1.tolist(),
        "em": np.zeros_like(f1).tolist(),
        "ranking": ranking,
        "mean_f1": float(f1.mean()),
        "max_f1": float(f1.max()),
        "model": model,
        "benchmark": "mdqa_like",
    }


def patterns_file(model: str, head_class: list[list[str]], distribution: bool = True) -> dict:
    """As ``head_patterns`` writes it (only the keys the report reads, plus a few)."""
    called = [c for layer in head_class for c in layer]
    p = {"examples": 4, "layers": len(head_class), "heads": len(head_class[0])}
    p |= {"classes": list(CLASSES), "head_class": head_class, "model": model}
    p["middle_heads"] = [
        [i, j] for i, layer in enumerate(head_class) for j, c in enumerate(layer) if c == "middle"
    ]
    if distribution:
        p["distribution"] = {c: called.count(c) / len(called) for c in CLASSES}
    return p


def _f1(i: int) -> np.ndarray:
    return np.linspace(0.0, 0.2 + 0.05 * i, 40).reshape(5, 8)  # 40 heads: top 5% = 2 heads


def _classes(i: int) -> list[list[str]]:
    flat = [CLASSES[(k + i) % 4] if k % 3 else "middle" for k in range(8)]
    return [flat[:4], flat[4:]]


LEAD_GAPS = {  # model -> {noise ratio: answer gap}
    "leaderboard/sft_s0": {0.0: 1.0, 0.9: -0.5},
    LEAD_OPAMP[0]: {0.0: 2.0, 0.9: 1.0},
    LEAD_OPAMP[1]: {0.0: 3.0, 0.9: 2.5},
    LEAD_OPAMP[2]: {0.0: 4.0, 0.9: 0.5},
}


def _evals() -> list[dict]:
    evals = [
        eval_file(m, gap, split=f"r{r}", noise_ratio=r)
        for m, gaps in LEAD_GAPS.items()
        for r, gap in gaps.items()
    ]
    rect = "rectification/rectify-xi3_s0"
    evals += [
        eval_file(rect, 5.0, split="vanilla", placement="vanilla"),
        eval_file(rect, 7.0, split="reverse", placement="reverse"),
        eval_file(rect, None, split="reverse", placement="reverse", benchmark="longform"),
        eval_file("qlora_s0", None, split="r0.9", noise_ratio=0.9),  # OpAmp evals: no gap
    ]
    return evals


def _inputs():
    attention = [attention_file(m, g, COMMON_GAP.get(m)) for m, g in GOLDEN.items()]
    heads = [heads_file(m, _f1(i)) for i, m in enumerate(MODELS)]
    patterns = [patterns_file(m, _classes(i)) for i, m in enumerate(MODELS)]
    return attention, _evals(), heads, patterns


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[pd.DataFrame, Path]:
    """The full grid's report, built once for the tests that only read it."""
    out = tmp_path_factory.mktemp("diagnostics")
    return build_diagnostics(MODELS, *_inputs(), out), out


@pytest.fixture
def table(built) -> pd.DataFrame:
    return built[0]


def test_every_file_is_written_and_one_row_per_model_in_study_order(built):
    table, out = built
    missing = [f for f in FILES if not (out / f).stat().st_size]
    assert not missing
    assert list(table["model"]) == list(MODELS)  # MODELS is already in study order
    on_disk = pd.read_csv(out / "diagnostics.csv")
    assert len(on_disk) == len(MODELS)
    assert "| study" in (out / "diagnostics.md").read_text()
    assert "<table" in (out / "diagnostics.html").read_text()


def test_golden_share_of_a_leaderboard_label_is_the_mean_over_its_seeds(built):
    df = pd.read_csv(built[1] / "diag_golden_share.csv")
    opamp = df[(df["study"] == "leaderboard") & (df["label"] == "OpAmp")].set_index("position")
    assert opamp.loc[1, "golden_share"] == pytest.approx((0.7 + 0.8 + 0.6) / 3)
    assert opamp.loc[2, ["share_min", "share_max"]].tolist() == pytest.approx([0.3, 0.6])
    assert opamp.loc[3, "golden_share"] == pytest.approx(0.55)  # the seed without data skipped
    assert opamp.loc[1, "n_seeds"] == 3


def test_golden_share_covers_every_study_with_attention_files(built):
    df = pd.read_csv(built[1] / "diag_golden_share.csv")
    assert set(df["study"]) == {"base", "opamp", "leaderboard", "rectification", "mudaf"}
    mudaf = df[df["study"] == "mudaf"].set_index("position")
    assert mudaf["golden_share"].tolist() == pytest.approx([0.45, 0.35, 0.35, 0.45])


def test_common_answer_gap_is_each_models_attention_file_gap(table):
    rows = table.set_index("model")
    assert rows.loc[LEAD_OPAMP[1], "common_answer_gap"] == 4.0
    assert rows.loc["base", "common_answer_gap"] == 1.0
    assert math.isnan(rows.loc["mudaf/mudaf-heads8_s0", "common_answer_gap"])  # no answer found
    assert math.isnan(rows.loc["lkg/lkg_s0", "common_answer_gap"])  # no attention file


def test_per_model_golden_share_comes_from_its_attention_file(table):
    row = table.set_index("model").loc[LEAD_OPAMP[2]]
    assert row["mean_golden_share"] == pytest.approx((0.6 + 0.3 + 0.8) / 3)
    assert math.isnan(table.set_index("model").loc["lkg/lkg_s0", "mean_golden_share"])


def test_head_pattern_shares_sum_to_one_and_match_the_head_classes(table):
    shares = table[[f"share_{c}" for c in CLASSES]]
    assert shares.sum(axis=1).to_numpy() == pytest.approx(np.ones(len(table)))
    base = table.set_index("model").loc["base", [f"share_{c}" for c in CLASSES]]
    assert base.tolist() == pytest.approx([1 / 8, 2 / 8, 4 / 8, 1 / 8])  # edge uniform middle other


def test_head_pattern_shares_are_counted_from_head_class_without_a_distribution(tmp_path):
    classes = [["edge", "edge", "middle", "other"], ["edge", "uniform", "edge", "edge"]]
    models = {"base": MODELS["base"]}
    got = build_diagnostics(models, [], [], [], [patterns_file("base", classes, False)], tmp_path)
    assert got.loc[0, ["share_edge", "share_uniform", "share_middle", "share_other"]].tolist() == [
        5 / 8,
        1 / 8,
        1 / 8,
        1 / 8,
    ]


def test_answer_gap_per_model_is_the_mean_of_its_evals_that_have_one(table):
    rows = table.set_index("model")
    assert rows.loc["rectification/rectify-xi3_s0", "answer_gap"] == pytest.approx(6.0)
    assert rows.loc["rectification/rectify-xi3_s0", "answer_gap_evals"] == 2  # None skipped
    assert rows.loc[LEAD_OPAMP[0], "answer_gap"] == pytest.approx(1.5)
    assert math.isnan(rows.loc["qlora_s0", "answer_gap"])


def test_answer_gap_figure_table_averages_leaderboard_seeds_and_rectification_placements(built):
    df = pd.read_csv(built[1] / "diag_answer_gap.csv")
    lead = df[df["study"] == "leaderboard"].set_index(["label", "noise_ratio"])
    assert lead.loc[("OpAmp", 0.9), "answer_gap"] == pytest.approx((1.0 + 2.5 + 0.5) / 3)
    assert lead.loc[("OpAmp", 0.9), ["seed_min", "seed_max"]].tolist() == [0.5, 2.5]
    assert lead.loc[("OpAmp", 0.9), "ci_low"] == pytest.approx(4.0 / 3 - 1.0)
    rect = df[df["study"] == "rectification"].set_index("placement")
    assert rect.loc["vanilla", "answer_gap"] == 5.0 and rect.loc["reverse", "answer_gap"] == 7.0


def test_retrieval_head_strength_is_the_mean_f1_of_the_top_five_percent(table):
    f1 = _f1(1)  # qlora_s0
    top2 = np.sort(f1.ravel())[-2:].mean()
    row = table.set_index("model").loc["qlora_s0"]
    assert row["top5_mean_f1"] == pytest.approx(top2)
    assert row["max_f1"] == pytest.approx(f1.max())
    assert row["top5_mean_f1"] < row["max_f1"]
    assert top_share_mean_f1([[0.2, 0.9]]) == pytest.approx(0.9)  # at least one head


def test_missing_attention_and_answer_gaps_skip_those_figures(tmp_path):
    _, evals, heads, patterns = _inputs()
    no_gap = [{k: v for k, v in e.items() if not k.startswith("answer_gap")} for e in evals]
    table = build_diagnostics(MODELS, [], no_gap, heads, patterns, tmp_path)
    written = {p.name for p in tmp_path.iterdir()}
    assert written == set(FILES) - {
        f"diag_{s}.{x}" for s in ("golden_share", "answer_gap") for x in ("png", "csv")
    } - {"diag_answer_gap_every_model.png"}
    assert table["mean_golden_share"].isna().all() and table["answer_gap"].isna().all()


def test_only_a_base_attention_file_draws_no_golden_share_figure(tmp_path):
    build_diagnostics(MODELS, [attention_file("base", GOLDEN["base"])], [], [], [], tmp_path)
    assert not (tmp_path / "diag_golden_share.png").exists()
    assert (tmp_path / "diagnostics.csv").exists()


def test_no_inputs_at_all_writes_an_empty_table(tmp_path):
    table = build_diagnostics({}, [], [], [], [], tmp_path)
    assert table.empty
    assert {p.name for p in tmp_path.iterdir()} == {
        "diagnostics.csv",
        "diagnostics.md",
        "diagnostics.html",
    }


def test_files_of_models_outside_the_grid_are_ignored(tmp_path):
    stray = "leaderboard/ghost_s0"
    table = build_diagnostics(
        MODELS,
        [attention_file(stray, [0.9] * 4)],
        [eval_file(stray, 3.0, noise_ratio=0.0)],
        [heads_file(stray, _f1(0))],
        [patterns_file(stray, _classes(0))],
        tmp_path,
    )
    assert stray not in set(table["model"])
    assert not (tmp_path / "diag_golden_share.png").exists()
    assert not (tmp_path / "diag_retrieval_heads.png").exists()


def test_noise_ratio_falls_back_to_an_r_split_name():
    assert noise_ratio({"split": "r0.5"}) == 0.5
    assert noise_ratio({"noise_ratio": 0.0, "split": "r0.9"}) == 0.0
    assert noise_ratio({"split": "reverse"}) is None
