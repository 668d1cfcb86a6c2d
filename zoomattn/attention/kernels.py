"""Which attention path a method runs: the reference (torch) path or its fused GPU kernel.

Every method that changes attention (OpAmp, rectification, LKG-RALM's fusion) has a reference
path in torch, the one the CPU always runs and the one the tests hold every kernel to, and a fused
path written for CUDA (a single stacked SDPA call, a Triton kernel, FlexAttention). The config's
``attention_kernels`` picks between them for a whole job: ``reference`` or ``fused`` for every
method, or a mapping of methods to either (``{rectify: fused, lkg: fused}``; a method it leaves
out runs its reference). The choice is made here, per call, from that setting and the tensors'
device, so each method's kernel file asks ``choose`` at its one dispatch point and nowhere else.

``plain`` names every call of ``math.sdpa``: a layer without a zoom module, LKG-RALM's plain
heads, rectification at ξ = 0, OpAmp's stacked call and its ``recompute``/``plain`` branches.
Its fused path runs a batch that is only right-padded (training's, scoring's, MuDAF's
contrastive passes) as causal SDPA without the mask, where CUDA's flash kernel takes the call
(fp16/bf16, head dim ≤ 256): on CUDA a boolean mask takes SDPA off flash, and under right
padding a real row's causal keys are all real, so every real row's output is the same; only the
padded rows, which nothing reads, then see the padded keys before them. Since it changes those
rows, only a mapping turns it on (``{plain: fused}``), not ``fused`` alone; off by default until
a GPU times it.

``fused`` takes effect on CUDA only: on any other device the reference path runs (the fused
kernels run on the CPU only through Triton's interpreter, for the tests, which call them
directly). A method may also decline its fused path for a call it does not suit, naming why
(rectification's one-query decoding steps). Every choice is remembered per method
(``paths_run``) so the job can log and record in MLflow which path actually ran.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch-free at import: the workflow's specs read the setting
    import torch

SETTINGS = ("reference", "fused")
REFERENCE, FUSED = SETTINGS
METHODS = ("opamp", "rectify", "lkg")  # the methods with a fused path
PLAIN = "plain"  # every call of math.sdpa (module docstring)
NAMED = (*METHODS, PLAIN)  # what a mapping may name

_setting: str | dict = REFERENCE
_per_method: dict[str, str] = dict.fromkeys(NAMED, REFERENCE)
_ran: dict[str, set[str]] = {}


def per_method(setting: str | dict) -> dict[str, str]:
    """``attention_kernels`` as one path per method (every name in ``NAMED``; a single path is
    every method's, ``plain`` left reference); an unknown method or path is refused naming the
    key."""
    if isinstance(setting, str):
        setting = dict.fromkeys(METHODS, setting)
    elif not isinstance(setting, dict):
        raise ValueError(f"attention_kernels: reference, fused or a mapping, got {setting!r}")
    for method, path in setting.items():
        if method not in NAMED:
            raise ValueError(f"attention_kernels.{method}: no fused path (known: {NAMED})")
        if path not in SETTINGS:
            raise ValueError(
                f"attention_kernels.{method}: one of {', '.join(SETTINGS)}, got {path!r}"
            )
    return {m: setting.get(m, REFERENCE) for m in NAMED}


def is_reference(setting: str | dict) -> bool:
    """True when the setting runs every method's reference path (the default)."""
    return set(per_method(setting).values()) == {REFERENCE}


def configure(setting: str | dict) -> None:
    """Set the job's ``attention_kernels`` and forget which paths ran before."""
    global _setting, _per_method
    _per_method = per_method(setting)
    _setting = setting
    _ran.clear()


def setting() -> str | dict:
    return _setting


@contextlib.contextmanager
def using(setting: str | dict) -> Iterator[None]:
    """Run a block under another setting (benchmarks, tests); restores the previous one."""
    previous, ran = _setting, {m: set(p) for m, p in _ran.items()}
    configure(setting)
    try:
        yield
    finally:
        configure(previous)
        _ran.update(ran)


def requested(method: str) -> bool:
    """Whether the setting asks for ``method``'s fused path (on any device)."""
    return _per_method.get(method, REFERENCE) == FUSED


def choose(method: str, device: torch.device, declined: str | None = None) -> str:
    """The path ``method``'s attention takes for tensors on ``device``: fused only on CUDA, and
    not where the method declines it for this call (``declined``, the reason: rectification's
    decoding steps), which is recorded as ``reference (<reason>)``."""
    fused = requested(method) and device.type == "cuda"
    path = FUSED if fused and declined is None else REFERENCE
    _ran.setdefault(method, set()).add(f"{REFERENCE} ({declined})" if fused and declined else path)
    return path


def paths_run() -> dict[str, str]:
    """Per method, the path(s) its attention ran since ``configure`` ("fused+reference" if both;
    "fused+reference (decoding)" where the method declined some calls)."""
    return {m: "+".join(sorted(p)) for m, p in sorted(_ran.items())}
