"""benchmarks/distributed_overhead.py: its smoke run (CPU, gloo, tiny shapes: a check of the script,
not a measurement) as a user runs it, and the paper jobs' estimates the README prints."""

import json
import os
import subprocess
import sys

import pytest

from zoomattn.config import ROOT

SCRIPT = ROOT / "benchmarks" / "distributed_overhead.py"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import distributed_overhead

    return distributed_overhead


def test_smoke_trains_as_one_process_and_under_torchrun_and_writes_the_ratio(tmp_path):
    cmd = [sys.executable, str(SCRIPT), "--smoke", "--steps", "2", "--out", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's zoomattn
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    data = json.loads((tmp_path / "distributed_overhead.json").read_text())
    single, torchrun = data["modes"]
    assert (single["mode"], single["backend"]) == ("single", "none")
    assert (torchrun["backend"], torchrun["launcher"]) == (
        "gloo",
        "torchrun --standalone --nproc_per_node 1",
    )
    assert single["timed_steps"] == torchrun["timed_steps"] == 1
    assert data["ratio"] == pytest.approx(torchrun["tokens_per_s"] / single["tokens_per_s"])
    assert data["meta"]["device"].startswith("CPU") and data["meta"]["smoke"]
    md = (tmp_path / "distributed_overhead.md").read_text()
    assert data["meta"]["device"] in md and f"{data['ratio']:.3f}" in md


def test_throughput_counts_the_steps_after_the_warm_up(bench):
    got = bench.throughput([10.0, 11.0, 13.0, 15.0], warmup=2, tokens_per_step=100)
    assert got == {"timed_steps": 2, "seconds": 4.0, "tokens_per_s": 50.0}


def test_the_readme_prints_the_estimates_computed_from_the_config(bench):
    rows = {(r["study"], r["method"]): r for r in bench.paper_estimates()}
    opamp = rows[("opamp", "opamp")]
    assert opamp["gpus"] == 8 and opamp["tokens"] == 7800 * 128 * 16384  # authors_code
    assert opamp["gpu_hours_per_job"] == pytest.approx(opamp["tokens"] / 4200 / 3600)
    assert rows[("mudaf", "mudaf")]["gpu_hours_per_job"] is None  # full fine-tune: not measured
    table = bench.estimates_markdown(list(rows.values()))
    assert table in (ROOT / "README.md").read_text(), "README: rerun --estimate"
