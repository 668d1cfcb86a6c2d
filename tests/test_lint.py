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
