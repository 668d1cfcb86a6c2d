"""Reading the published-rule block of the evaluation files, and the papers' scoring tables."""

import pytest

from zoomattn.evaluation.official import RULES
from zoomattn.reporting.common.published_rule import (
    Published,
    decoding_differs,
    decoding_text,
    rule_evals,
)
from zoomattn.reporting.lkg import published as lkg
from zoomattn.reporting.mudaf import published as mudaf
from zoomattn.reporting.opamp import published as opamp
from zoomattn.reporting.rectification import published as rect


def test_an_eval_with_a_block_reads_as_one_scored_by_the_rule_and_one_without_is_left_out():
    block = {"rule": "opamp_em", "score": 0.7, "ci_low": 0.6, "ci_high": 0.8, "n": 5}
    evals = [
        {"model": "m", "benchmark": "b", "metric": "em", "score": 0.5, "published_rule": block}
    ]
    evals.append({"model": "m", "benchmark": "c", "metric": "em", "score": 0.1})
    (ruled,) = rule_evals(evals)
    assert (ruled["metric"], ruled["score"], ruled["ci_high"]) == ("opamp_em", 0.7, 0.8)
    assert ruled["subsets"] == {}
    assert evals[0]["score"] == 0.5  # the eval itself is not changed


def test_decoding_text_and_which_decodings_count_as_different():
    assert decoding_text(None) == decoding_text({"temperature": 0}) == "greedy"
    assert decoding_text({"temperature": 0.5, "seeds": [1, 2, 3]}) == "sampled T=0.5 ×3 seeds"
    assert decoding_text({"temperature": 0.2, "top_p": 0.9, "seeds": [1]}).endswith("one pass")
    authors = Published("opamp_em", 0.5, "src")
    assert decoding_differs(authors, {"temperature": 0})
    assert not decoding_differs(authors, {"temperature": 0.5, "seeds": [0, 1]})
    assert not decoding_differs(Published("squad_em", None, "src"), {"temperature": 0.7})


@pytest.mark.parametrize("paper", [opamp, rect, mudaf, lkg])
def test_every_published_column_names_a_registered_rule_and_a_decoding(paper):
    columns = set(paper.COLUMNS) if hasattr(paper, "COLUMNS") else set()
    if paper is opamp:
        columns = set(opamp.TABLE3["columns"][1:]) | {"FaithEval"}
    assert set(paper.SCORING) == columns
    assert {s.rule for s in paper.SCORING.values()} <= set(RULES)
    assert all(s.source and s.decoding for s in paper.SCORING.values())
