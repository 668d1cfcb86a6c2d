"""benchmarks/gpu_checks.sh, the script a GPU session runs: every gpu lane step's selection of tests
exists (a file renamed or a ``-k`` that matches nothing would cost a session's minutes and say
nothing). The steps that select with ``-k`` run through the script's own commands with pytest's
``--collect-only``; the others name test files, which must exist."""

import re
import subprocess
import sys

from zoomattn.config import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu_checks.sh"


def _lane_steps() -> dict[str, str]:
    """Each lane step's name and its command, continuation lines joined."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    return dict(re.findall(r'^step (lane_\w+) \d+ "\$\{lane\[@\]\}" (.*)$', text, re.M))


def test_every_gpu_lane_step_names_test_files_that_exist():
    steps = _lane_steps()
    assert "lane_switches" in steps and len(steps) >= 9
    for name, command in steps.items():
        files = re.findall(r"tests/gpu/\S+\.py", command)
        assert files and all((ROOT / f).is_file() for f in files), (name, command)


def test_every_gpu_lane_step_that_selects_with_k_collects_tests(tmp_path):
    selecting = [name for name, command in _lane_steps().items() if " -k " in command]
    assert "lane_switches" in selecting
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHON": sys.executable,
        "STEPS": " ".join(selecting),
        "LANE_EXTRA": "--collect-only",
        "ZOOMATTN_GPU_LANE_DEVICE": "cpu",
    }
    subprocess.run(["bash", str(SCRIPT), str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                   text=True, timeout=600)  # fmt: skip
    summary = (tmp_path / "summary.txt").read_text()
    log = (tmp_path / "checks.log").read_text()
    for step in selecting:
        assert re.search(rf"^{step} rc=0 ", summary, re.M), (step, summary)
        section = log.split(f"=== {step} ")[1].split("\n=== ")[0]
        collected = re.search(r"^(\d+)(?:/\d+)? tests? collected", section, re.M)
        assert collected and int(collected.group(1)) > 0, (step, section[-2000:])


def test_every_term_of_a_lane_steps_k_selection_matches_some_test():
    """``-k "a or b"`` collects tests while ``b`` matches none: each term on its own must name
    some test of the step's files (pytest's -k matches a test's name, case-insensitively), the
    words of ``a and not c`` each (an exclusion that names nothing excludes nothing)."""
    terms, files = {}, set()
    for name, command in _lane_steps().items():
        selection = re.search(r'-k (?:"([^"]+)"|(\S+))', command)
        if selection:
            for term in re.split(r" or | and not | and ", selection.group(1) or selection.group(2)):
                terms[term.strip()] = name
            files.update(re.findall(r"tests/gpu/\S+\.py", command))
    assert {
        "key_span",
        "key_rows",
        "replayed",
        "rows_apart",
        "score_mod",
        "padding_spans",
    } <= set(terms)
    env = {"PATH": "/usr/bin:/bin", "ZOOMATTN_GPU_LANE_DEVICE": "cpu"}
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", *sorted(files)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    tests = [line.lower() for line in done.stdout.splitlines() if "::" in line]
    assert tests, done.stdout[-2000:] + done.stderr[-2000:]
    for term, step in terms.items():
        assert any(term.lower() in t for t in tests), (step, term)


def test_every_lkg_step_times_variants_the_benchmark_has_sdpa_first():
    """A variant the CUDA benchmark does not know would end its step at argument parsing, a
    session's minutes for nothing."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import relevance_fusion_cuda

    text = SCRIPT.read_text().replace("\\\n", " ")
    steps = re.findall(r"^step (\w+) .*relevance_fusion\.py --cuda .*--variants ([\w ]+)$", text,
                       re.M)  # fmt: skip
    assert {"lkg_heads", "lkg_tiles", "lkg_spans"} <= {name for name, _ in steps}
    for name, variants in steps:
        names = variants.split()
        assert names[0] == "sdpa" and set(names) <= set(relevance_fusion_cuda.VARIANTS), name
