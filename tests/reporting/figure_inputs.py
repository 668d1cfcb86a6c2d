"""Small synthetic inputs for every report figure, each drawn by one call: ``FIGURES`` maps a
name to a function (output folder -> the drawn Figure). The captions are long, as real ones are,
so that titles must wrap; every multi-panel figure has one panel of flat scores (float noise
around 0, the smoke preset's usual picture), and some inputs miss a value or a whole panel."""

import math

import numpy as np
import pandas as pd

from tests.reporting.mudaf.test_retrieval_figures import _masking, _scores
from zoomattn.reporting.leaderboard import diagnostics
from zoomattn.reporting.leaderboard import table as leaderboard
from zoomattn.reporting.lkg import figures as lkg_figures
from zoomattn.reporting.lkg import published as paper_lkg
from zoomattn.reporting.mudaf import figures as mudaf
from zoomattn.reporting.mudaf import retrieval_figures as retrieval
from zoomattn.reporting.opamp import figures
from zoomattn.reporting.rectification import figures as rect

CAPTION = (
    "preset smoke, seeds 0, 1 and 2, 95% bootstrap CI over seeds and examples; retrieval "
    "scores: one measurement per model, no CI; synthetic analogue data"
)
FLAT = 1e-17  # what an all-zero score becomes after a bootstrap's float rounding
PLACEMENTS = ["reverse", "vanilla"]


def values(n: int, flat: bool = False) -> np.ndarray:
    """n scores that vary, or n that differ only by float noise around 0."""
    i = np.arange(n)
    return FLAT * (i % 3) if flat else 30 + 9 * np.sin(i + 1)


def with_ci(df: pd.DataFrame, flat: bool) -> pd.DataFrame:
    v = values(len(df), flat)
    spread = 0 if flat else 4
    return df.assign(score=v, ci_low=v - spread, ci_high=v + spread)


def per_bench_rows(rows: list[str]) -> pd.DataFrame:
    """nq_like with varying scores, flat_like with flat ones; each row at each placement."""
    parts = []
    for bench, flat in (("nq_like", False), ("flat_like", True)):
        cells = [(r, p) for r in rows for p in PLACEMENTS]
        frame = pd.DataFrame(cells, columns=["row", "placement"]).assign(benchmark=bench)
        parts.append(with_ci(frame, flat).assign(metric="contains"))
    return pd.concat(parts, ignore_index=True)


# --- OpAmp (opamp/figures.py) ---


def ksweep(out):
    index = ["base (no fine-tune)", "QLoRA", "K=1", "K=10", "K=∞"]
    t3 = pd.DataFrame({"Avg": values(5, flat=True)}, index=index)
    return figures.ksweep(t3, index[2:], out / "ksweep.png", CAPTION)


def noise_curves(out):
    rows = [(lab, r) for lab in ("base (no fine-tune)", "QLoRA", "K=10") for r in (0.0, 0.5, 0.9)]
    df = pd.DataFrame(rows, columns=["label", "noise"]).assign(benchmark="coqa_like", subset="")
    df = with_ci(df, flat=False)
    df.loc[4, ["score", "ci_low", "ci_high"]] = math.nan  # QLoRA at 0.5: no evaluation
    return figures.noise_curves(df, "coqa_like", "CoQA", out / "noise.png", CAPTION)


def attention_map(golden: list, noise: list) -> dict:
    by_position = [
        {"position": p + 1, "golden_share": g, "noise_share": n}
        for p, (g, n) in enumerate(zip(golden, noise, strict=True))
    ]
    return {"by_position": by_position, "uniform_share": 0.25}


GAPS_AT = [3, 4]  # positions (1-based) where no example had its golden document


def golden_share(out):
    golden = [0.3, 0.2, None, None]
    attn = {
        "base (no fine-tune)": attention_map(golden, [0.2, 0.25, 0.25, 0.3]),
        "QLoRA": attention_map([0.35, 0.15, None, None], [0.2, 0.2, 0.3, 0.3]),
    }
    return figures.golden_share(attn, list(attn), out / "golden.png", f"Fig. 5 ({CAPTION})")


# --- rectification ---

XI_ROWS = ["ξ=3", "ξ=auto (=0.844)"]


def xi_curves(out):
    t1 = per_bench_rows(["vanilla", "LoRA", *XI_ROWS])
    title = f"Table 1, ours: score vs ξ per placement; LoRA dashed, base dotted ({CAPTION})"
    return rect.xi_curves(t1, XI_ROWS, PLACEMENTS, out / "xi.png", title)


def published_curves(out):
    mapped = [("nq_like", "NQ"), ("multihop_like", "HotpotQA")]
    return rect.published_curves(mapped, PLACEMENTS, out / "published.png")


def answer_gap(out):
    rows = ["vanilla", "LoRA", *XI_ROWS]
    names = {"score": "answer_gap", "ci_low": "answer_gap_ci_low", "ci_high": "answer_gap_ci_high"}
    gaps = per_bench_rows(rows).rename(columns=names)
    title = f"Fig. 3: answer-token attention gap ×1000 ({CAPTION})"
    return rect.answer_gap(gaps, rows, PLACEMENTS, out / "gap.png", title)


def g_variants(out):
    gs = per_bench_rows(["max", "tanh", "sigmoid"])
    lora = per_bench_rows(["LoRA"])
    title = f"Fig. 4: g variants at ξ = 3, LoRA dashed ({CAPTION})"
    return rect.g_variants(gs, lora, ["max", "tanh", "sigmoid"], PLACEMENTS, out / "g.png", title)


def margin(out, per_layer=(1.1, 1.8)):
    rng = np.random.default_rng(0)
    margins = rng.gamma(4, 0.4, size=(8, 2, 4)).tolist()
    m = {"margins": margins, "median": 1.6, "xi_auto": 0.8, "per_layer_median": list(per_layer)}
    return rect.margin(m, [3.0], out / "margin.png", f"Fig. 5: score margin ({CAPTION})")


# --- MuDAF ---


def head_sweep(out):
    rows = ["n=0", "n=2", "n=8 → 4 (clipped)"]
    t4 = per_bench_rows(rows)
    t4 = t4[t4["placement"] == "reverse"].drop(columns="placement")
    refs = pd.DataFrame({"benchmark": ["nq_like", "flat_like"], "row": "base", "score": [25.0, 0]})
    title = f"Table 4: MuDAF by number of target heads ({CAPTION})"
    return mudaf.head_sweep(t4, rows, refs, out / "heads.png", title)


def target_heads(out):
    df = pd.DataFrame(
        {
            "cell": ["MuDAF n=2"] * 2 + ["MuDAF-weak n=2"] * 2,
            "target": ["0-1", "1-1", "1-1", "1-3"],
            "base": [0.2, 0.4, 0.0, 0.0],
            "mudaf": [0.5, 0.6, 0.0, 0.0],
            "vanilla_sft": [0.3, math.nan, 0.0, 0.0],  # one head unscored; one panel all 0
        }
    )
    return mudaf.target_heads(df, out / "targets.png", f"Figs. 5/6 ({CAPTION})")


def delta_maps(out):
    delta = np.linspace(-0.3, 0.3, 8).reshape(2, 4)
    panels = [("MuDAF (mudaf/mudaf-heads2_s0)", delta, [(0, 1)]), ("MuDAF-weak", -delta, [])]
    return mudaf.delta_maps(panels, out / "delta.png", f"App. C ({CAPTION})")


def across_methods_frame(top5) -> pd.DataFrame:
    n = len(top5)
    return pd.DataFrame(
        {
            "study": ["base", "opamp", "mudaf"][:n],
            "model": ["base", "opamp-K10_s0", "mudaf/mudaf-heads2_s0"][:n],
            "top5_mean_f1": top5,
            "mean_f1": np.asarray(top5, dtype=float) / 2,
            "max_f1": np.asarray(top5, dtype=float) * 1.2,
        }
    )


def across_methods(out, top5=(0.4, 0.6, math.nan)):
    df = across_methods_frame(list(top5))
    return mudaf.across_methods(df, out / "across.png", f"Retrieval heads ({CAPTION})")


def retrieval_curve(out):
    return retrieval.plot_retrieval_curve(_scores(), out / "curve.png", f"Fig. 3 ({CAPTION})")


def retrieval_heatmap(out):
    return retrieval.plot_retrieval_heatmap(_scores(), out / "heat.png", f"Fig. 3 ({CAPTION})")


def masking(out, results=None):
    flat = _masking()
    flat["baseline"] = 0.0
    for e in flat["k"]:
        e.update(top=FLAT * e["k"], random=[0.0] * 3, random_mean=FLAT)
    results = {"base (no fine-tune)": flat} if results is None else results
    return retrieval.plot_masking(results, out / "masking.png", f"Fig. 4 ({CAPTION})")


# --- cross-method leaderboard and diagnostics ---


def leaderboard_plot(out, benchmarks=("single_noisy", "multi_noisy")):
    rows = [(lab, f"single_noisy r={r:g}") for lab in ("QLoRA", "MuDAF (n=2)") for r in (0, 0.9)]
    long = with_ci(pd.DataFrame(rows, columns=["label", "column"]), flat=True)
    spec = {"benchmarks": list(benchmarks)}
    return leaderboard.plot(long, spec, out / "leaderboard.png")


def diag_golden_share(out):
    rows = [
        (study, label, pos, share)
        for study, label in (("base", "base"), ("opamp", "K=10"), ("mudaf", "MuDAF (n=2)"))
        for pos, share in zip((1, 2, 3), (0.4, math.nan, 0.3), strict=True)
    ]
    df = pd.DataFrame(rows, columns=["study", "label", "position", "golden_share"])
    df = df.assign(share_min=df["golden_share"] - 0.02, share_max=df["golden_share"] + 0.02)
    return diagnostics.plot_golden_share(df.assign(n_seeds=2, uniform_share=1 / 3), out / "g.png")


def diag_answer_gap(out):
    lead = [("leaderboard", lab, r, None) for lab in ("QLoRA", "OpAmp (K=10)") for r in (0, 0.9)]
    rect_rows = [("rectification", lab, None, p) for lab in ("qlora", "rectify-xi3") for p in "rv"]
    df = pd.DataFrame(lead + rect_rows, columns=["study", "label", "noise_ratio", "placement"])
    df = with_ci(df, flat=True).rename(columns={"score": "answer_gap"})
    df = df.assign(seed_min=df["answer_gap"], seed_max=df["answer_gap"], n_seeds=2)
    return diagnostics.plot_answer_gap(df, out / "diag_gap.png")


def cells(columns: dict) -> pd.DataFrame:
    base = {"study": ["base", "opamp", "leaderboard"], "label": ["base", "K=10", "QLoRA"]}
    df = pd.DataFrame(base | columns).assign(n_seeds=[1, 1, 2])
    for c in columns:
        df[f"{c}_min"], df[f"{c}_max"] = df[c], df[c]
    return df


def diag_retrieval_heads(out):
    df = cells({"top5": [0.0, 0.0, 0.0], "max_f1": [0.0, 0.0, 0.0]})  # the smoke picture
    return diagnostics.plot_retrieval_heads(df, out / "diag_heads.png")


def diag_common_answer_gap(out):
    df = cells({"common_answer_gap": [1.5, -0.5, math.nan]})
    return diagnostics.plot_common_answer_gap(df, out / "diag_common.png")


def diag_head_patterns(out):
    shares = {f"share_{c}": [0.3, 0.2, 0.1] for c in ("edge", "uniform", "middle")}
    shares["share_other"] = [0.1, 0.4, 0.7]
    return diagnostics.plot_head_patterns(cells(shares), out / "diag_patterns.png")


# --- LKG-RALM ---


def robustness(out):
    rows = [(lab, x) for lab in ("base (no fine-tune)", "LKG-RALM") for x in (1, 2, 4)]
    ours = with_ci(pd.DataFrame(rows, columns=["row", "x"]), flat=False).assign(metric="em")
    ours.loc[1, ["score", "ci_low", "ci_high"]] = math.nan
    return lkg_figures.robustness(
        ours,
        ["base (no fine-tune)", "LKG-RALM"],
        "retrieved passages k (golden among them)",
        paper_lkg.FIG6A,
        paper_lkg.FIG6A_FLAT,
        paper_lkg.FIG6A_PEAK,
        "retrieved passages",
        out / "fig6a.png",
        f"Fig. 6a: nq_open score vs retrieved passages k ({CAPTION})",
    )


def head_patterns(out):
    def shares(edge, uniform, middle, other):
        return {"edge": edge, "uniform": uniform, "middle": middle, "other": other}

    bars = [
        ("base (no fine-tune)", shares(0.0, 0.0, 0.0, 100.0), False),
        ("LKG-RALM", shares(25.0, 50.0, 0.0, 25.0), False),
        (paper_lkg.FIG2_LABEL, shares(78, 5.37, 6, 10.63), True),
    ]
    class_map = [["other", "edge", "uniform", "middle"], ["other"] * 4]
    map_title = "base (base): each head's class; middle = the heads the mask acts on (1 of 8)"
    title = f"Fig. 2: share of heads per attention pattern of the last prompt token ({CAPTION})"
    return lkg_figures.head_patterns(bars, class_map, map_title, out / "fig2.png", title)


FIGURES = {  # the drawing function (module.name) -> its input here
    "opamp.figures.ksweep": ksweep,
    "opamp.figures.noise_curves": noise_curves,
    "opamp.figures.golden_share": golden_share,
    "rectification.figures.xi_curves": xi_curves,
    "rectification.figures.published_curves": published_curves,
    "rectification.figures.answer_gap": answer_gap,
    "rectification.figures.g_variants": g_variants,
    "rectification.figures.margin": margin,
    "mudaf.figures.head_sweep": head_sweep,
    "mudaf.figures.target_heads": target_heads,
    "mudaf.figures.delta_maps": delta_maps,
    "mudaf.figures.across_methods": across_methods,
    "mudaf.retrieval_figures.plot_retrieval_curve": retrieval_curve,
    "mudaf.retrieval_figures.plot_retrieval_heatmap": retrieval_heatmap,
    "mudaf.retrieval_figures.plot_masking": masking,
    "leaderboard.table.plot": leaderboard_plot,
    "leaderboard.diagnostics.plot_golden_share": diag_golden_share,
    "leaderboard.diagnostics.plot_answer_gap": diag_answer_gap,
    "leaderboard.diagnostics.plot_retrieval_heads": diag_retrieval_heads,
    "leaderboard.diagnostics.plot_common_answer_gap": diag_common_answer_gap,
    "leaderboard.diagnostics.plot_head_patterns": diag_head_patterns,
    "lkg.figures.robustness": robustness,
    "lkg.figures.head_patterns": head_patterns,
}
