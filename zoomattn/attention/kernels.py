"""Which attention path a method runs: the reference (torch) path or its fused GPU kernel.

Every method that changes attention (OpAmp, rectification, LKG-RALM's fusion) has a reference
path in torch, the one the CPU always runs and the one the tests hold every kernel to, and a fused
path written for CUDA (a single stacked SDPA call, a Triton kernel, FlexAttention). The config's
``attention_kernels`` (``reference`` or ``fused``) picks between them for a whole job; the choice
is made here, per call, from that setting and the tensors' device, so each method's kernel file
asks ``choose`` at its one dispatch point and nowhere else.

``fused`` takes effect on CUDA only: on any other device the reference path runs (the fused
kernels run on the CPU only through Triton's interpreter, for the tests, which call them
directly). Every choice is remembered per method (``paths_run``) so the job can log and record
in MLflow which path actually ran.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

SETTINGS = ("reference", "fused")
REFERENCE, FUSED = SETTINGS

_setting = REFERENCE
_ran: dict[str, set[str]] = {}


def configure(setting: str) -> None:
    """Set the job's ``attention_kernels`` and forget which paths ran before."""
    global _setting
    if setting not in SETTINGS:
        raise ValueError(f"attention_kernels: one of {', '.join(SETTINGS)}, got {setting!r}")
    _setting = setting
    _ran.clear()


def setting() -> str:
    return _setting


@contextlib.contextmanager
def using(setting: str) -> Iterator[None]:
    """Run a block under another setting (benchmarks, tests); restores the previous one."""
    previous, ran = _setting, {m: set(p) for m, p in _ran.items()}
    configure(setting)
    try:
        yield
    finally:
        configure(previous)
        _ran.update(ran)


def choose(method: str, device: torch.device) -> str:
    """The path ``method``'s attention takes for tensors on ``device``: fused only on CUDA."""
    path = FUSED if _setting == FUSED and device.type == "cuda" else REFERENCE
    _ran.setdefault(method, set()).add(path)
    return path


def paths_run() -> dict[str, str]:
    """Per method, the path(s) its attention ran since ``configure`` ("fused+reference" if both)."""
    return {m: "+".join(sorted(p)) for m, p in sorted(_ran.items())}
