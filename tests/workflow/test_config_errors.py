"""What `snakemake` says about a bad configuration: one line naming the key or the file's line and
column, no traceback (dry runs on a scratch copy: seconds each)."""

from __future__ import annotations

import pytest

from tests.workflow.scratch import copy_workflow, snakemake
from zoomattn.config import COMMAND_LINE_STRINGS


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    return copy_workflow(tmp_path_factory.mktemp("config-errors"))


def _fails(workdir, *args) -> str:
    done = snakemake(workdir, "-n", *args, check=False)
    assert done.returncode != 0
    assert "Traceback" not in done.stdout + done.stderr
    return done.stderr


def test_malformed_config_yaml_names_its_line_and_column(tmp_path):
    workdir = copy_workflow(tmp_path / "wf")
    config = workdir / "config.yaml"
    lines = config.read_text().splitlines()
    config.write_text("\n".join([*lines, "seeds: [0, 1", "world_seed: 3", ""]))
    err = _fails(workdir)
    assert (
        f"zoomattn: invalid configuration: config.yaml, line {len(lines) + 2}, column 11: "
        "expected ',' or ']', but got ':'"
    ) in err


ATTENTION = "studies={opamp: {attention: {noise_ratio: %s}}}"


def test_nested_command_line_config_of_numbers_hints_at_a_configfile(copy):
    err = _fails(copy, "--config", "preset=smoke", ATTENTION % "0.8")
    assert "config.studies.opamp.attention.noise_ratio: '0.8' is not of type 'number'" in err
    assert COMMAND_LINE_STRINGS in err


def test_nested_command_line_config_of_a_wrong_word_gets_no_hint(copy):
    err = _fails(copy, "--config", "preset=smoke", ATTENTION % "high")
    assert "config.studies.opamp.attention.noise_ratio: 'high' is not of type 'number'" in err
    assert COMMAND_LINE_STRINGS not in err


def test_an_old_shape_config_file_says_where_its_study_settings_move(copy, tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("presets:\n  smoke:\n    rectification: null\n")
    err = _fails(copy, "--configfile", "config.yaml", str(old), "--config", "preset=smoke")
    assert (
        "zoomattn: invalid configuration: config.presets.smoke.rectification: study settings now "
        "live under `studies:` — move `rectification:` to `presets.smoke.studies.rectification:`"
    ) in err


UPSTREAM = (
    "Snakemake 9.27.1 reads --configfile files in its own command line (ConfigSettings), before "
    "the Snakefile runs: a YAML error names no file, line or column, a missing file is a "
    "FileNotFoundError traceback; `python -m zoomattn check-config --config config.yaml FILE` "
    "says both in one line"
)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=UPSTREAM)
def test_malformed_configfile_names_the_file_line_and_column(copy, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("preset: smoke\nseeds: [0, 1\nworld_seed: 3\n")
    err = _fails(copy, "--configfile", str(bad))
    assert "bad.yaml" in err and "line 3" in err


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=UPSTREAM)
def test_missing_configfile_is_one_line(copy, tmp_path):
    err = _fails(copy, "--configfile", str(tmp_path / "nope.yaml"))
    assert "nope.yaml" in err and len(err.strip().splitlines()) == 1
