"""The fused kernels' GPU benchmarks (benchmarks/rectified_triton.py, opamp_triton.py and the
tile_sweep.py they share) run end to end in their ``--smoke`` mode: Triton's interpreter on a tiny
shape, a check of the scripts a GPU session runs, not a measurement."""

import json
import os
import subprocess
import sys

import pytest

from zoomattn.config import ROOT


def _smoke(script: str, *args: str) -> list[dict]:
    cmd = [sys.executable, str(ROOT / "benchmarks" / script), "--smoke", *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's zoomattn
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_opamp_benchmark_times_the_kernel_beside_the_stacked_call_and_agrees_with_it():
    row, summary = _smoke("opamp_triton.py", "--padded", "0.25")
    assert row["n"] == 40 and row["triton_vs_stacked_rel_error"] < 2e-2  # bf16 outputs
    assert {"sdpa_ms", "stacked_ms", "triton_ms", "triton_time_vs_sdpa"} <= set(row)
    assert "padded=0.25" in summary["shape"] and summary["40"]["triton_time_vs_sdpa"] > 0


def test_a_sweep_out_of_time_keeps_the_table_and_records_every_candidate_untried(tmp_path):
    out = tmp_path / "tiles.json"
    _smoke("rectified_triton.py", "--sweep", "--budget-s", "0", "--out", str(out))
    result = json.loads(out.read_text())
    assert result["best"] == result["table"] and result["best_vs_table_rel_error"] == 0.0
    assert {r["status"] for r in result["tried"]} == {"not tried: out of time"}
    assert {r["kernel"] for r in result["tried"]} == {"forward", "kv", "q"}


@pytest.mark.parametrize(
    ("mode", "key"),
    [([], "fused_time_vs_sdpa"), (["--decode", "2"], "fused_decode_vs_blockwise"),
     (["--profile"], "forward_fused_vs_sdpa"), (["--libdevice-log"], "fused_time_vs_sdpa")],
)  # fmt: skip
def test_rectification_benchmark_runs_each_mode_and_summarises_its_ratios(mode, key):
    *rows, summary = _smoke("rectified_triton.py", "--padded", "0.25", *mode)
    assert [r["n"] for r in rows] == [40] and summary["40"][key] > 0
    assert "g=max" in summary["shape"]
