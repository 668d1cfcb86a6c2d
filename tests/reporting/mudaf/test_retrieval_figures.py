import numpy as np
import pytest
from matplotlib.collections import PolyCollection

from zoomattn.reporting.mudaf.retrieval_figures import (
    plot_masking,
    plot_retrieval_curve,
    plot_retrieval_heatmap,
)

PNG = b"\x89PNG\r\n\x1a\n"


def _scores(n_layers=3, n_heads=5):
    f1 = np.random.default_rng(0).random((n_layers, n_heads))
    em = f1 / 2
    order = np.argsort(-f1.ravel(), kind="stable")
    ranking = [
        {
            "layer": int(i // n_heads),
            "head": int(i % n_heads),
            "f1": float(f1.flat[i]),
            "em": float(em.flat[i]),
            "rank": r,
        }
        for r, i in enumerate(order, start=1)
    ]
    return {
        "threshold": 0.3,
        "n_examples": 7,
        "layers": n_layers,
        "heads": n_heads,
        "f1": f1.tolist(),
        "em": em.tolist(),
        "ranking": ranking,
        "mean_f1": float(f1.mean()),
        "max_f1": float(f1.max()),
    }


def _masking(offset=0.0, ks=(2, 4), draws=3):
    return {
        "metric": "contains",
        "baseline": 0.6 + offset,
        "k": [
            {
                "k": k,
                "top": 0.5 - 0.1 * k + offset,
                "top_heads": [[0, h] for h in range(k)],
                "random": [0.55 + 0.01 * d + offset for d in range(draws)],
                "random_mean": 0.56 + offset if draws else None,
                "random_heads": [[[1, h] for h in range(k)]] * draws,
            }
            for k in ks
        ],
    }


def _is_png(path):
    return path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG


def test_curve_plots_f1_and_em_of_every_head_in_f1_rank_order(tmp_path):
    scores = _scores()
    fig = plot_retrieval_curve(scores, tmp_path / "curve.png", title="t")
    assert _is_png(tmp_path / "curve.png")
    f1_line, em_line = fig.axes[0].get_lines()[:2]
    assert list(f1_line.get_xdata()) == list(range(1, 16))
    assert list(f1_line.get_ydata()) == sorted(np.ravel(scores["f1"]), reverse=True)
    assert list(em_line.get_ydata()) == [r["em"] for r in scores["ranking"]]


def test_heatmap_has_one_cell_per_layer_and_head_and_a_colour_bar(tmp_path):
    scores = _scores(n_layers=3, n_heads=5)
    fig = plot_retrieval_heatmap(scores, tmp_path / "heat.png")
    assert _is_png(tmp_path / "heat.png")
    image = fig.axes[0].images[0]
    assert image.get_array().shape == (3, 5)
    np.testing.assert_allclose(image.get_array(), scores["f1"])
    assert len(fig.axes) == 2  # the map and its colour bar


@pytest.mark.parametrize("labels", [["base"], ["base", "MuDAF n=8"]])
def test_masking_plot_has_top_and_random_lines_and_a_band_per_model(tmp_path, labels):
    results = {lab: _masking(offset=0.1 * i) for i, lab in enumerate(labels)}
    fig = plot_masking(results, tmp_path / "mask.png")
    assert _is_png(tmp_path / "mask.png")
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 2 * len(labels)
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == len(labels)
    top, rand = lines[0], lines[1]
    assert list(top.get_xdata()) == [0, 2, 4]  # k = 0 is the unmasked baseline
    np.testing.assert_allclose(top.get_ydata(), [0.6, 0.3, 0.1])
    np.testing.assert_allclose(rand.get_ydata(), [0.6, 0.56, 0.56])


def test_masking_plot_without_random_draws_draws_only_the_top_line(tmp_path):
    fig = plot_masking({"base": _masking(draws=0)}, tmp_path / "mask.png")
    assert _is_png(tmp_path / "mask.png")
    assert len(fig.axes[0].get_lines()) == 1
