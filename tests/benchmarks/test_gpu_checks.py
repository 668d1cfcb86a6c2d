"""benchmarks/gpu_checks.sh, the script a GPU session runs: every gpu lane step's selection of tests
collects some (a file renamed or a ``-k`` that matches nothing would cost a session's minutes and
say nothing), checked with pytest's ``--collect-only`` through the script's own commands."""

import re
import subprocess
import sys

from zoomattn.config import ROOT


def test_every_gpu_lane_step_selects_tests_that_exist(tmp_path):
    script = (ROOT / "benchmarks" / "gpu_checks.sh").read_text()
    steps = re.findall(r"^step (lane_\w+) ", script, re.M)
    assert "lane_switches" in steps and len(steps) >= 9
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHON": sys.executable,
        "STEPS": " ".join(steps),
        "LANE_EXTRA": "--collect-only",
        "BUDGET_S": "600",
        "ZOOMATTN_GPU_LANE_DEVICE": "cpu",
    }
    subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_checks.sh"), str(tmp_path)], cwd=ROOT,
                   env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    summary = (tmp_path / "summary.txt").read_text()
    log = (tmp_path / "checks.log").read_text()
    for step in steps:
        assert re.search(rf"^{step} rc=0 ", summary, re.M), (step, summary)
        section = log.split(f"=== {step} ")[1].split("\n=== ")[0]
        collected = re.search(r"^(\d+)(?:/\d+)? tests? collected", section, re.M)
        assert collected and int(collected.group(1)) > 0, (step, section[-2000:])
