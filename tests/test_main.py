import inspect
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from zoomattn.__main__ import ENV_RESULTS, STAGES, USER_COMMANDS, build_parser, run_stage
from zoomattn.config import ROOT

INTERNAL = ("worker", "mlflow-start", "mlflow-end")


def test_help_is_a_guide_to_every_command_and_stage_without_the_internal_ones():
    done = subprocess.run(
        [sys.executable, "-m", "zoomattn", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ")}
    assert set(USER_COMMANDS) | set(STAGES) <= listed
    assert "called by the workflow's rules" in done.stdout
    for name in INTERNAL:
        assert not re.search(rf"\b{name}\b", done.stdout), name


def test_internal_commands_still_parse():
    args = build_parser().parse_args(["mlflow-end", "--results", "r", "--run-id", "x"])
    assert (args.stage, args.run_id) == ("mlflow-end", "x")


@pytest.mark.parametrize(
    "argv",
    [
        ["world", "--spec", "{}", "--out", "o"],
        ["mlflow-start", "--preset", "smoke"],
    ],
)
def test_results_defaults_from_the_environment_and_an_explicit_one_wins(monkeypatch, argv):
    monkeypatch.setenv(ENV_RESULTS, "/from/env")
    assert build_parser().parse_args(argv).results == Path("/from/env")
    assert build_parser().parse_args([*argv, "--results", "given"]).results == Path("given")


@pytest.mark.parametrize("unset", [True, False])
def test_results_is_required_without_the_environment_variable(monkeypatch, capsys, unset):
    if unset:
        monkeypatch.delenv(ENV_RESULTS, raising=False)
    else:
        monkeypatch.setenv(ENV_RESULTS, "")  # set but empty: not the current directory
    with pytest.raises(SystemExit) as err:
        build_parser().parse_args(["world", "--spec", "{}", "--out", "o"])
    assert err.value.code == 2
    assert "--results" in capsys.readouterr().err


@pytest.fixture
def checkout_dir(tmp_path, monkeypatch):
    """A working directory with the shipped config.yaml and no results."""
    shutil.copy(ROOT / "config.yaml", tmp_path / "config.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _exit_message(argv: list[str]) -> str:
    with pytest.raises(SystemExit) as err:
        run_stage(argv)
    assert isinstance(err.value.code, str), err.value.code  # a message, not a bare status
    return err.value.code


def test_regenerate_without_results_names_the_missing_file_and_the_command(checkout_dir):
    message = _exit_message(["regenerate", "--preset", "smoke", "--out", "again"])
    assert message.startswith("zoomattn regenerate: results/smoke/eval/")  # --preset chose smoke
    assert "\n" not in message
    assert message.endswith("make run SNAKEMAKE_ARGS='--config preset=smoke'")
    assert not (checkout_dir / "again").exists()


def test_regenerate_names_the_override_files_in_the_command_that_makes_the_results(checkout_dir):
    (checkout_dir / "mine.yaml").write_text("preset: smoke\n")
    message = _exit_message(["regenerate", "--config", "config.yaml", "mine.yaml", "--out", "x"])
    assert "results/smoke/" in message
    assert message.endswith("make run SNAKEMAKE_ARGS='--configfile mine.yaml'")


def test_regenerate_with_a_broken_override_names_its_line_and_column(checkout_dir):
    (checkout_dir / "mine.yaml").write_text("preset: smoke\n  seeds: [0]\n")
    message = _exit_message(["regenerate", "--config", "config.yaml", "mine.yaml", "--out", "x"])
    assert message == (
        "zoomattn regenerate: mine.yaml, line 2, column 8: mapping values are not allowed here"
    )


def test_check_config_accepts_the_shipped_config_with_a_preset(checkout_dir, capsys):
    run_stage(["check-config", "--preset", "smoke"])
    assert capsys.readouterr().out.strip() == (
        "config.yaml: valid; preset smoke, results in results/smoke"
    )


@pytest.mark.parametrize(
    "override,message",
    [
        (None, "zoomattn check-config: nope.yaml: cannot read the config file"),
        ("seeds: [0, 1\n", "zoomattn check-config: nope.yaml, line 2, column 1: expected"),
        ("seeds: [-1]\n", "zoomattn check-config: config.seeds[0]: -1 is less than"),
    ],
)
def test_check_config_reports_a_bad_override_in_one_line(checkout_dir, override, message):
    if override is not None:
        (checkout_dir / "nope.yaml").write_text(override)
    got = _exit_message(["check-config", "--config", "config.yaml", "nope.yaml"])
    assert got.startswith(message) and "\n" not in got


REPORT_TO = ["--results", "r", "--study", "opamp", "--out", "o"]
REPORT = [*REPORT_TO, "--inputs", "evals=e.json", "attention=a.json", "base_metrics=m.json"]


def test_a_report_stage_reads_its_spec_from_a_file_and_other_stages_refuse_one(tmp_path):
    args = build_parser().parse_args(["report", "--spec-file", str(tmp_path / "s.json")] + REPORT)
    assert args.spec_file == tmp_path / "s.json" and args.spec is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["world", "--spec-file", "s.json", "--out", "o"])
    with pytest.raises(SystemExit):  # one of the two, not both
        build_parser().parse_args(["report", "--spec", "{}", "--spec-file", "s.json"] + REPORT)


def test_an_unknown_command_is_named_without_listing_the_internal_ones(capsys):
    with pytest.raises(SystemExit) as stop:
        run_stage(["regenerat"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "unknown command 'regenerat'" in err and "--help" in err
    assert "worker" not in err and "mlflow" not in err


def _inputs(*tokens: str) -> dict:
    return (
        build_parser()
        .parse_args(["report", "--spec", "{}", *REPORT[:6], "--inputs", *tokens])
        .inputs
    )


def test_report_inputs_are_paths_by_kind_a_bare_path_joining_the_kind_before_it():
    got = _inputs("evals=a.json", "b.json", "heads=h.json", "masking=", "evals=c.json")
    assert got == {
        "evals": [Path("a.json"), Path("b.json"), Path("c.json")],
        "heads": [Path("h.json")],
        "masking": [],  # `masking={input.masking}` with no masked model
    }


@pytest.mark.parametrize(
    "tokens,said",
    [
        (["a.json"], "'a.json' has no kind"),
        (["evals=a.json", "eval=b.json"], "unknown kind 'eval'"),
    ],
)
def test_report_inputs_without_a_known_kind_are_refused_naming_the_token(capsys, tokens, said):
    with pytest.raises(SystemExit):
        _inputs(*tokens)
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("old", ["rect-report", "mudaf-report", "lkg-report", "leaderboard-report"])
def test_the_per_study_report_commands_are_gone_for_the_one_report_command(capsys, old):
    with pytest.raises(SystemExit):
        run_stage([old, "--spec", "{}", *REPORT])
    assert f"unknown command {old!r}" in capsys.readouterr().err
    args = build_parser().parse_args(["report", "--spec", "{}", *REPORT])
    assert (args.stage, args.study) == ("report", "opamp")


def test_a_stage_job_logs_the_cpu_it_ran_on(monkeypatch, caplog):
    """A CPU run's metrics depend on the CPU type (its rounding): every job's log names it."""
    import zoomattn.__main__ as cli
    from zoomattn.stages import data

    ran = []

    def world(**kwargs):  # the stage's parameters (the parser reads them), doing nothing
        ran.append("world")

    world.__signature__ = inspect.signature(data.world)
    monkeypatch.setattr(data, "world", world)
    monkeypatch.setattr(cli, "claim_for_spec", lambda spec: None)
    monkeypatch.setenv(cli.ENV_RUN_CONTEXT, "{}")  # restored after the CLI sets it
    caplog.set_level("INFO", logger="zoomattn")
    run_stage(["world", "--spec", "{}", "--results", "unused", "--out", "unused"])
    assert ran == ["world"]
    capability = torch.backends.cpu.get_cpu_capability()
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cpu: ")]
    assert logged == [f"cpu: {cli.cpu_description()}"] and logged[0].endswith(f", {capability}")


LEAVING = """
import atexit, sys, threading
from concurrent.futures import ThreadPoolExecutor
from zoomattn.__main__ import exit_without_teardown
atexit.register(lambda: print("atexit ran", flush=True))
written = threading.Event()
def late():
    written.wait()
    sys.stdout.write("thread done ")
threading.Thread(target=late).start()
queued = ThreadPoolExecutor(1)  # never shut down: Python's exit finishes its work
queued.submit(written.wait)
queued.submit(sys.stdout.write, "executor done ")  # one write each: no interleaving
sys.stdout.write("buffered ")
written.set()
{before}
exit_without_teardown(3)
sys.stdout.write("returned\\n")  # one write: the threads may interleave with print's two
"""


def test_a_process_leaves_without_teardown_after_its_threads_atexit_and_buffered_output():
    done = subprocess.run([sys.executable, "-c", LEAVING.format(before="")], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 3, done.stderr
    finished = ("thread done executor done", "executor done thread done")  # either order
    assert done.stdout in {f"buffered {both} atexit ran\n" for both in finished}, done.stdout


def test_under_a_profiler_leaving_is_left_to_python_so_the_profile_is_written():
    profiled = LEAVING.format(before="sys.setprofile(lambda *a: None)")
    done = subprocess.run([sys.executable, "-c", profiled], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    # The function returned; the threads race "returned" for the output, so only order vs atexit
    assert done.stdout.startswith("buffered ") and done.stdout.endswith("atexit ran\n"), done.stdout
    assert "returned\n" in done.stdout, done.stdout
    assert sorted(done.stdout.replace("returned\n", "").split()) == sorted(
        "buffered thread done executor done atexit ran".split()
    ), done.stdout
