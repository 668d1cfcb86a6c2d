"""Data stages: the synthetic world, training sets and eval sets.

A spec with a ``study`` is a study's own set, golden documents plus hard distractors
(``build_distractor_set``); without one it is a set of the shared data: the training set of the
preset's ``data``, or a shared benchmark at a noise ratio (zoomattn/specs.py builds both)."""

from __future__ import annotations

import logging
from pathlib import Path

from zoomattn.tracking import job_run

log = logging.getLogger("zoomattn")


def world(spec: dict, out: Path, results: Path) -> None:
    from zoomattn.data.build import build_world

    with job_run(spec, "data", "world", results) as run:
        manifest = build_world(spec, out)
        run.log_metrics({"vocab_size": manifest["vocab_size"]})
        run.log_artifacts(out / "manifest.json")


def train_data(spec: dict, world_dir: Path | None, out: Path, results: Path) -> None:
    from zoomattn.data.build import build_real_train, build_train

    if spec.get("study"):
        return _distractor_set(spec, world_dir, out, results)
    with job_run(spec, "data", "train", results) as run:
        if world_dir is None:
            manifest = build_real_train(spec, out)
        else:
            manifest = build_train(spec, world_dir, out)
        run.log_metrics({"examples": manifest["examples"]})
        run.log_artifacts(out / "manifest.json")


def eval_data(spec: dict, world_dir: Path | None, out: Path, results: Path) -> None:
    from zoomattn.data.build import build_eval, build_real_eval

    if spec.get("study"):
        return _distractor_set(spec, world_dir, out, results)
    name = f"{spec['benchmark']}@{spec['noise_ratio']:g}"
    with job_run(spec, "data", name, results) as run:
        if world_dir is None:
            manifest = build_real_eval(spec, spec["benchmark"], spec["noise_ratio"], out)
        else:
            manifest = build_eval(spec, world_dir, spec["benchmark"], spec["noise_ratio"], out)
        run.log_metrics({"examples": manifest["examples"]})
        run.log_artifacts(out / "manifest.json")


def _distractor_set(spec: dict, world_dir: Path | None, out: Path, results: Path) -> None:
    """A study's own training or eval set (data/build.py: build_distractor_set)."""
    from zoomattn.data.build import build_distractor_set

    # The set's directory names its split (vanilla, reverse, n4, irr1, r0.9): the spec does not
    # (every robustness and noise split lays documents out as vanilla; irr0 and n<passages> are
    # the same spec), and one run name per job keeps runs apart in the UI.
    name = f"{spec.get('benchmark', 'train')}@{out.name}"
    with job_run(spec, "data", f"{spec['study']}/{name}", results) as run:
        manifest = build_distractor_set(spec, world_dir, out)
        run.log_metrics({"examples": manifest["examples"]})
        run.log_artifacts(out / "manifest.json")
