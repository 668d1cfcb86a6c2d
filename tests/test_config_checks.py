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
