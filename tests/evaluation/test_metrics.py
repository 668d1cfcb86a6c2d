import numpy as np
import pytest

from zoomattn.evaluation.metrics import (
    METRICS,
    bootstrap_ci,
    chosen_option,
    exact_match,
    normalize_answer,
    token_f1,
)


def test_normalisation_follows_longbench():
    assert normalize_answer("The  New-York, City!") == "newyork city"
    assert normalize_answer("an Apple a day") == "apple day"


def test_exact_match_is_on_normalised_strings():
    assert exact_match("The Paris.", ["paris"]) == 1.0
    assert exact_match("paris france", ["paris"]) == 0.0
    assert exact_match("rome", ["paris", "Rome"]) == 1.0


def test_token_f1_hand_computed():
    # pred {new, york, city} vs gold {new, york}: P = 2/3, R = 1 -> F1 = 0.8
    assert token_f1("new york city", ["new york"]) == pytest.approx(0.8)
    assert token_f1("tokyo", ["new york"]) == 0.0
    assert token_f1("york", ["new york", "york"]) == 1.0


def test_bootstrap_interval_brackets_the_mean_and_is_seeded():
    x = np.r_[np.ones(30), np.zeros(70)]
    lo, hi = bootstrap_ci(x, seed=1)
    assert lo < 0.3 < hi and (lo, hi) == bootstrap_ci(x, seed=1)
    # normal approximation: 0.3 ± 1.96·sqrt(0.21/100) = [0.210, 0.390]
    assert lo == pytest.approx(0.21, abs=0.02) and hi == pytest.approx(0.39, abs=0.02)
    assert bootstrap_ci(np.ones(10)) == (1.0, 1.0)


MC = {"answers": ["the red door", "A"], "options": ["the red door", "a blue car"], "subset": ""}


@pytest.mark.parametrize(
    "reply,correct",
    [
        ("A", 1.0),
        ("(A) the red door", 1.0),
        ("A.", 1.0),
        ("the red door", 1.0),
        ("B", 0.0),
        ("", 0.0),
        ("The", 0.0),
        ("a blue car", 0.0),
    ],
)
def test_choice_accuracy_reads_the_letter_before_normalising_away_articles(reply, correct):
    assert METRICS["acc"](reply, MC) == correct


# Four options as the prompt shows them (A. ..., B. ..., ...), gold B; "a blue car" loses its
# article to LongBench normalisation, "A Tale of Two Cities" starts with a capital A.
MC4 = {
    "id": "mc/0",
    "answers": ["a blue car", "B"],
    "options": ["the red door", "a blue car", "green", "A Tale of Two Cities"],
}


@pytest.mark.parametrize(
    "reply,correct",
    [
        # leading letter forms, any case
        ("B", 1.0),
        ("(B)", 1.0),
        ("B.", 1.0),
        ("B)", 1.0),
        ("b", 1.0),
        ("(b)", 1.0),
        ("**B**", 1.0),
        ("B\n\nExplanation: the context says so.", 1.0),
        ("B) a blue car", 1.0),
        ("B. A blue car", 1.0),
        ("B a blue car", 1.0),  # a bare letter followed by its own option's text
        # a marker, then the letter
        ("Answer: B", 1.0),
        ("Answer: b", 1.0),
        ("The answer is B.", 1.0),
        ("answer is B because the passage says so", 1.0),
        ("Option B", 1.0),
        ("Option B is correct.", 1.0),
        ("The correct option is (B).", 1.0),
        # the option's text, normalised, alone or after a marker
        ("A blue car.", 1.0),  # "A" is the article here, not option A
        ("a blue car", 1.0),
        ("The answer is a blue car.", 1.0),
        # one option's letter with another option's text commits to nothing
        ("B) the red door", 0.0),
        ("B the red door", 0.0),
        ("A. a blue car", 0.0),
        ("Option A is wrong; the answer is B", 0.0),  # two letters disagree
        # other options, and replies that name no option
        ("A", 0.0),
        ("the red door", 0.0),
        ("A man walks in.", 0.0),  # an article, not option A
        ("the answer is a dog", 0.0),
        ("", 0.0),
        ("E", 0.0),  # no fifth option
        ("B-52", 0.0),
    ],
)
def test_acc_reads_the_option_the_reply_commits_to(reply, correct):
    assert METRICS["acc"](reply, MC4) == correct


def test_acc_reads_an_option_starting_with_a_capital_a_as_text():
    tale = dict(MC4, answers=["A Tale of Two Cities", "D"])
    assert METRICS["acc"]("A Tale of Two Cities", tale) == 1.0
    assert METRICS["acc"]("The answer is A Tale of Two Cities.", tale) == 1.0
    assert chosen_option("A Tale of Two Cities", MC4["options"]) == 3


def test_acc_refuses_a_record_whose_gold_is_none_of_its_options():
    with pytest.raises(ValueError, match="'mc/0': gold answer 'purple' is none of its options"):
        METRICS["acc"]("B", dict(MC4, answers=["purple"]))


def test_acc_without_options_is_exact_match():
    assert METRICS["acc"]("Paris.", {"answers": ["paris"], "options": []}) == 1.0


def test_faitheval_metric_accepts_an_abstention_phrase_inside_the_reply():
    rec = {"subset": "unanswerable", "answers": ["unknown"], "options": [], "id": "x"}
    assert METRICS["faitheval"]("The answer is unknown.", rec) == 1.0
    assert METRICS["faitheval"]("Paris", rec) == 0.0
