import subprocess
import sys

from zoomattn.config import ROOT


def test_code_passes_ruff_lint_and_format():
    paths = ["zoomattn", "tests", "benchmarks"]
    for args in (["check", *paths], ["format", "--check", *paths]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_snakemake_lint_finds_nothing_to_fix(tmp_path):
    """`snakemake --lint` exits 1 on any lint (a rule's shell using a global, an unasserted
    environment variable, functions beside rules); run on a copy, as it writes a log."""
    from tests.workflow.scratch import copy_workflow, snakemake

    done = snakemake(copy_workflow(tmp_path), "--lint", check=False)
    assert done.returncode == 0, done.stdout + done.stderr
