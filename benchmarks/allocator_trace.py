"""Where a step's CUDA memory goes: one call under the caching allocator's history (``traced``),
the snapshot kept, and the largest blocks live at the trace's peak with the lines of our code that
allocated them (``live_at_peak``). ``tile_sweep.timed_variants`` runs it for ``--memory-trace``."""

from __future__ import annotations

import os
import pickle

import torch


def live_at_peak(trace: list[dict], top: int = 8) -> tuple[float, list[dict]]:
    """Replaying an allocator trace (``torch.cuda.memory._snapshot()["device_traces"][d]``, events
    in order): the peak of the bytes allocated during it (MiB), and the ``top`` largest blocks
    live at that peak, each with its MiB and where our code (zoomattn, benchmarks) allocated it.
    A block freed but allocated before the trace began is not counted."""
    live, now, peak, at_peak = {}, 0, 0, {}
    for event in trace:
        if event["action"] == "alloc":
            live[event["addr"]] = event
            now += event["size"]
        elif event["action"] in ("free_requested", "free_completed") and event["addr"] in live:
            now -= live.pop(event["addr"])["size"]
        if now > peak:
            peak, at_peak = now, dict(live)
    blocks = sorted(at_peak.values(), key=lambda e: -e["size"])[:top]
    return peak / 2**20, [{"mib": e["size"] / 2**20, "where": _ours(e["frames"])} for e in blocks]


def _ours(frames: list[dict]) -> str:
    """The innermost three frames in our code, innermost first (else the innermost frame). A block
    with no Python frame came from C++ with no Python caller, such as a backward that autograd's
    engine runs on its own thread (the stacks are recorded as "python": C++'s slow the step)."""
    if not frames:
        return "no Python frame (C++: a backward op, say)"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    mine = [
        f for f in frames if f["filename"].startswith(root) and "-packages" not in f["filename"]
    ]
    shown = mine[:3] or frames[:1]
    return " < ".join(f"{os.path.basename(f['filename'])}:{f['line']} {f['name']}" for f in shown)


def traced(fn, path: str) -> dict:
    """One call of ``fn`` under CUDA's allocator history: the snapshot pickled to ``path`` (for
    pytorch.org/memory_viz or a later look) and ``live_at_peak`` of it."""
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(stacks="python", max_entries=200_000)
    try:
        fn()
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(snapshot, f)
    peak, blocks = live_at_peak(snapshot["device_traces"][torch.cuda.current_device()])
    return {"traced_peak_mib": peak, "live_at_peak": blocks, "snapshot": path}
