"""Every published column of the shipped config is scored by its rule (issue 21): a benchmark that
is, or mirrors, a paper's column names its ``published_rule``, and in the paper preset the
decoding its authors used (config.yaml states the source beside each)."""

import copy

import pytest
import yaml

from zoomattn.config import ROOT, load_config
from zoomattn.evaluation.official import RULES
from zoomattn.reporting.opamp.published import column

RAW = yaml.safe_load((ROOT / "config.yaml").read_text())
PRESETS = list(RAW["presets"])
# synthetic sets no rule of their column can score, and why
NO_RULE = {
    "faitheval_like": "FaithEval's rules read an option letter; its counterfactuals are free text"
}

# (study, our standard metric) -> the rule its paper's column was scored by: OpAmp's script
# (EM, PM; QuALITY's letter accuracy; FaithEval as OpAmp scored it), ALCE's exact_presence and
# STR-EM (rectification), LongBench's F1 (MuDAF), normalised exact match (LKG-RALM)
PAPER_RULES = {
    ("opamp", "em"): "opamp_em",
    ("opamp", "pm"): "opamp_pm",
    ("opamp", "acc"): "mc_acc",
    ("opamp", "faitheval"): "faitheval_opamp",
    ("rectification", "contains"): "alce_contains",
    ("rectification", "str_em"): "alce_str_em",
    ("mudaf", "pm"): "mudaf_f1",
    ("lkg", "em"): "squad_em",
}


def _effective(preset: str) -> dict:
    raw = copy.deepcopy(RAW)
    raw["preset"] = preset
    return load_config(raw)


def _published(cfg: dict):
    """(study, benchmark, spec) of every benchmark that is or mirrors a published column."""
    for study, block in cfg["studies"].items():
        for name, spec in (block or {}).get("benchmarks", {}).items():
            paper_column = column(name, spec) if study == "opamp" else spec.get("published")
            if paper_column:
                yield study, name, spec


@pytest.mark.parametrize("preset", PRESETS)
def test_every_published_column_of_every_preset_names_a_known_rule(preset):
    published = list(_published(_effective(preset)))
    assert published  # every preset has published columns
    missing = [
        f"{s}.{b}"
        for s, b, spec in published
        if spec.get("published_rule") not in RULES and b not in NO_RULE
    ]
    assert not missing, f"{preset}: no published_rule (or an unknown one) for {missing}"


@pytest.mark.parametrize("preset", [p for p in PRESETS if p != "paper"])
def test_the_presets_below_paper_decode_greedily_so_their_numbers_stay(preset):
    cfg = _effective(preset)
    with_decoding = [
        name
        for block in cfg["studies"].values()
        for name, spec in (block or {}).get("benchmarks", {}).items()
        if "decoding" in spec
    ]
    assert with_decoding == []


def test_every_paper_benchmark_with_a_published_column_sets_its_decoding_in_the_paper_preset():
    cfg = _effective("paper")
    own = RAW["presets"]["paper"]["studies"]
    unset = [
        f"{study}.{name}"
        for study, name, _ in _published(cfg)
        if "decoding" not in ((own.get(study) or {}).get("benchmarks", {}).get(name) or {})
    ]
    assert not unset, f"paper preset: no decoding of its own for {unset}"


def test_each_paper_column_names_the_rule_its_paper_scored_with():
    wrong = {
        f"{study}.{name}": (spec["published_rule"], PAPER_RULES.get((study, spec["metric"])))
        for study, name, spec in _published(_effective("paper"))
        if spec["published_rule"] != PAPER_RULES.get((study, spec["metric"]))
    }
    assert not wrong, f"(configured, the paper's) rules differ: {wrong}"


def test_the_paper_decodings_are_the_authors():
    benchmarks = {
        name: spec for _, name, spec in _published(_effective("paper"))
    }  # OpAmp: sampled at 0.5 (FaithEval 0.2), 512 new tokens; MuDAF: greedy, 32 (Qasper 128)
    opamp = {"temperature": 0.5, "top_p": 1.0, "seeds": [42, 43, 44], "max_new_tokens": 512}
    assert benchmarks["coqa"]["decoding"] == benchmarks["quality"]["decoding"] == opamp
    faitheval = benchmarks["faitheval_counterfactual"]["decoding"]
    assert faitheval == {**opamp, "temperature": 0.2}
    assert benchmarks["lb_hotpotqa"]["decoding"] == {"temperature": 0, "max_new_tokens": 32}
    assert benchmarks["zs_qasper"]["decoding"] == {"temperature": 0, "max_new_tokens": 128}
    sampled = [n for n in ("nq", "asqa", "lkg_nq") if benchmarks[n]["decoding"]["temperature"]]
    assert sampled == []  # rectification and LKG-RALM state no decoding: greedy


def test_a_synthetic_set_without_a_rule_fails_the_columns_rules_indeed(sampler):
    from zoomattn.data import tasks

    record = tasks.counterfactual(sampler)
    for rule in ("faitheval", "faitheval_opamp"):
        with pytest.raises(IndexError):  # no option letter: answers holds the text alone
            RULES[rule].score(record["answers"][0], record)
