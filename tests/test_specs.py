"""The job specs (zoomattn/specs.py), built without Snakemake from the shipped smoke preset."""

import copy

import pytest
import yaml

from zoomattn.config import ROOT, ConfigError, code_hash, load_config, validate_schema
from zoomattn.specs import Specs

RAW = yaml.safe_load((ROOT / "config.yaml").read_text())


@pytest.fixture(scope="module")
def specs():
    raw = copy.deepcopy(RAW)
    raw["preset"] = "smoke"
    return Specs(load_config(raw))


def test_an_opamp_finetune_carries_no_study_keys_and_the_presets_finetune(specs):
    spec = specs.finetune("opamp-K10_s0")
    assert spec["method_config"] == {"K": 10, "every": 2, "adapter_dim": 16, "dropout": 0.1}
    assert spec["finetune"] == specs.cfg["finetune"]
    assert spec["code"] == code_hash("finetune", "opamp")
    assert not {"study", "placement", "base"} & set(spec)


def test_a_study_finetune_names_its_study_placement_base_and_its_finetune_over_the_presets(specs):
    spec = specs.finetune("leaderboard/sft_s1")
    assert (spec["study"], spec["placement"], spec["base"], spec["seed"]) == (
        "leaderboard",
        "vanilla",
        "base",
        1,
    )
    assert spec["finetune"] == {**specs.cfg["finetune"], "steps": 6, "lr": 1.0e-3}


def test_the_shared_eval_set_is_a_benchmark_at_a_noise_ratio(specs):
    spec = specs.eval_data("coqa_like", "r0.9")
    assert spec["noise_ratio"] == 0.9 and "study" not in spec
    assert spec["benchmarks"] == {
        "coqa_like": {"family": "single", "metric": "em", "noise_ratios": [0.0, 0.9]}
    }  # without its published_rule: how a set is scored changes none of its examples
    assert spec["data"] == {"n_entities": 120, "n_famous": 10, "n_eval": 24}
    assert spec["code"] == code_hash("eval-data") != specs.world()["code"] == code_hash("world")


def test_a_studys_eval_set_holds_its_layout_and_distractors(specs):
    rect = specs.eval_data("nq_like", "reverse")
    assert (rect["study"], rect["placement"], rect["distractors"]) == (
        "rectification",
        "reverse",
        3,
    )
    assert rect["spec"] == {"family": "single", "metric": "contains", "published": "NQ"}
    robust = specs.eval_data("nq_open", "irr1")
    assert (robust["placement"], robust["passages"], robust["irrelevant"]) == ("vanilla", 4, 1.0)
    closed = specs.eval_data("nq_open", "n0")
    assert (closed["passages"], closed["irrelevant"]) == (0, 0.0)
    noisy = specs.eval_data("single_noisy", "r0.9")
    assert (noisy["noise_ratio"], "distractors" in noisy) == (0.9, False)


def test_training_sets_the_shared_one_reads_the_presets_data_a_studys_its_train_block(specs):
    shared = specs.train_data("train")
    assert shared["data"] == specs.cfg["data"] and "study" not in shared
    opamp = specs.cfg["studies"]["opamp"]["benchmarks"]
    assert shared["benchmarks"] == {
        name: {k: v for k, v in b.items() if k != "published_rule"} for name, b in opamp.items()
    }
    mudaf = specs.train_data("train-mudaf/vanilla")
    assert (mudaf["study"], mudaf["placement"], mudaf["distractors"]) == ("mudaf", "vanilla", 4)
    assert mudaf["train"] == specs.cfg["studies"]["mudaf"]["train"]


def test_an_evaluation_records_its_split_and_what_its_study_measures(specs):
    opamp = specs.evaluate("qlora_s0", "coqa_like", "r0")
    assert (opamp["split"], opamp["noise_ratio"], opamp["metric"]) == ("r0", 0.0, "em")
    assert not {"study", "placement", "answer_gap_examples"} & set(opamp)
    rect = specs.evaluate("base", "nq_like", "reverse")
    assert (rect["study"], rect["placement"], rect["answer_gap_examples"]) == (
        "rectification",
        "reverse",
        8,
    )
    assert rect["code"] == code_hash("evaluate")  # a base runs no method code
    robust = specs.evaluate("lkg/lkg_s0", "nq_open", "n4")
    assert (robust["placement"], "noise_ratio" in robust) == ("vanilla", False)
    assert robust["code"] == code_hash("evaluate", "lkg")


def test_analyses_read_the_settings_of_the_study_that_configures_them(specs):
    att = specs.attention("base")
    assert (att["benchmark"], att["noise_ratio"], att["answer_gap_examples"]) == (
        "coqa_like",
        0.9,
        50,
    )
    margin = specs.score_margin("base")
    assert (margin["benchmark"], margin["placement"], margin["examples"]) == (
        "nq_like",
        "vanilla",
        8,
    )
    masking = specs.head_masking("mudaf/mudaf_weak_s0")
    assert (masking["benchmark"], masking["metric"]) == ("mdqa_like", "pm")
    assert specs.retrieval_heads("base")["retrieval_heads"]["examples"] == 8
    assert specs.head_patterns("base")["head_patterns"] == {"benchmark": "nq_open", "examples": 8}
    selection = specs.select_heads("mudaf/mudaf-heads2_s0")
    assert selection["method_config"] == {"heads": 2, "selection": "weighted"}


def test_each_report_spec_holds_its_studys_block_cells_base_and_seeds(specs):
    opamp = specs.report("opamp")
    opamp_values = {"every": 2, "adapter_dim": 16, "dropout": 0.1}
    assert opamp["cells"] == {  # by model id: the report labels a model from its cell
        "qlora_s0": {"run": "qlora", "method": "qlora", "values": {}, "seed": 0},
        "opamp-K10_s0": {
            "run": "opamp-K10",
            "method": "opamp",
            "values": {"K": 10, **opamp_values},
            "seed": 0,
        },
        "opamp-Kinf_s0": {
            "run": "opamp-Kinf",
            "method": "opamp",
            "values": {"K": "inf", **opamp_values},
            "seed": 0,
        },
    }
    assert opamp["code"] == code_hash("report", report="opamp") != code_hash("report", report="lkg")
    rect = specs.report("rectification")
    assert rect["rectification"] == specs.cfg["studies"]["rectification"]
    assert rect["cells"]["rectification/rectify_auto-reverse_s0"]["placement"] == "reverse"
    mudaf = specs.report("mudaf")
    assert mudaf["studies"]["leaderboard/lkg_s1"] == "leaderboard" and mudaf["clipped_heads"] == {}
    assert mudaf["bases"] == {s: "base" for s in specs.grid.studies}
    lkg = specs.report("lkg")
    assert set(lkg) == {"preset", "lkg", "cells", "base", "seeds", "code"}
    assert lkg["cells"]["lkg/lkg_no_lpr_s0"]["entry"] == "lkg_no_lpr"  # Fig. 6 finds models by it
    cross = specs.report("leaderboard")
    assert cross["seeds"] == [0, 1] and cross["grid_seeds"] == [0]
    assert set(cross["studies"]) == {"rectification", "mudaf", "lkg"}
    assert set(cross["leaderboard"]["cells"]) == {
        m for m in cross["cells"] if m.startswith("leaderboard/")
    }


def _with_scoring(rule="opamp_pm", decoding=None):
    """The smoke preset with coqa_like scored by ``rule`` and decoded as ``decoding``."""
    raw = copy.deepcopy(RAW)
    raw["preset"] = "smoke"
    coqa = raw["presets"]["smoke"]["studies"]["opamp"]["benchmarks"]["coqa_like"]
    coqa["published_rule"] = rule
    if decoding is not None:
        coqa["decoding"] = decoding
    return Specs(load_config(raw))


def test_an_evaluation_names_the_published_rule_and_decoding_its_benchmark_sets(specs):
    sampled = {"temperature": 0.5, "top_p": 0.9, "seeds": [1, 2], "max_new_tokens": 8}
    spec = _with_scoring("opamp_pm", sampled).evaluate("qlora_s0", "coqa_like", "r0")
    assert (spec["published_rule"], spec["decoding"]) == ("opamp_pm", sampled)
    assert specs.evaluate("qlora_s0", "coqa_like", "r0")["published_rule"] == "opamp_em"


def test_an_evaluation_of_a_benchmark_without_rule_or_decoding_carries_neither_key(specs):
    spec = specs.evaluate("leaderboard/qlora_s0", "single_noisy", "r0.9")
    assert not {"published_rule", "decoding"} & set(spec)
    assert "decoding" not in specs.evaluate("qlora_s0", "coqa_like", "r0")  # greedy: unset


def test_scoring_keys_leave_the_data_specs_unchanged(specs):
    other = _with_scoring("opamp_pm", {"temperature": 0.5, "seeds": [3]})
    assert other.eval_data("coqa_like", "r0") == specs.eval_data("coqa_like", "r0")
    assert other.train_data("train") == specs.train_data("train")
    assert other.evaluate("qlora_s0", "coqa_like", "r0") != specs.evaluate(
        "qlora_s0", "coqa_like", "r0"
    )


def test_a_model_is_evaluated_on_the_quantization_its_study_trained_it_with():
    raw = copy.deepcopy(RAW)
    raw["preset"] = "smoke"
    block = raw["presets"]["smoke"]["studies"]["rectification"]
    quant = {**raw["presets"]["smoke"]["finetune"]["quantization"], "quant_type": "fp4"}
    block["finetune"] = {**block["finetune"], "quantization": quant}
    specs = Specs(load_config(raw))
    model = "rectification/rectify-xi3-reverse_s0"
    assert specs.finetune(model)["finetune"]["quantization"] == quant
    assert specs.evaluate(model, "nq_like", "reverse")["quantization"] == quant
    assert specs.evaluate("opamp-K10_s0", "coqa_like", "r0")["quantization"]["quant_type"] == "nf4"
    assert specs.evaluate("base", "coqa_like", "r0")["quantization"]["quant_type"] == "nf4"


def test_attention_kernels_enter_the_model_jobs_specs_only_when_fused(specs):
    """The default (reference, set or not) leaves every spec as it was before the key existed;
    fused reruns the fine-tunes and evaluations, and no data job."""
    jobs = (
        lambda s: s.finetune("opamp-K10_s0"),
        lambda s: s.evaluate("opamp-K10_s0", "coqa_like", "r0"),
        lambda s: s.attention("opamp-K10_s0"),
        lambda s: s.train_data("train"),
    )
    assert not any("attention_kernels" in job(specs) for job in jobs)
    reference = Specs({**specs.cfg, "attention_kernels": "reference"}, specs.grid)
    assert [job(reference) for job in jobs] == [job(specs) for job in jobs]
    fused = Specs({**specs.cfg, "attention_kernels": "fused"}, specs.grid)
    assert [job(fused).get("attention_kernels") for job in jobs] == ["fused"] * 3 + [None]
    all_reference = Specs({**specs.cfg, "attention_kernels": {"lkg": "reference"}}, specs.grid)
    assert [job(all_reference) for job in jobs] == [job(specs) for job in jobs]
    some = {"rectify": "fused", "lkg": "fused"}
    some_fused = Specs({**specs.cfg, "attention_kernels": some}, specs.grid)
    assert [job(some_fused).get("attention_kernels") for job in jobs] == [some] * 3 + [None]


def test_attention_kernels_outside_reference_and_fused_fail_validation():
    raw = copy.deepcopy(RAW)
    raw["presets"]["smoke"]["attention_kernels"] = "triton"
    with pytest.raises(ConfigError, match="attention_kernels"):
        validate_schema(raw)
    raw["presets"]["smoke"]["attention_kernels"] = {"mudaf": "fused"}  # no fused path
    with pytest.raises(ConfigError, match="attention_kernels"):
        validate_schema(raw)


def test_a_preset_may_run_plain_sdpa_fused_by_naming_it_in_a_mapping():
    raw = copy.deepcopy(RAW)
    raw["presets"]["smoke"]["attention_kernels"] = {"plain": "fused", "lkg": "fused"}
    validate_schema(raw)
    raw["presets"]["smoke"]["attention_kernels"] = {"plain": "causal"}
    with pytest.raises(ConfigError, match="attention_kernels"):
        validate_schema(raw)
