"""The external lexical rankers of LKG-RALM (methods/lkg/rankers.py), against hand computations."""

import math

import pytest

from zoomattn.methods.lkg.rankers import (
    RANKERS,
    agreement,
    bm25,
    normalised,
    predicted_relevant,
    query_likelihood,
)

# Three passages over the terms a, b, c: lengths 3, 2, 1 (avgdl 2); a in two passages, b in one.
QUERY = ["a", "b"]
PASSAGES = [["a", "a", "c"], ["a", "b"], ["c"]]


def test_bm25_matches_the_okapi_formula_by_hand():
    # idf(a) = ln(1 + (3 - 2 + 0.5) / (2 + 0.5)) = ln 1.6;  idf(b) = ln(1 + 2.5 / 1.5) = ln(8/3)
    # p0: |p| = 3, K = 1.2 (0.25 + 0.75 * 3/2) = 1.65; a: tf 2 -> 2 * 2.2 / (2 + 1.65) = 4.4 / 3.65
    # p1: |p| = 2, K = 1.2 (0.25 + 0.75) = 1.2;        a, b: tf 1 -> 2.2 / 2.2 = 1 each
    # p2: neither term -> 0
    expected = [math.log(1.6) * 4.4 / 3.65, math.log(1.6) + math.log(8 / 3), 0.0]
    assert bm25(QUERY, PASSAGES) == pytest.approx(expected)
    assert bm25(QUERY, PASSAGES) == pytest.approx([0.566580, 1.450833, 0.0], abs=1e-6)


def test_bm25_counts_query_terms_with_multiplicity_and_works_on_token_ids():
    once, twice = bm25(["a"], PASSAGES), bm25(["a", "a"], PASSAGES)
    assert twice == pytest.approx([2 * s for s in once])
    ids = {"a": 5, "b": 9, "c": 2}
    as_ids = [[ids[t] for t in p] for p in PASSAGES]
    assert bm25([5, 9], as_ids) == pytest.approx(bm25(QUERY, PASSAGES))


def test_query_likelihood_matches_dirichlet_smoothing_by_hand():
    # collection: a 3, b 1, c 2 of 6 tokens -> P(a) = 1/2, P(b) = 1/6; z is in no passage: skipped
    # mu = 2: mu P(a) = 1, mu P(b) = 1/3
    # p0 (|p| 3, a 2): ln((2 + 1) / 5) + ln((0 + 1/3) / 5)
    # p1 (|p| 2, a 1, b 1): ln((1 + 1) / 4) + ln((1 + 1/3) / 4)
    # p2 (|p| 1): ln(1 / 3) + ln((1/3) / 3)
    expected = [
        math.log(3 / 5) + math.log(1 / 15),
        math.log(1 / 2) + math.log(1 / 3),
        math.log(1 / 3) + math.log(1 / 9),
    ]
    assert query_likelihood(["a", "b", "z"], PASSAGES, mu=2.0) == pytest.approx(expected)
    assert query_likelihood(["a", "b"], PASSAGES, mu=2.0) == pytest.approx(expected)
    assert query_likelihood(["a", "b"], PASSAGES, mu=2.0) == pytest.approx(
        [-3.218876, -1.791759, -3.295837], abs=1e-6
    )


def test_query_likelihood_default_mu_is_100():
    # mu = 100: mu P(a) = 50; the query "a" only
    expected = [math.log(52 / 103), math.log(51 / 102), math.log(50 / 101)]
    assert query_likelihood(["a"], PASSAGES) == pytest.approx(expected)


def test_an_empty_passage_gets_the_lowest_score():
    passages = [["a"], [], ["c", "c", "c", "c"]]
    # QLM, P(a) = 1/5, mu P(a) = 20: the long passage scores ln(20/104); smoothing alone would
    # give the empty one ln(20/100), above it
    qlm = query_likelihood(["a"], passages)
    assert qlm == pytest.approx([math.log(21 / 101), math.log(20 / 104), math.log(20 / 104)])
    assert bm25(["a"], passages)[1] == 0.0 == min(bm25(["a"], passages))
    assert query_likelihood(["a"], [[], []]) == [0.0, 0.0]
    assert bm25(["a"], [[], []]) == [0.0, 0.0]


def test_no_passages_and_no_matching_terms():
    assert bm25(QUERY, []) == [] and query_likelihood(QUERY, []) == []
    assert bm25(["z"], PASSAGES) == [0.0, 0.0, 0.0]
    assert query_likelihood(["z"], PASSAGES) == [0.0, 0.0, 0.0]
    assert RANKERS == {"bm25": bm25, "qlm": query_likelihood}


def test_predicted_relevant_takes_the_top_n_and_breaks_ties_towards_the_earlier_passage():
    assert predicted_relevant([1.0, 3.0, 3.0, 0.0], 1) == [False, True, False, False]
    assert predicted_relevant([1.0, 3.0, 3.0, 0.0], 2) == [False, True, True, False]
    assert predicted_relevant([2.0, 2.0, 2.0], 2) == [True, True, False]
    assert predicted_relevant([2.0, 1.0], 0) == [False, False]
    assert predicted_relevant([2.0, 1.0], 5) == [True, True]
    assert predicted_relevant([], 1) == []


def test_agreement_is_the_share_of_rankers_whose_top_n_matches_the_label():
    labels = [True, False, False, True]  # n = 2
    first = [0.9, 0.1, 0.5, 0.7]  # top 2 = {0, 3}: right everywhere
    second = [0.2, 0.8, 0.1, 0.9]  # top 2 = {1, 3}: wrong on 0 and 1
    assert agreement(labels, [first, second]) == [0.5, 0.5, 1.0, 1.0]
    assert agreement(labels, [second]) == [0.0, 0.0, 1.0, 1.0]
    # no relevant passage: every ranker predicts none, and all agree
    assert agreement([False, False], [[1.0, 0.0], [0.0, 1.0]]) == [1.0, 1.0]
    assert agreement([], [[], []]) == []


def test_agreement_rejects_a_ranking_of_the_wrong_length_or_no_ranking():
    with pytest.raises(ValueError, match="ranking 1 scores 1 passages"):
        agreement([True, False], [[1.0, 0.0], [1.0]])
    with pytest.raises(ValueError, match="K >= 1"):
        agreement([True], [])


def test_normalised_divides_by_the_maximum_and_clamps_to_the_floor():
    assert normalised([2.0, 1.0, 0.0]) == pytest.approx([1.0, 0.5, 0.01])
    assert normalised([0.001, 10.0]) == pytest.approx([0.01, 1.0])
    assert normalised([4.0, -2.0]) == pytest.approx([1.0, 0.01])
    assert normalised([3.0, 3.0]) == [1.0, 1.0]
    assert normalised([2.0, 1.0, 0.0], floor=0.2) == pytest.approx([1.0, 0.5, 0.2])


def test_normalised_edge_cases():
    assert normalised([]) == []
    assert normalised([0.0, 0.0, 0.0]) == [1.0, 1.0, 1.0]  # no evidence: plain attention
    with pytest.raises(ValueError, match="positive maximum"):
        normalised([-1.0, -2.0])  # log-likelihoods are not guidance
    with pytest.raises(ValueError, match="positive maximum"):
        normalised([0.0, -2.0])
