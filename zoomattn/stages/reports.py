"""Report stages: tables and figures of each study, from the metric files alone."""

from __future__ import annotations

import logging
from pathlib import Path

from zoomattn.io import read_json
from zoomattn.tracking import job_run

log = logging.getLogger("zoomattn")


def report(
    spec: dict,
    eval_files: list[Path],
    attention_files: list[Path],
    base_metrics: Path,
    out: Path,
    results: Path,
) -> None:
    from zoomattn.io import atomic_dir
    from zoomattn.reporting.build import build_report

    with job_run(spec, "report", "opamp", results) as run, atomic_dir(out) as tmp:
        build_report(
            spec,
            [read_json(p) for p in eval_files],
            [read_json(p) for p in attention_files],
            read_json(base_metrics),
            tmp,
        )
        run.log_artifacts(tmp, "report")


def rect_report(spec: dict, eval_files: list[Path], margin: Path, out: Path, results: Path) -> None:
    from zoomattn.io import atomic_dir
    from zoomattn.reporting.rectification import build_report

    with job_run(spec, "report", "rectification", results) as run, atomic_dir(out) as tmp:
        build_report(spec, [read_json(p) for p in eval_files], read_json(margin), tmp)
        run.log_artifacts(tmp, "report")


def mudaf_report(
    spec: dict,
    eval_files: list[Path],
    heads_files: list[Path],
    masking_files: list[Path],
    selection_files: list[Path],
    out: Path,
    results: Path,
) -> None:
    from zoomattn.io import atomic_dir
    from zoomattn.reporting.mudaf import build_report

    with job_run(spec, "report", "mudaf", results) as run, atomic_dir(out) as tmp:
        build_report(
            spec,
            [read_json(p) for p in eval_files],
            [read_json(p) for p in heads_files],
            [read_json(p) for p in masking_files],
            [read_json(p) for p in selection_files],
            tmp,
        )
        run.log_artifacts(tmp, "report")


def _train_metrics(path: Path) -> dict:
    """A fine-tune's metrics.json with its model id: the file's own ``model`` key, else the
    path under ``models/`` (``models/lkg/lkg_s0/metrics.json`` -> ``lkg/lkg_s0``)."""
    metrics = read_json(path)
    parts = Path(path).parts
    if "model" not in metrics and "models" in parts:
        start = len(parts) - parts[::-1].index("models")
        metrics["model"] = "/".join(parts[start:-1])
    return metrics


def lkg_report(
    spec: dict,
    eval_files: list[Path],
    patterns_files: list[Path],
    train_files: list[Path],
    out: Path,
    results: Path,
) -> None:
    from zoomattn.io import atomic_dir
    from zoomattn.reporting.lkg import build_report

    with job_run(spec, "report", "lkg", results) as run, atomic_dir(out) as tmp:
        build_report(
            spec,
            [read_json(p) for p in eval_files],
            [read_json(p) for p in patterns_files],
            [_train_metrics(p) for p in train_files],
            tmp,
        )
        run.log_artifacts(tmp, "report")
