"""The published-column rules (evaluation/official.py), on cases worked out from their sources:

- opamp_em / opamp_pm: wuhy68/OpampAdapter evaluation/Benchmark/evaluate_benchmark_api.py,
  ``exact_match_score(strict=False)`` (max over golds and over the golds joined by spaces) and
  ``partial_match_score`` (max over golds);
- faitheval_opamp: wuhy68/OpampAdapter evaluation/Faitheval/evaluate_faith.py (``answerKey in
  pred_answer``; the valid-phrase lists for unanswerable / inconsistent);
- alce_str_em / alce_contains: princeton-nlp/ALCE eval.py, ``compute_str_em`` with
  ``exact_presence``, and main()'s cleaning of the output (first line, ``remove_citations``);
- opamp_em_substring: the latest wuhy68/OpampAdapter evaluation/Benchmark/evaluate_benchmark.py,
  ``exact_match_score`` (``ground_truth in prediction`` after lower() and strip());
- mudaf_f1: MuDAF eval/eval.py ``preprocess(text, use_default_eos=True)`` (DEFAULT_EOS cut in
  turn, as scripts/eval.sh runs it) then LongBench's ``qa_f1_score``.
"""

import pytest

from zoomattn.data.records import make_record
from zoomattn.evaluation.metrics import METRICS
from zoomattn.evaluation.official import RULES, alce_output, levenshtein


def rec(answers, **fields):
    return make_record(id="t/0", family="single", question="q", answers=answers, **fields)


def score(rule, prediction, record):
    return RULES[rule].score(prediction, record)


def test_every_rule_names_its_source_and_summary():
    expected = {"squad_em", "longbench_f1", "faitheval", "opamp_em", "opamp_pm"}
    expected |= {"faitheval_opamp", "alce_str_em", "alce_contains", "mc_acc"}
    expected |= {"opamp_em_substring", "mudaf_f1"}
    assert set(RULES) == expected
    for name, rule in RULES.items():
        assert rule.name == name and rule.source and rule.summary


# --- OpAmp EM: exact_match_score(strict=False) ---------------------------------------------------


@pytest.mark.parametrize(
    "prediction,answers,opamp,squad",
    [
        ("He was born in Paris, France.", ["Paris"], 1.0, 0.0),  # gold tokens in the prediction
        ("Paris", ["Paris, the capital of France"], 1.0, 0.0),  # prediction tokens in the gold
        ("the smart cat", ["art"], 1.0, 0.0),  # character substring, not a word
        ("red bike", ["red car", "blue bike"], 1.0, 0.0),  # only the joined golds match
        ("London", ["Paris"], 0.0, 0.0),
        ("The Paris.", ["paris"], 1.0, 1.0),
    ],
)
def test_opamp_em_is_non_strict_containment_either_way(prediction, answers, opamp, squad):
    record = rec(answers)
    assert score("opamp_em", prediction, record) == opamp
    assert score("squad_em", prediction, record) == squad


def test_opamp_em_scores_an_empty_reply_correct_as_its_source_does():
    # all() over the empty prediction's tokens is True in exact_match_score
    assert score("opamp_em", "", rec(["Paris"])) == 1.0
    assert score("opamp_em", "...", rec(["Paris"])) == 1.0


# --- OpAmp PM: partial_match_score ----------------------------------------------------------------


def test_levenshtein_is_the_character_edit_distance():
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("", "abc") == levenshtein("abc", "") == 3
    assert levenshtein("flaw", "lawn") == 2 and levenshtein("same", "same") == 0


@pytest.mark.parametrize(
    "prediction,answers,pm,f1",
    [
        ("Paris.", ["paris"], 1.0, 1.0),
        ("pariss", ["paris"], 5 / 6, 0.0),  # one edit in six characters; no common token
        ("new york city", ["new york"], 8 / 13, 0.8),  # 5 insertions in 13 characters
        ("paris", ["rome", "paris"], 1.0, 1.0),  # best over golds
        ("red car blue bike", ["red car", "blue bike"], 9 / 17, 2 / 3),  # golds not joined for PM
    ],
)
def test_opamp_pm_is_one_minus_levenshtein_over_the_longer_length(prediction, answers, pm, f1):
    record = rec(answers)
    assert score("opamp_pm", prediction, record) == pytest.approx(pm)
    assert score("longbench_f1", prediction, record) == pytest.approx(f1)


def test_opamp_pm_of_two_empty_strings_is_one():
    assert score("opamp_pm", "The.", rec(["a"])) == 1.0


# --- OpAmp's FaithEval --------------------------------------------------------------------------

COUNTERFACTUAL = rec(
    ["wood", "B"], subset="counterfactual", options=["rubber", "wood", "glass", "air"]
)


@pytest.mark.parametrize(
    "prediction,opamp,readme",
    [
        ("B", 1.0, 1.0),
        ("The answer is B.", 1.0, 1.0),
        ("b", 0.0, 1.0),  # case-sensitive substring
        ("wood", 0.0, 1.0),  # the choice's text is not the key
        ("Because of the context: A", 1.0, 0.0),  # the capital B of "Because"
        ("A", 0.0, 0.0),
    ],
)
def test_faitheval_opamp_counterfactual_is_a_case_sensitive_key_substring(
    prediction, opamp, readme
):
    assert score("faitheval_opamp", prediction, COUNTERFACTUAL) == opamp
    assert score("faitheval", prediction, COUNTERFACTUAL) == readme


def test_faitheval_opamp_unanswerable_and_inconsistent_use_the_valid_phrases():
    unanswerable = rec(["unknown"], subset="unanswerable")
    inconsistent = rec(["conflict"], subset="inconsistent")
    assert score("faitheval_opamp", "I cannot tell.", unanswerable) == 1.0  # c-a-n-NOT
    assert score("faitheval_opamp", "Paris", unanswerable) == 0.0
    assert score("faitheval_opamp", "The passages disagree: a disagreement", inconsistent) == 1.0
    assert score("faitheval_opamp", "Paris", inconsistent) == 0.0


# --- ALCE ---------------------------------------------------------------------------------------

# An ASQA-style row: the long answer first, then every alias of every QA pair (the flat list our
# standard str_em reads), and the pairs themselves.
ASQA = rec(
    [
        "Ali Daei holds the men's record; Cristiano Ronaldo later passed him.",
        "Ali Daei",
        "Daei",
        "Cristiano Ronaldo",
        "CR7",
    ],
    answer_groups=[["Ali Daei", "Daei"], ["Cristiano Ronaldo", "CR7"]],
)


def test_alce_str_em_counts_qa_pairs_where_the_flat_str_em_counted_aliases():
    prediction = "Ali Daei held the record until Cristiano Ronaldo passed him."
    assert score("alce_str_em", prediction, ASQA) == 1.0
    # the flat list: 3 of 5 (the long answer and CR7 missing)
    assert METRICS["str_em"](prediction, ASQA) == pytest.approx(0.6)
    assert score("alce_str_em", "Only Daei is named.", ASQA) == 0.5
    assert score("alce_str_em", "Pele", ASQA) == 0.0


def test_alce_str_em_reads_the_first_line_without_citations():
    assert alce_output("  Ronaldo [1][2].\nAli Daei") == "Ronaldo."
    assert score("alce_str_em", "Cristiano Ronaldo [1]\nAli Daei [2]", ASQA) == 0.5


def test_alce_str_em_matches_substrings_not_whole_words():
    assert score("alce_str_em", "Daei's and CR7's records", ASQA) == 1.0  # "daeis", "cr7s"
    assert METRICS["str_em"]("Daei's and CR7's records", ASQA) == 0.0


def test_alce_str_em_without_groups_counts_each_answer_as_a_pair():
    assert score("alce_str_em", "Ali Daei", rec(["Ali Daei", "Ronaldo"])) == 0.5


def test_alce_str_em_counts_a_pair_without_aliases_as_missed():
    record = rec(["Ali Daei"], answer_groups=[["Ali Daei"], []])
    assert score("alce_str_em", "Ali Daei", record) == 0.5


def test_alce_contains_is_exact_presence_a_normalised_substring():
    record = rec(["Daei"])
    assert score("alce_contains", "Daei's record stood.", record) == 1.0
    assert METRICS["contains"]("Daei's record stood.", record) == 0.0  # whole words only
    assert score("alce_contains", "Ronaldo", record) == 0.0
    # the whole reply, not only its first line (that cleaning is main()'s, for STR-EM)
    assert score("alce_contains", "It is\nDaei", record) == 1.0


# --- multiple choice ----------------------------------------------------------------------------


def test_mc_acc_reads_the_option_the_reply_commits_to():
    quality = rec(["o3", "C"], options=["o1", "o2", "o3", "o4"])
    assert score("mc_acc", "C", quality) == 1.0
    assert score("mc_acc", "The answer is (c).", quality) == 1.0
    assert score("mc_acc", "C) o1", quality) == 0.0  # letter C, text of A
    assert score("mc_acc", "o3", quality) == 1.0


# --- the latest OpAmp script's EM; MuDAF's F1 after its end-marker cut ----------------------------


@pytest.mark.parametrize(
    "prediction,answers,expected",
    [
        ("It is PARIS.", ["Paris"], 1.0),  # lower-cased substring
        ("the smart cat", ["art"], 1.0),  # a character substring counts
        ("Paris", ["Paris, France"], 0.0),  # only gold-in-reply, not the reverse
        ("the U.S.", ["US"], 0.0),  # no punctuation stripping
    ],
)
def test_opamp_em_substring_is_a_lower_cased_gold_in_reply_test(prediction, answers, expected):
    assert score("opamp_em_substring", prediction, rec(answers)) == expected


@pytest.mark.parametrize(
    "prediction,expected_cut",
    [
        ("Paris\nbecause the text says so", "Paris"),
        ("Paris</s>junk", "Paris"),
        ("Paris</p> more", "Paris"),
        ("Paris\\n more", "Paris"),
        ("Paris", "Paris"),
    ],
)
def test_mudaf_f1_scores_the_reply_cut_at_its_first_end_marker(prediction, expected_cut):
    record = rec(["Paris"])
    assert score("mudaf_f1", prediction, record) == 1.0
    assert score("mudaf_f1", prediction, record) == score("longbench_f1", expected_cut, record)
    if prediction != expected_cut:  # the uncut reply scores lower by LongBench's F1 alone
        assert score("longbench_f1", prediction, record) < 1.0
