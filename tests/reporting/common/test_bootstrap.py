"""The bootstrap intervals against hand computations of the exact bootstrap distribution."""

import numpy as np
import pytest

from zoomattn.reporting.common.bootstrap import as_matrix, difference_ci, mean_ci, verdict

# The sample [0, 0, 1] resampled with replacement: the mean is k/3 with k ~ Binomial(3, 1/3),
# P(k) = 8/27, 12/27, 6/27, 1/27. By hand: the 5% quantile is 0 (P(0) = 0.296 >= 0.05) and the
# 95% quantile is 2/3 (P(k <= 2) = 26/27 = 0.963 >= 0.95, P(k <= 1) = 20/27 = 0.741 < 0.95).
SAMPLE = [0.0, 0.0, 1.0]


def test_mean_ci_of_a_known_sample_matches_the_exact_bootstrap_quantiles():
    mean, lo, hi = mean_ci(SAMPLE, resamples=20000, level=0.90)
    assert mean == pytest.approx(1 / 3)
    assert lo == 0.0
    assert hi == pytest.approx(2 / 3)


def test_mean_ci_at_95_percent_reaches_the_top_of_the_known_sample():
    # P(k <= 2) = 0.963 < 0.975: the 97.5% quantile is the all-ones resample, 1.
    _, lo, hi = mean_ci(SAMPLE, resamples=20000, level=0.95)
    assert (lo, hi) == (0.0, 1.0)


def test_seeds_are_resampled_too():
    # Three seeds whose examples all score alike: only the seed draw varies, and the seed means
    # [0, 0, 1] give the same exact distribution as SAMPLE.
    seeds = np.array([[0.0] * 4, [0.0] * 4, [1.0] * 4])
    _, lo, hi = mean_ci(seeds, resamples=20000, level=0.90)
    assert (lo, hi) == (0.0, pytest.approx(2 / 3))


def test_identical_seeds_give_the_example_level_interval():
    one = mean_ci(SAMPLE, resamples=4000, level=0.90, seed=3)
    # Every seed the same: resampling seeds changes nothing, only the examples vary.
    many = mean_ci([SAMPLE] * 3, resamples=4000, level=0.90, seed=3)
    assert many[1:] == pytest.approx(one[1:], abs=0.34)  # both on the lattice {0, 1/3, 2/3, 1}
    assert many[1] == 0.0 and many[2] == pytest.approx(2 / 3)


def test_difference_is_paired_over_examples():
    # b is a shifted by exactly 0.5 on every example: the paired difference has no spread.
    a = np.array([[0.0, 1.0, 0.5, 1.0, 0.0]])
    diff, lo, hi = difference_ci(a, a - 0.5, resamples=500)
    assert (diff, lo, hi) == pytest.approx((0.5, 0.5, 0.5))
    assert verdict(lo, hi) == "higher"


def test_an_unpaired_difference_of_equal_cells_is_not_significant():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2, size=(3, 200)).astype(float)
    diff, lo, hi = difference_ci(a, a[::-1], resamples=1000)
    assert lo < 0 < hi and verdict(lo, hi) == "n.s."
    assert diff == pytest.approx(0.0)


def test_verdict_names_the_direction_only_when_zero_is_excluded():
    assert verdict(0.01, 0.2) == "higher"
    assert verdict(-0.2, -0.01) == "lower"
    assert verdict(-0.01, 0.2) == "n.s."


def test_bad_shapes_are_refused_with_the_shape_named():
    with pytest.raises(ValueError, match="shape"):
        as_matrix([])
    with pytest.raises(ValueError, match="same examples"):
        difference_ci([[1.0, 0.0]], [[1.0, 0.0, 1.0]])
