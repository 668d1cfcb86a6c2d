"""benchmarks/gpu_checks.sh, the script a GPU session runs: every gpu lane step's selection of tests
exists (a file renamed or a ``-k`` that matches nothing would cost a session's minutes and say
nothing). The steps that select with ``-k`` run through the script's own commands, each one's
pytest arguments then collected (``--collect-only``); the others name test files, which must
exist. Every benchmark call of the script, likewise recorded, parses by its benchmark's own
arguments."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests import bare_image
from zoomattn.config import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu_checks.sh"


def _lane_steps() -> dict[str, str]:
    """Each lane step's name and its command, continuation lines joined."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    return dict(re.findall(r'^step (lane_\w+) \d+ "\$\{lane\[@\]\}" (.*)$', text, re.M))


def _steps() -> list[str]:
    """Every step's name, in the script's order."""
    return re.findall(r"^step (\w+) ", SCRIPT.read_text(), re.M)


def _recorder(tmp_path, prelude: str):
    """A stand-in for the script's python, and the file it records to: the shell ``prelude``
    ends the calls it does not record (``exit``) and may shift arguments; every other call
    appends its arguments, as the shell passed them, to the record as one JSON list."""
    record, recorder = tmp_path / "arguments.jsonl", tmp_path / "python"
    recorder.write_text(
        f"#!/bin/sh\n{prelude}"
        f"{shlex.quote(sys.executable)} -I -c 'import json, sys; print(json.dumps(sys.argv[1:]))'"
        f' "$@" >> {shlex.quote(str(record))}\n'
    )
    recorder.chmod(0o755)
    return recorder, record


def test_every_gpu_lane_step_names_test_files_that_exist():
    steps = _lane_steps()
    assert "lane_switches" in steps and len(steps) >= 9
    for name, command in steps.items():
        files = re.findall(r"tests/gpu/\S+\.py", command)
        assert files and all((ROOT / f).is_file() for f in files), (name, command)


def test_every_gpu_lane_step_that_selects_with_k_collects_tests(tmp_path):
    """The script runs each selecting step as it would on the card, with a recorder for its
    python: it keeps the arguments pytest would have got (the shell's quoting and all) and fails
    every other call (so the script's probe finds the project's packages absent, as on the bare
    image, which none of these steps needs). One process then collects every recorded selection
    (tests/benchmarks/lane_selections.py), which must select tests."""
    selecting = [name for name, command in _lane_steps().items() if " -k " in command]
    assert "lane_switches" in selecting
    recorder, record = _recorder(tmp_path, '[ "$1 $2" = "-m pytest" ] || exit 1\nshift 2\n')
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHON": str(recorder),
        "STEPS": " ".join(selecting),
    }
    subprocess.run(["bash", str(SCRIPT), str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                   text=True, timeout=600)  # fmt: skip
    ran = re.findall(r"^(\w+) rc=0 ", (tmp_path / "summary.txt").read_text(), re.M)
    assert ran == selecting, (tmp_path / "summary.txt").read_text()
    counts = tmp_path / "selected.txt"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ZOOMATTN_GPU_LANE_DEVICE": "cpu"}
    done = subprocess.run([sys.executable, str(ROOT / "tests/benchmarks/lane_selections.py"),
                           str(record), str(counts)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for step, line in zip(selecting, counts.read_text().splitlines(), strict=True):
        status, selected = map(int, line.split())
        assert status == 0 and selected > 0, (step, line, done.stdout[-3000:])


def test_every_term_of_a_lane_steps_k_selection_matches_some_test():
    """``-k "a or b"`` collects tests while ``b`` matches none: each term on its own must name
    some test of the step's files (pytest's -k matches a test's name, case-insensitively), the
    words of ``a and not c`` and of ``not a`` each (an exclusion that names nothing excludes
    nothing)."""
    terms, files = {}, set()
    for name, command in _lane_steps().items():
        selection = re.search(r'-k (?:"([^"]+)"|(\S+))', command)
        if selection:
            for term in re.split(r" or | and not | and ", selection.group(1) or selection.group(2)):
                terms[term.strip().removeprefix("not ")] = name
            files.update(re.findall(r"tests/gpu/\S+\.py", command))
    assert {
        "key_span",
        "key_rows",
        "replayed",
        "rows_apart",
        "score_mod",
        "padding_spans",
        "checkpointing",
    } <= set(terms)
    env = {"PATH": "/usr/bin:/bin", "ZOOMATTN_GPU_LANE_DEVICE": "cpu"}
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", *sorted(files)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    tests = [line.lower() for line in done.stdout.splitlines() if "::" in line]
    assert tests, done.stdout[-2000:] + done.stderr[-2000:]
    for term, step in terms.items():
        assert any(term.lower() in t for t in tests), (step, term)


def test_every_benchmark_command_of_the_script_parses(tmp_path):
    """A flag misspelt or a ``--tiles`` JSON mis-quoted would end its step at argument parsing on
    the card, a session's minutes for nothing. The script runs every step with a recorder for its
    python: the package probe and the lane's pytest calls succeed and record nothing, every
    benchmark call records its arguments as the shell passed them (through benchmarks/each.sh for
    the A/B steps). One process then hands each recorded call to its script's own parser
    (tests/benchmarks/benchmark_arguments.py)."""
    recorder, record = _recorder(tmp_path, 'case "$1" in -m|-c) exit 0;; esac\n')
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHON": str(recorder),
           "BUDGET_S": "100000"}  # fmt: skip
    subprocess.run(["bash", str(SCRIPT), str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                   text=True, timeout=300)  # fmt: skip
    summary = (tmp_path / "summary.txt").read_text()
    assert re.findall(r"^(\w+) rc=0 ", summary, re.M) == _steps(), summary
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    a_b = [call for call in calls if "--kv-keys-as-rows" in call and "--tiles" in call]
    assert {json.dumps(json.loads(c[c.index("--tiles") + 1])) for c in a_b} == {
        '{"kv": [16, 64, 4, 2]}',
        '{"kv": [16, 128, 8, 2]}',
    }  # the JSON as the shell's quoting passed it
    scripts = {Path(script).name for script, *_ in calls}
    assert {"rectified_triton.py", "opamp_triton.py", "gpu_paper.py"} <= scripts, scripts
    verdicts = tmp_path / "verdicts.txt"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "tests/benchmarks/benchmark_arguments.py"),
                           str(record), str(verdicts)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    refused = [
        (call, verdict)
        for call, verdict in zip(calls, verdicts.read_text().splitlines(), strict=True)
        if verdict != "ok"
    ]
    assert not refused, refused


def test_each_runs_every_command_past_a_failing_one_and_exits_with_the_first_failure():
    done = subprocess.run(["bash", str(ROOT / "benchmarks/each.sh"), "exit 3", "echo ran",
                           "echo 'quoted words'; exit 5"], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 3 and done.stdout == "ran\nquoted words\n", done
    assert "status 3 from: exit 3" in done.stderr and "status 5 from: echo" in done.stderr


def test_an_a_b_steps_failed_variants_are_named_under_its_line_in_the_summary(tmp_path):
    """The summary a session reads first says which of an A/B step's variants failed, not only
    the step's status (the first failure's), and the variant after the failure still ran."""
    stand_in = tmp_path / "python"
    stand_in.write_text('#!/bin/sh\necho "ran $*"\n'
                        'case " $* " in *" --no-skip-padded-rows "*) exit 3;; esac\n')  # fmt: skip
    stand_in.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(stand_in), "STEPS": "rectify_skip_ab"}
    subprocess.run(["bash", str(SCRIPT), str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                   text=True, timeout=60)  # fmt: skip
    summary = (tmp_path / "summary.txt").read_text()
    step = re.search(r"^rectify_skip_ab rc=3 \d+s\n  each.sh: status 3 from: .*\n", summary, re.M)
    assert step and step.group(0).rstrip().endswith("--no-skip-padded-rows"), summary
    assert summary.count("each.sh:") == 1
    log = (tmp_path / "checks.log").read_text()
    ran = re.findall(r"^ran benchmarks/rectified_triton.py .*", log, re.M)
    assert len(ran) == 2 and ran[1].endswith(" --skip-padded-rows"), ran  # the one after it too


def test_a_step_name_that_is_no_steps_is_refused_with_the_steps_named(tmp_path):
    """A misspelt name in STEPS would otherwise run nothing and say nothing: a session's call
    spent on the machine's start-up alone."""
    env = {"PATH": "/usr/bin:/bin", "PYTHON": "/bin/false", "STEPS": "lane_attention lkg_tile"}
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "no step is named lkg_tile;" in done.stderr, done
    assert " lkg_tiles lkg_autotune " in done.stderr and not (tmp_path / "summary.txt").exists()


def test_every_step_list_of_the_docs_names_steps_of_the_script():
    """The step lists a session copies from docs/kernels.md ("What to run first", the whole set,
    each ``STEPS="..."``) and the README's."""
    steps, named = set(_steps()), []
    for doc in (ROOT / "docs/kernels.md", ROOT / "README.md"):
        text = doc.read_text().replace("\\\n", " ")
        named += [n for group in re.findall(r'STEPS="([a-z0-9_ ]+)"', text) for n in group.split()]
        named += [n for group in re.findall(r"^ +\d\. `([a-z0-9_ ]+)`", text, re.M)
                  for n in group.split()]  # fmt: skip
    assert len(set(named)) >= 31 and set(named) <= steps, sorted(set(named) - steps)


def test_every_lkg_step_times_variants_the_benchmark_has_sdpa_first():
    """A variant the CUDA benchmark does not know would end its step at argument parsing, a
    session's minutes for nothing."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import relevance_fusion_cuda

    text = SCRIPT.read_text().replace("\\\n", " ")
    steps = re.findall(r"^step (\w+) .*relevance_fusion\.py --cuda .*--variants ([\w ]+)$", text,
                       re.M)  # fmt: skip
    assert {"lkg_heads", "lkg_tiles", "lkg_autotune", "lkg_spans"} <= {name for name, _ in steps}
    for name, variants in steps:
        names = variants.split()
        assert names[0] == "sdpa" and set(names) <= set(relevance_fusion_cuda.VARIANTS), name


def _needs_install() -> set[str]:
    return set(re.search(r'^NEEDS_INSTALL="([^"]*)"', SCRIPT.read_text(), re.M).group(1).split())


def _bare_python(tmp_path) -> str:
    """An interpreter for the script's PYTHON that runs as the device tool's bare image would."""
    wrapper = tmp_path / "bare-python"
    wrapper.write_text(f'#!/bin/sh\nexec {" ".join(bare_image.RUN)} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_the_first_calls_steps_exist_and_need_no_install():
    text = SCRIPT.read_text().replace("\\\n", " ")
    first = re.search(r'^FIRST="([^"]*)"', text, re.M).group(1).split()
    steps = dict(re.findall(r"^step (\w+) (\d+) ", text, re.M))
    assert first and set(first) <= set(steps) and not set(first) & _needs_install()
    assert sum(int(steps[name]) for name in first) <= 570  # the budget its comment names


def test_on_the_bare_image_only_the_steps_needing_install_are_skipped_and_said_so(tmp_path):
    """Without the project's packages the NEEDS_INSTALL steps are skipped with the reason,
    the others run (a lane step collects its tests), and the summary names what is absent."""
    needs = _needs_install()
    assert needs == {"attention", "overhead", "lane_distributed", "lane_methods", "lane_small_dag"}
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHON": _bare_python(tmp_path),
        "STEPS": " ".join([*sorted(needs), "lane_rectify_triton"]),
        "LANE_EXTRA": "--collect-only",
        "ZOOMATTN_GPU_LANE_DEVICE": "cpu",
    }
    # and with the packages (this machine's interpreter) such a step runs: the probe finds them;
    # both runs of the script at once
    installed = {**env, "PYTHON": sys.executable, "STEPS": "lane_methods"}
    bare_out, installed_out = tmp_path / "bare", tmp_path / "installed"
    running = [
        subprocess.Popen(["bash", str(SCRIPT), str(out)], cwd=ROOT, env=run_env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for out, run_env in ((bare_out, env), (installed_out, installed))
    ]  # fmt: skip
    for process in running:
        process.wait(timeout=300)
    summary = (bare_out / "summary.txt").read_text()
    assert "bitsandbytes absent" in summary and "mlflow absent" in summary, summary
    for step in needs:
        assert re.search(rf"^{step} skipped: needs the project's packages", summary, re.M), summary
    assert re.search(r"^lane_rectify_triton rc=0 ", summary, re.M), summary
    assert re.search(r"^\d+ tests? collected", (bare_out / "checks.log").read_text(), re.M)
    summary = (installed_out / "summary.txt").read_text()
    assert re.search(r"^lane_methods rc=0 ", summary, re.M) and "absent" not in summary, summary


def test_every_other_lane_steps_tests_collect_on_the_bare_image():
    files = {
        f
        for name, command in _lane_steps().items()
        if name not in _needs_install()
        for f in re.findall(r"tests/gpu/\S+\.py", command)
    }
    assert "tests/gpu/test_lkg_flex_tiles_on_cuda.py" in files
    env = {"PATH": "/usr/bin:/bin", "ZOOMATTN_GPU_LANE_DEVICE": "cpu", "PYTHONPATH": str(ROOT)}
    cmd = [*bare_image.RUN, "-m", "pytest", "--collect-only", "-q",
           "-p", "no:cacheprovider", *sorted(files)]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_every_other_steps_benchmark_imports_on_the_bare_image(tmp_path):
    """The benchmarks the other steps run import without the project's packages (their smoke
    runs do too: tests/benchmarks/test_kernel_benchmarks.py); the installing steps' do not."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    needing = {
        script
        for name, command in re.findall(r"^step (\w+) \S+ (.*)$", text, re.M)
        if name in _needs_install()
        for script in re.findall(r"(?<!tests/)benchmarks/(\w+)\.py", command)
    }
    scripts = set(re.findall(r"(?<!tests/)benchmarks/(\w+)\.py", text)) - needing
    assert needing == {"distributed_overhead", "gpu_paper"}
    assert {"rectified_triton", "opamp_triton", "opamp_stacked", "relevance_fusion"} <= scripts
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # as the script sets it
    # the LKG-RALM steps' benchmark imports the method when it builds its steps
    build = "import sys; sys.path.insert(0, 'benchmarks'); import relevance_fusion_cuda as r; "
    build += "r.steps(n=64, heads=32, kv_heads=8, head_dim=16, passage=16, device='cpu')"

    helps = [[f"benchmarks/{script}.py", "--help"] for script in sorted(scripts)]
    refused = [
        ["benchmarks/distributed_overhead.py", "--smoke", "--out", str(tmp_path)],
        ["benchmarks/gpu_paper.py", "--smoke", "--attention-only", "--out", str(tmp_path)],
    ]
    checked = [*helps, ["-c", build]]
    running = [  # all at once: each a process of its own, mostly its imports
        subprocess.Popen(
            [*bare_image.RUN, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in [*checked, *refused]
    ]
    done = [(process.communicate(timeout=300)[1], process.returncode) for process in running]
    for command, (stderr, status) in zip(checked, done[: len(checked)], strict=True):
        assert status == 0, (command, stderr[-2000:])
    for command, (stderr, _) in zip(refused, done[len(checked) :], strict=True):
        assert "not on the bare image" in stderr, command  # why NEEDS_INSTALL holds it
