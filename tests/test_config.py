import copy

import pytest
import yaml

from zoomattn.config import (
    COMMAND_LINE_STRINGS,
    ROOT,
    ConfigError,
    code_hash,
    config_hash,
    load_config,
    read_configs,
    read_yaml,
)

RAW = yaml.safe_load((ROOT / "config.yaml").read_text())


def _with(**changes):
    raw = copy.deepcopy(RAW)
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = raw
        for p in parents:
            node = node[p]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value
    return raw


def test_shipped_config_is_valid_for_every_preset():
    for preset in RAW["presets"]:
        cfg = load_config(_with(preset=preset))
        assert cfg["out"].endswith(preset)


def test_preset_values_override_the_grid():
    cfg = load_config(_with(preset="smoke"))
    smoke = RAW["presets"]["smoke"]
    assert cfg["studies"]["opamp"]["methods"]["opamp"]["K"] == [10, "inf"]
    assert cfg["studies"]["opamp"] == smoke["studies"]["opamp"]
    assert cfg["finetune"] == smoke["finetune"]


def test_a_presets_study_block_replaces_the_grids_block_whole():
    raw = _with(preset="smoke")
    raw["presets"]["smoke"]["studies"]["mudaf"] = {
        **raw["presets"]["smoke"]["studies"]["mudaf"],
        "masking": {"k": [1], "draws": 1, "examples": 4},
    }
    cfg = load_config(raw)
    assert cfg["studies"]["mudaf"]["masking"] == {"k": [1], "draws": 1, "examples": 4}
    assert "models" not in cfg["studies"]["mudaf"]["masking"]  # not merged with the grid's
    assert cfg["studies"]["lkg"] == RAW["presets"]["smoke"]["studies"]["lkg"]


def test_a_study_the_preset_does_not_name_keeps_the_grids_block():
    raw = _with(preset="smoke")
    del raw["presets"]["smoke"]["studies"]["lkg"]
    assert load_config(raw)["studies"]["lkg"] == RAW["studies"]["lkg"]


def test_null_turns_a_study_off_and_small_runs_opamp_alone():
    cfg = load_config(_with(preset="small"))
    assert {s for s, block in cfg["studies"].items() if block} == {"opamp"}


@pytest.mark.parametrize(
    "changes,key",
    [
        ({"studies__opamp__methods__lora2": {}}, "config.studies.opamp.methods"),
        ({"studies__opamp__methods__opamp__K": [0, 5]}, "config.studies.opamp.methods.opamp.K[0]"),
        ({"studies__opamp__methods__opamp__K": [-1]}, "config.studies.opamp.methods.opamp.K[0]"),
        ({"studies__opamp__methods__opamp__evrey": 2}, "'evrey'"),
        (
            {"studies__opamp__benchmarks__coqa_like__noise_ratios": [0.0, 1.0]},
            "config.studies.opamp.benchmarks.coqa_like.noise_ratios[1]",
        ),
        ({"studies__opamp__benchmarks__coqa_like__noise_ratios": [-0.2]}, "noise_ratios[0]"),
        ({"presets__tiny__finetune__lr": "fast"}, "config.presets.tiny.finetune.lr"),
        ({"preset": "huge"}, "config.preset"),
        (
            {"studies__opamp__attention__benchmark": "nope"},
            "config.studies.opamp.attention.benchmark: 'nope' is not one of the study's",
        ),
        (
            {"studies__opamp__benchmarks__coqa_like__noise_ratios": [0.0, 0.1234567]},
            "config.studies.opamp: noise ratio 0.1234567 does not survive a split's name",
        ),
        ({"seeds": KeyError}, "'seeds' is a required property"),
        ({"presets__tiny__resources__finetune__cpus": 0}, "resources.finetune.cpus"),
        ({"presets__tiny__resources__evaluate__gpu": 1}, "('gpu' was unexpected)"),
        ({"presets__tiny__resources__data": KeyError}, "'data' is a required property"),
        ({"cluster__partiton": "gpu"}, "('partiton' was unexpected)"),
        ({"cluster__gpu_model": "'a100'"}, "config.cluster.gpu_model"),
        (
            {"preset": "paper", "presets__paper__studies__opamp__benchmarks__coqa__source": "x"},
            "config.studies.opamp.benchmarks.coqa.source: no dataset builder 'x'",
        ),
        (
            {"preset": "paper", "presets__paper__data__train__ncfft": {}},
            "config.presets.paper.data.train.ncfft: no dataset builder",
        ),
        (
            {"preset": "paper", "presets__paper__studies__opamp__benchmarks__coqa__metric": "f1"},
            "config.presets.paper.studies.opamp.benchmarks.coqa.metric",
        ),
        ({"presets__paper__data__n_eval": 0}, "config.presets.paper.data.n_eval"),
        ({"presets__tiny__base_model__source": "meta-llama/Llama-3.1-8B"}, "data.train"),
        ({"presets__tiny__base_model__layers": KeyError}, "source pretrain needs layers"),
        (
            {"preset": "paper", "presets__paper__base_model__source": "pretrain"},
            "source pretrain needs",
        ),
        (
            {"preset": "paper", "presets__paper__base_model__chat_format": "llama2"},
            "config.presets.paper.base_model.chat_format",
        ),
        (
            {
                "studies__rectification__benchmarks__coqa_like": {
                    "family": "single",
                    "metric": "contains",
                }
            },
            "config.studies.rectification.benchmarks.coqa_like: the name is already a benchmark "
            "of the opamp study",
        ),
        (
            {"studies__rectification__methods__rectify__g": "relu"},
            "config.studies.rectification.methods.rectify: g: unknown variant 'relu'",
        ),
        (
            {"studies__rectification__methods__rectify_g__placements": ["sideways"]},
            "config.studies.rectification.methods",
        ),
        (
            {"preset": "paper", "presets__paper__studies__rectification__train__dpr_nqq": {}},
            "config.studies.rectification.train.dpr_nqq: no dataset builder 'dpr_nqq'",
        ),
        (
            {"studies__mudaf__benchmarks__nq_like": {"family": "single", "metric": "pm"}},
            "config.studies.mudaf.benchmarks.nq_like: the name is already a benchmark of the "
            "rectification study",
        ),
        (
            {"studies__mudaf__retrieval_heads__benchmark": "nq_like"},
            "config.studies.mudaf.retrieval_heads.benchmark: 'nq_like' is not one of the study's",
        ),
        (
            {"studies__mudaf__methods__mudaf__selection": "best"},
            "config.studies.mudaf.methods.mudaf: selection",
        ),
        ({"studies__mudaf__masking__k": [0]}, "config.studies.mudaf.masking.k[0]"),
        (
            {"studies__mudaf__distractors": KeyError},
            "config.studies.mudaf.distractors: the synthetic world",
        ),
        (
            {"preset": "paper", "presets__paper__studies__mudaf__train__mudaf_hotpot": {}},
            "config.studies.mudaf.train.mudaf_hotpot: no dataset builder 'mudaf_hotpot'",
        ),
        (
            {"studies__lkg__benchmarks__mdqa_like": {"family": "multihop", "metric": "em"}},
            "config.studies.lkg.benchmarks.mdqa_like: the name is already a benchmark of the "
            "mudaf study",
        ),
        (
            {"studies__lkg__head_patterns__benchmark": "nq_like"},
            "config.studies.lkg.head_patterns.benchmark: 'nq_like' is not one of the study's",
        ),
        (
            {"studies__lkg__robustness__models": ["lkg", "lora"]},
            "config.studies.lkg.robustness.models: 'lora' is not an entry of "
            "config.studies.lkg.methods",
        ),
        (
            {"studies__lkg__robustness__irrelevant__shares": [1.5]},
            "config.studies.lkg.robustness.irrelevant",
        ),
        ({"studies__lkg__methods__lkg": {"beta": 2}}, "config.studies.lkg.methods.lkg: beta"),
        (
            {"studies__lkg__methods__lkg": {"estimator": "bert"}},
            "config.studies.lkg.methods.lkg: estimator",
        ),
        (
            {
                "preset": "paper",
                "presets__paper__studies__lkg__robustness__benchmark": "dpr",
                "presets__paper__studies__lkg__benchmarks__dpr": {
                    "source": "dpr_nq",
                    "metric": "em",
                },
            },
            "config.studies.lkg.robustness.benchmark: 'dpr' reads 'dpr_nq'",
        ),
    ],
)
def test_invalid_config_error_names_the_offending_key(changes, key):
    with pytest.raises(ConfigError) as err:
        load_config(_with(**changes))
    assert key in str(err.value)


def test_config_hash_changes_with_any_value():
    a = load_config(RAW)
    assert config_hash(a) == config_hash(load_config(RAW))
    assert config_hash(a) != config_hash(load_config(_with(world_seed=9)))


def test_method_code_hash_differs_per_method_and_from_shared_code():
    assert code_hash("finetune", "opamp") != code_hash("finetune", "qlora")
    assert code_hash("finetune", "opamp") == code_hash("finetune", "opamp")


@pytest.mark.parametrize(
    "changes,key",
    [
        ({"seeds": ["0", "1"]}, "is not of type 'integer'"),
        ({"studies__opamp__attention__noise_ratio": "0.8"}, "config.studies.opamp.attention"),
        (  # a oneOf (number or inf)
            {"studies__opamp__methods__opamp__K": ["5"]},
            "config.studies.opamp.methods.opamp.K[0]",
        ),
        ({"presets__smoke__finetune__lr": "1e-4"}, "config.presets.smoke.finetune.lr"),
        ({"studies__rectification": "null"}, "config.studies.rectification"),
    ],
)
def test_a_string_that_reads_as_the_wanted_type_hints_at_command_line_config(changes, key):
    """Snakemake's --config gives nested values ({a: [2]}) to the Snakefile as strings."""
    with pytest.raises(ConfigError) as err:
        load_config(_with(**changes))
    assert key in str(err.value)
    assert COMMAND_LINE_STRINGS in str(err.value)


@pytest.mark.parametrize(
    "changes",
    [
        {"studies__opamp__attention__noise_ratio": "high"},  # a word: a plain mistake
        {"studies__opamp__attention__noise_ratio": "1.5"},  # a number, but out of range
        {"studies__opamp__attention__benchmark": 3},  # not a string at all
    ],
)
def test_no_command_line_hint_when_the_typed_value_would_fail_too(changes):
    with pytest.raises(ConfigError) as err:
        load_config(_with(**changes))
    assert COMMAND_LINE_STRINGS not in str(err.value)


def test_yaml_syntax_error_names_the_file_line_and_column(tmp_path):
    bad = tmp_path / "override.yaml"
    bad.write_text("preset: smoke\nseeds: [0, 1\nworld_seed: 2\n")
    with pytest.raises(ConfigError) as err:
        read_yaml(bad)
    assert str(err.value) == (
        f"{bad}, line 3, column 11: expected ',' or ']', but got ':' "
        "(while parsing a flow sequence that started at line 2, column 8)"
    )


def test_missing_or_non_mapping_config_file_is_a_config_error_naming_it(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read the config file"):
        read_yaml(tmp_path / "nope.yaml")
    listed = tmp_path / "list.yaml"
    listed.write_text("- preset: smoke\n")
    with pytest.raises(ConfigError, match=r"list\.yaml: the top level must be a mapping"):
        read_yaml(listed)


def test_later_config_files_and_the_preset_override_like_snakemake(tmp_path):
    override = tmp_path / "override.yaml"
    override.write_text("preset: paper\nstudies: {opamp: {attention: {noise_ratio: 0.8}}}\n")
    raw = read_configs([ROOT / "config.yaml", override], preset="smoke")
    assert raw["preset"] == "smoke"  # --preset last, as --config preset=NAME
    attention = raw["studies"]["opamp"]["attention"]  # nested keys merge
    assert attention == {**RAW["studies"]["opamp"]["attention"], "noise_ratio": 0.8}
