import copy

import pytest
import yaml

from zoomattn.config import ROOT, ConfigError, load_config, read_configs

RAW = yaml.safe_load((ROOT / "config.yaml").read_text())


def _raw(preset="tiny"):
    raw = copy.deepcopy(RAW)
    raw["preset"] = preset
    return raw


@pytest.mark.parametrize("key", ["methods", "benchmarks", "attention"])
def test_an_old_top_level_opamp_key_says_it_moves_to_studies_opamp(key):
    raw = _raw()
    raw[key] = RAW["studies"]["opamp"][key]
    with pytest.raises(ConfigError) as err:
        load_config(raw)
    assert str(err.value).startswith(
        f"config.{key}: study settings now live under `studies:` — move `methods`, `benchmarks` "
        "and `attention` to `studies.opamp`"
    )


@pytest.mark.parametrize("study", ["rectification", "mudaf", "lkg", "leaderboard"])
def test_an_old_top_level_study_block_says_where_it_moves(study):
    raw = _raw()
    raw[study] = None
    with pytest.raises(ConfigError) as err:
        load_config(raw)
    assert str(err.value).startswith(
        f"config.{study}: study settings now live under `studies:` — move `{study}:` to "
        f"`studies.{study}:`"
    )


def test_an_old_key_under_a_preset_names_the_preset_and_its_studies_key():
    raw = _raw("smoke")
    raw["presets"]["smoke"]["mudaf"] = raw["presets"]["smoke"]["studies"].pop("mudaf")
    with pytest.raises(ConfigError) as err:
        load_config(raw)
    assert str(err.value).startswith(
        "config.presets.smoke.mudaf: study settings now live under `studies:` — move `mudaf:` to "
        "`presets.smoke.studies.mudaf:`"
    )


def test_an_old_shape_override_file_fails_before_the_schema_names_another_key(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("methods:\n  opamp: {K: [5]}\nlkg: null\n")
    with pytest.raises(ConfigError, match=r"^config\.methods: study settings now live under"):
        load_config(read_configs([ROOT / "config.yaml", old], preset="smoke"))


def test_a_cell_needs_the_study_whose_analysis_of_the_base_it_reads():
    raw = _raw()
    raw["studies"]["lkg"] = None
    with pytest.raises(ConfigError) as err:
        load_config(raw)
    assert str(err.value) == (
        "config.studies.leaderboard.methods.lkg: lkg needs the lkg study in the grid, which runs "
        "the head_patterns analysis (config.studies.lkg is null)"
    )


def test_vanilla_sft_and_a_fixed_xi_need_no_other_study():
    raw = _raw()
    raw["studies"]["mudaf"] = raw["studies"]["rectification"] = None
    raw["studies"]["leaderboard"]["methods"].pop("mudaf")  # its heads: MuDAF's scores
    cfg = load_config(raw)  # sft (heads 0) and rectify (xi 3) stay
    assert {"sft", "rectify"} <= set(cfg["studies"]["leaderboard"]["methods"])


def test_a_leaderboard_entry_may_not_change_the_training_budget():
    raw = _raw()
    raw["studies"]["leaderboard"]["methods"]["sft"]["finetune"] = {"lr": 1e-4, "steps": 500}
    with pytest.raises(ConfigError, match=r"methods\.sft\.finetune: only lr.*steps"):
        load_config(raw)


def test_a_leaderboard_entry_is_one_setting_and_its_baseline_an_entry():
    raw = _raw()
    raw["studies"]["leaderboard"]["methods"]["opamp"]["K"] = [5, 10]
    with pytest.raises(ConfigError, match=r"methods\.opamp: a leaderboard entry is one setting"):
        load_config(raw)
    raw = _raw()
    raw["studies"]["leaderboard"]["baseline"] = "lora"
    with pytest.raises(ConfigError, match=r"leaderboard\.baseline: 'lora' is not an entry"):
        load_config(raw)


def test_a_real_benchmark_of_any_study_needs_a_hub_base():
    raw = _raw()
    raw["studies"]["opamp"]["benchmarks"]["x"] = {
        "source": "chatrag",
        "metric": "em",
        "noise_ratios": [0.0],
    }
    with pytest.raises(
        ConfigError, match=r"^config\.studies\.opamp\.benchmarks\.x: a real dataset"
    ):
        load_config(raw)


def _scored(rule=None, decoding=None, study="lkg", benchmark="nq_open"):
    """The tiny config with one benchmark's published_rule and decoding set."""
    raw = _raw()
    spec = raw["studies"][study]["benchmarks"][benchmark]
    for key, value in (("published_rule", rule), ("decoding", decoding)):
        if value is not None:
            spec[key] = value
    return raw


def test_an_unknown_published_rule_names_study_benchmark_key_and_the_known_rules():
    from zoomattn.evaluation.official import RULES

    with pytest.raises(ConfigError) as err:
        load_config(_scored("squad_f1"))
    assert str(err.value) == (
        "config.studies.lkg.benchmarks.nq_open.published_rule: no published rule 'squad_f1' "
        f"(known: {', '.join(RULES)})"
    )
    assert "opamp_em" in RULES and "alce_str_em" in RULES


def test_every_registered_rule_and_a_sampled_or_greedy_decoding_load():
    from zoomattn.evaluation.official import RULES

    for rule in RULES:
        load_config(_scored(rule))
    sampled = {"temperature": 0.5, "top_p": 0.9, "seeds": [42, 43], "max_new_tokens": 16}
    cfg = load_config(_scored("squad_em", sampled))
    assert cfg["studies"]["lkg"]["benchmarks"]["nq_open"]["decoding"] == sampled
    load_config(_scored(decoding={"temperature": 0, "seeds": [0]}))
    load_config(_scored(decoding={"temperature": 0.0, "max_new_tokens": 32}))


def test_sampled_decoding_needs_seeds():
    with pytest.raises(ConfigError) as err:
        load_config(_scored(decoding={"temperature": 0.5}))
    assert str(err.value) == (
        "config.studies.lkg.benchmarks.nq_open.decoding.seeds: sampled decoding (temperature "
        "0.5) needs seeds, one generation pass each"
    )


def test_greedy_decoding_takes_one_seed_at_most():
    with pytest.raises(ConfigError) as err:
        load_config(_scored(decoding={"temperature": 0, "seeds": [1, 2]}))
    assert str(err.value) == (
        "config.studies.lkg.benchmarks.nq_open.decoding.seeds: greedy decoding (temperature 0) "
        "is one pass: give one seed or none, not 2"
    )


@pytest.mark.parametrize(
    "decoding, key",
    [
        ({"temperature": -0.1, "seeds": [1]}, "temperature"),
        ({"temperature": 0.5, "top_p": 0.0, "seeds": [1]}, "top_p"),
        ({"temperature": 0.5, "top_p": 1.5, "seeds": [1]}, "top_p"),
        ({"temperature": 0.5, "seeds": []}, "seeds"),
        ({"temperature": 0.5, "seeds": [1.5]}, "seeds"),
        ({"temperature": 0, "max_new_tokens": 0}, "max_new_tokens"),
        ({"temperature": 0, "beams": 4}, "decoding"),
        ({"top_p": 0.9}, "decoding"),
    ],
)
def test_the_schema_rejects_a_decoding_out_of_range_naming_the_key(decoding, key):
    with pytest.raises(ConfigError, match=rf"^config\.studies\.lkg\.benchmarks\.nq_open\..*{key}"):
        load_config(_scored(decoding=decoding))


@pytest.mark.parametrize(
    "study, benchmark",
    [("opamp", "coqa_like"), ("rectification", "nq_like"), ("mudaf", "mdqa_like")],
)
def test_every_studys_benchmarks_take_a_published_rule_and_decoding(study, benchmark):
    raw = _scored("squad_em", {"temperature": 0.3, "seeds": [7]}, study, benchmark)
    spec = load_config(raw)["studies"][study]["benchmarks"][benchmark]
    assert (spec["published_rule"], spec["decoding"]["seeds"]) == ("squad_em", [7])


def test_a_leaderboard_benchmark_takes_a_decoding_but_has_no_published_column():
    raw = _scored(decoding={"temperature": 0.3, "seeds": [7]}, study="leaderboard",
                  benchmark="single_noisy")  # fmt: skip
    load_config(raw)
    raw["studies"]["leaderboard"]["benchmarks"]["single_noisy"]["published_rule"] = "squad_em"
    with pytest.raises(ConfigError, match="published_rule"):
        load_config(raw)


def _paper_processes(study: str, **finetune):
    raw = _raw("paper")
    raw["presets"]["paper"]["studies"][study]["finetune"].update(finetune)
    return raw


def test_the_paper_fine_tunes_split_their_batches_over_their_processes_under_both_protocols():
    for protocol in ("authors_code", "paper_text"):
        raw = _raw("paper")
        raw["presets"]["paper"]["protocol"] = protocol
        cfg = load_config(raw)
        assert cfg["finetune"]["processes"] == 8  # OpAmp's, the preset's
        assert cfg["studies"]["mudaf"]["finetune"]["processes"] == 8


def test_a_batch_that_does_not_split_over_the_processes_fails_naming_preset_study_and_keys():
    with pytest.raises(ConfigError) as err:
        load_config(_paper_processes("rectification", processes=8, micro_batch_size=8))
    msg = str(err.value)
    assert msg.startswith("config.presets.paper, study rectification (model ")
    assert "finetune.batch_size 8 is not a whole number of micro-batches of 8" in msg
    assert (
        "finetune.micro_batch_size" in msg and "for each of 8 processes (finetune.processes)" in msg
    )


def test_the_default_micro_batch_is_the_share_of_each_process():
    raw = _raw("tiny")  # batch 16, no micro_batch_size
    raw["presets"]["tiny"]["finetune"]["processes"] = 4
    load_config(raw)  # 4 processes x 4
    raw["presets"]["tiny"]["finetune"]["processes"] = 3
    with pytest.raises(ConfigError, match=r"batch_size 16 .* of 5 .* 3 processes"):
        load_config(raw)


def test_processes_below_one_are_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"finetune.*processes"):
        load_config(_paper_processes("lkg", processes=0))


def test_several_processes_use_one_gpu_each():
    raw = _raw("paper")
    raw["presets"]["paper"]["resources"]["finetune"]["gpus"] = 2
    with pytest.raises(ConfigError, match=r"config.presets.paper.resources.finetune.gpus: 2 GPUs"):
        load_config(raw)


def test_a_full_fine_tune_over_several_processes_needs_plain_adamw_naming_the_key():
    raw = _paper_processes("mudaf", optimizer="paged_adamw_8bit")
    raw["presets"]["paper"]["protocol"] = "paper_text"  # authors_code's overlay sets adamw
    with pytest.raises(ConfigError, match=r"study mudaf .*finetune.optimizer: 'paged_adamw_8bit'"):
        load_config(raw)
    raw["presets"]["paper"]["studies"]["mudaf"]["finetune"]["processes"] = 1
    load_config(raw)
