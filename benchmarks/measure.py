"""What every attention benchmark measures the same way (benchmarks/*_attention.py).

Memory: ``peak_mib_above`` runs one warm step, resets the kernel's peak-RSS counter
(``/proc/self/clear_refs``) and reports the peak of one more step above the RSS before it; the
process runs with glibc's mmap threshold pinned (``run_child`` with kind "memory"), so freed
tensors leave the resident set and the peak follows live memory. Time: ``median_seconds`` warms
every variant once, then alternates them for ``repeats`` rounds and takes each one's median.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

PINNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "65536"}


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key))


def peak_mib_above(step) -> float:
    """Peak live memory (MiB) of one warm ``step()`` above the memory before it."""
    step()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS
    before = _status_kib("VmRSS:")
    step()
    return (_status_kib("VmHWM:") - before) / 1024


def median_seconds(step, variants, repeats: int) -> dict:
    """Median seconds of ``step(variant)`` per variant, the variants interleaved."""
    times = {v: [] for v in variants}
    for v in variants:
        step(v)  # warm-up
    for _ in range(repeats):
        for v in variants:
            t0 = time.perf_counter()
            step(v)
            times[v].append(time.perf_counter() - t0)
    return {v: statistics.median(t) for v, t in times.items()}


def run_child(script: str, task: dict) -> dict:
    """Run one measurement of ``script`` (``--child TASK``) in a fresh process: its own peak, its
    own allocator state; a memory task gets the pinned malloc thresholds."""
    env = {**os.environ, **(PINNED_MALLOC if task["kind"] == "memory" else {})}
    cmd = [sys.executable, script, "--child", json.dumps(task)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"{task}: {done.stderr.strip().splitlines()[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
