import logging
import math

import numpy as np
import pytest

from zoomattn.methods.mudaf.selection import select_heads

SCORES = [  # [layer][head]: all distinct
    [0.05, 0.40, 0.02, 0.90],
    [0.30, 0.08, 0.75, 0.01],
    [0.60, 0.20, 0.09, 0.50],
]


def test_top_selection_is_the_argmax_order_sorted_by_layer_and_head():
    assert select_heads(SCORES, 1, "top") == [[0, 3]]
    assert select_heads(SCORES, 3, "top") == [[0, 3], [1, 2], [2, 0]]
    assert select_heads(SCORES, 5, "top") == [[0, 1], [0, 3], [1, 2], [2, 0], [2, 3]]
    # ties: the lower (layer, head) first
    assert select_heads([[0.5, 0.5], [0.5, 0.1]], 2, "top") == [[0, 0], [0, 1]]


def test_weighted_selection_is_seeded_and_with_a_tiny_temperature_is_top():
    a = select_heads(SCORES, 4, "weighted", temperature=0.3, seed=1)
    assert a == select_heads(SCORES, 4, "weighted", temperature=0.3, seed=1)
    assert len({tuple(p) for p in a}) == 4 and a == sorted(a)
    draws = {str(select_heads(SCORES, 4, "weighted", temperature=0.3, seed=s)) for s in range(20)}
    assert len(draws) > 1
    for seed in range(5):
        for n in (1, 3, 6):
            assert select_heads(SCORES, n, "weighted", temperature=1e-4, seed=seed) == (
                select_heads(SCORES, n, "top")
            )


def test_weighted_first_draw_follows_the_softmax_of_scores_over_temperature():
    scores = [[0.9, 0.8, 0.1]]
    p = np.exp(np.array(scores[0]) / 0.1)
    p /= p.sum()
    picks = [select_heads(scores, 1, "weighted", 0.1, seed=s)[0][1] for s in range(3000)]
    freq = np.bincount(picks, minlength=3) / len(picks)
    np.testing.assert_allclose(freq, p, atol=0.03)
    # large scores over a small temperature do not overflow
    assert select_heads([[900.0, 1.0]], 1, "weighted", 1e-3, seed=0) == [[0, 0]]


def test_weak_selection_draws_only_heads_below_the_threshold():
    weak = {(0, 0), (0, 2), (1, 1), (1, 3), (2, 2)}  # scores < 0.1
    seen = set()
    for seed in range(30):
        got = select_heads(SCORES, 3, "weak", weak_below=0.1, seed=seed)
        assert len(got) == 3 and {tuple(p) for p in got} <= weak and got == sorted(got)
        seen |= {tuple(p) for p in got}
    assert seen == weak  # uniform among them, not the weakest only


def test_weak_selection_takes_all_and_warns_when_too_few_qualify(caplog):
    with caplog.at_level(logging.WARNING, logger="zoomattn.methods.mudaf.selection"):
        got = select_heads(SCORES, 8, "weak", weak_below=0.06, seed=0)
    assert got == [[0, 0], [0, 2], [1, 3]]
    assert "only 3 heads score below 0.06" in caplog.text


def test_n_is_clipped_to_the_number_of_heads():
    assert len(select_heads(SCORES, 100, "weighted", seed=0)) == 12
    assert select_heads(SCORES, 100, "top") == [[layer, h] for layer in range(3) for h in range(4)]
    assert select_heads(SCORES, 0, "weighted") == []


@pytest.mark.parametrize(
    "scores,n,selection,temperature,match",
    [
        ([0.1, 0.2], 1, "top", 0.05, "scores"),
        ([[0.1, math.nan]], 1, "top", 0.05, "scores"),
        ([[0.1]], -1, "top", 0.05, "n:"),
        ([[0.1]], 1, "greedy", 0.05, "selection"),
        ([[0.1]], 1, "weighted", 0.0, "temperature"),
    ],
)
def test_select_heads_refuses_bad_inputs(scores, n, selection, temperature, match):
    with pytest.raises(ValueError, match=match):
        select_heads(scores, n, selection, temperature)
