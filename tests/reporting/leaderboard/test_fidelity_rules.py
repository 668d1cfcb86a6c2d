"""The fidelity table and claims under the published columns' rules: eval dicts in the shape the
evaluation writes (``published_rule`` block, ``decoding``), prediction rows with
``score_published``."""

import numpy as np
import pytest

from tests.reporting.leaderboard.test_fidelity import RECT, N, hits, opamp_world, rect_world
from zoomattn.reporting.leaderboard.claims import claims
from zoomattn.reporting.leaderboard.fidelity import fidelity_numbers
from zoomattn.reporting.leaderboard.report import _predictions

SAMPLED = {"temperature": 0.5, "top_p": 1.0, "seeds": [0, 1, 2], "max_new_tokens": 32}


def with_rule(w, benchmark: str, rule: str, correct: int, decoding: dict | None = None):
    """Every eval of ``benchmark`` gains a published-rule block scoring ``correct`` of N, and its
    per-example rule scores (the evaluation's ``score_published``)."""
    by_rule = {}
    for e in w.evals:
        if e["benchmark"] != benchmark:
            continue
        key = (e["model"], e["benchmark"], e["split"])
        scores = hits(correct, seed=len(e["model"]))
        mean = float(scores.mean())
        e["published_rule"] = {"rule": rule, "score": mean, "ci_low": mean - 0.05}
        e["published_rule"] |= {"ci_high": mean + 0.05, "n": N}
        e["decoding"] = decoding or {"temperature": 0.0}
        by_rule[key] = dict(zip(sorted(w.predictions[key]), scores.tolist(), strict=True))
    return by_rule


def rect_line(df, row="LoRA", column="NQ reverse"):
    return df[df["paper"] == "Rectification"].set_index(["row", "column"]).loc[(row, column)]


def test_without_a_published_block_delta_is_on_the_standard_metric_and_the_note_says_so():
    w = rect_world({"vanilla": 20, "reverse": 28}, {3: {"vanilla": 30, "reverse": 30}})
    line = rect_line(fidelity_numbers(w.spec(rectification=RECT), w.evals))
    assert np.isnan(line["ours_rule"]) and line["ours_standard"] == 70.0
    assert line["delta"] == pytest.approx(70.0 - 65.7)
    assert "no published rule scored (the column's rule: alce_contains)" in line["note"]
    assert "synthetic analogue" in line["note"]


def test_with_a_published_block_delta_is_ours_under_the_rule_minus_published():
    w = rect_world({"vanilla": 20, "reverse": 28}, {3: {"vanilla": 30, "reverse": 30}})
    with_rule(w, "nq_like", "alce_contains", correct=36)  # 90.0 under the rule
    line = rect_line(fidelity_numbers(w.spec(rectification=RECT), w.evals))
    assert line["rule"] == "alce_contains"
    assert line["ours_rule"] == 90.0
    assert (line["rule_ci_low"], line["rule_ci_high"]) == (85.0, 95.0)
    assert line["delta"] == pytest.approx(90.0 - 65.7)
    assert line["ours_standard"] == 70.0  # the standard score stays beside it, as without a block
    assert "no published rule" not in line["note"] and "mismatch" not in line["note"]


def test_the_standard_columns_do_not_change_when_a_block_is_added():
    w = rect_world({"vanilla": 20, "reverse": 28}, {3: {"vanilla": 30, "reverse": 30}})
    cols = ["paper", "table", "row", "column", "ours_standard", "ci_low", "ci_high", "published"]
    before = fidelity_numbers(w.spec(rectification=RECT), w.evals)[cols]
    with_rule(w, "nq_like", "alce_contains", correct=36)
    after = fidelity_numbers(w.spec(rectification=RECT), w.evals)[cols]
    assert before.equals(after)


def test_a_rule_other_than_the_published_columns_is_noted_not_silently_compared():
    w = rect_world({"vanilla": 20, "reverse": 28}, {3: {"vanilla": 30, "reverse": 30}})
    with_rule(w, "nq_like", "squad_em", correct=36)
    line = rect_line(fidelity_numbers(w.spec(rectification=RECT), w.evals))
    assert "rule mismatch: our evaluation scored squad_em" in line["note"]
    assert "the published column's rule is alce_contains" in line["note"]


def test_sampled_decoding_against_the_authors_greedy_or_sampled_is_noted():
    w = opamp_world(k10=36, k20=20, qlora=20)
    with_rule(w, "coqa_like", "opamp_em", correct=38)  # ours greedy, the authors' T=0.5
    df = fidelity_numbers(w.spec(), w.evals)
    coqa = df[(df["row"] == "K=10") & (df["split"] == "r0.9")].iloc[0]
    assert coqa["decoding_ours"] == "greedy"
    assert coqa["decoding_published"] == "sampled T=0.5, one pass, 512 new tokens"
    assert "decoding differs" in coqa["note"]
    assert coqa["delta"] == pytest.approx(95.0 - 85.4)

    w = opamp_world(k10=36, k20=20, qlora=20)
    with_rule(w, "coqa_like", "opamp_em", correct=38, decoding=SAMPLED)
    coqa = fidelity_numbers(w.spec(), w.evals)
    coqa = coqa[(coqa["row"] == "K=10") & (coqa["split"] == "r0.9")].iloc[0]
    assert coqa["decoding_ours"] == "sampled T=0.5 ×3 seeds"
    assert "decoding" not in coqa["note"]  # same temperature: more passes average the same mean


def test_a_block_without_its_scores_fails_naming_the_evaluation():
    w = rect_world({"vanilla": 20, "reverse": 28}, {3: {"vanilla": 30, "reverse": 30}})
    w.evals[-1]["published_rule"] = {"rule": "alce_contains", "score": 0.5}
    with pytest.raises(ValueError, match="published_rule block lacks ci_low, ci_high"):
        fidelity_numbers(w.spec(rectification=RECT), w.evals)


def test_claims_use_the_published_rules_scores_and_say_so():
    # standard: LoRA 20 of 40 both placements vs the base's 20; under the rule LoRA is far ahead
    w = rect_world({"vanilla": 20, "reverse": 20}, {3: {"vanilla": 20, "reverse": 20}}, base=20)
    standard = claims(w.spec(rectification=RECT), w.evals, w.predictions).set_index("claim")
    by_rule = with_rule(w, "nq_like", "alce_contains", correct=20)
    for key in by_rule:
        if "qlora" in key[0]:
            by_rule[key] = dict.fromkeys(by_rule[key], 1.0)
    ruled = claims(w.spec(rectification=RECT), w.evals, w.predictions, by_rule).set_index("claim")
    claim = "LoRA fine-tuning beats the untuned model"
    assert standard.loc[claim, "verdict_ours"] == "not shown"
    assert ruled.loc[claim, "verdict_ours"] == "holds"
    assert ruled.loc[claim, "scored_by"] == "published rule alce_contains: nq_like"
    assert standard.loc[claim, "scored_by"] == "standard em (no published rule): nq_like"


def test_the_report_reads_score_published_beside_score():
    evals = [{"model": "m", "benchmark": "b", "split": "s", "published_rule": {"rule": "r"}}]
    evals.append({"model": "m", "benchmark": "c", "split": "s"})
    rows = [[{"id": "1", "score": 0.0, "score_published": 1.0}], [{"id": "1", "score": 0.5}]]
    standard, by_rule = _predictions(evals, rows)
    assert standard == {("m", "b", "s"): {"1": 0.0}, ("m", "c", "s"): {"1": 0.5}}
    assert by_rule == {("m", "b", "s"): {"1": 1.0}}
    rows[0][0].pop("score_published")
    with pytest.raises(ValueError, match="m on b/s.*lack score_published"):
        _predictions(evals, rows)
