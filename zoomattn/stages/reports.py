"""Report stages: tables and figures of each study, from the metric files alone."""

from __future__ import annotations

import logging
from pathlib import Path

from zoomattn.io import read_json
from zoomattn.tracking import job_run

log = logging.getLogger("zoomattn")


def _finish(out: Path, spec: dict) -> None:
    """What every report directory holds beside its own files: each csv table as html too (the
    form `snakemake --report` shows), and provenance.json (preset, seeds, commit: the captions')."""
    import pandas as pd

    from zoomattn.io import write_json
    from zoomattn.reporting.common.html_tables import write_table_html
    from zoomattn.tracking import git_commit

    for table in sorted(Path(out).glob("*.csv")):
        html = table.with_suffix(".html")
        if not html.exists():
            write_table_html(pd.read_csv(table), html)
    provenance = {"preset": spec["preset"], "seeds": spec.get("seeds"), "commit": git_commit()}
    write_json(Path(out) / "provenance.json", provenance)


def report(
    spec: dict,
    eval_files: list[Path],
    attention_files: list[Path],
    base_metrics: Path,
    out: Path,
    results: Path,
) -> None:
    from zoomattn.io import atomic_dir
    from zoomattn.reporting.opamp import build_report

    with job_run(spec, "report", "opamp", results) as run, atomic_dir(out) as tmp:
        build_report(
            spec,
            [read_json(p) for p in eval_files],
            [read_json(p) for p in attention_files],
            read_json(base_metrics),
            tmp,
        )
        _finish(tmp, spec)
        run.log_artifacts(tmp, "report")


def rect_report(spec: dict, eval_files: list[Path], margin: Path, out: Path, results: Path) -> None:
    from zoomattn.io import atomic_dir
    from zoomattn.reporting.rectification import build_report

    with job_run(spec, "report", "rectification", results) as run, atomic_dir(out) as tmp:
        build_report(spec, [read_json(p) for p in eval_files], read_json(margin), tmp)
        _finish(tmp, spec)
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
        _finish(tmp, spec)
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
        _finish(tmp, spec)
        run.log_artifacts(tmp, "report")


def leaderboard_report(
    spec: dict,
    eval_files: list[Path],
    attention_files: list[Path],
    heads_files: list[Path],
    patterns_files: list[Path],
    out: Path,
    results: Path,
) -> None:
    from zoomattn.io import atomic_dir
    from zoomattn.reporting.leaderboard import build_cross_report
    from zoomattn.tracking import git_commit

    with job_run(spec, "report", "leaderboard", results) as run, atomic_dir(out) as tmp:
        build_cross_report(
            spec, eval_files, attention_files, heads_files, patterns_files, tmp, git_commit()
        )
        _finish(tmp, spec)
        run.log_artifacts(tmp, "report")


class MissingResultsError(FileNotFoundError):
    """A metric file the report reads is not there: the run has not made it (yet)."""


def _workflow_command(config_files: list[Path], preset: str | None) -> str:
    """The `make run` that makes this config's results (config.yaml is the Snakefile's own)."""
    own = Path("config.yaml").resolve()
    args = [f"--configfile {path}" for path in config_files if Path(path).resolve() != own]
    if preset is not None:
        args.append(f"--config preset={preset}")
    return f"make run SNAKEMAKE_ARGS='{' '.join(args)}'" if args else "make run"


def _check_results(files: dict[str, list[str]], config_files: list[Path], preset) -> None:
    missing = [f for kind in files.values() for f in kind if not Path(f).exists()]
    if missing:
        more = f" (and {len(missing) - 1} more of its metric files)" if len(missing) > 1 else ""
        raise MissingResultsError(
            f"{missing[0]} is missing{more}: run the workflow for this config first: "
            f"{_workflow_command(config_files, preset)}"
        )


def regenerate(config_files: list[Path], out: Path, preset: str | None = None) -> None:
    """The cross-method report again, from the metric files a run left under ``results/``:
    nothing is trained or evaluated, no model is read. The first config file is the grid's
    (config.yaml), later ones override it as ``snakemake --configfile`` does, and ``preset`` as
    ``--config preset=NAME`` does."""
    from zoomattn import grid
    from zoomattn.config import load_config, read_configs
    from zoomattn.reporting.leaderboard import build_cross_report
    from zoomattn.tracking import git_commit

    cfg = load_config(read_configs(config_files, preset))
    files = grid.cross_report_inputs(cfg, cfg["out"])
    _check_results(files, config_files, preset)
    out.mkdir(parents=True, exist_ok=True)
    spec = grid.cross_report_spec(cfg)
    build_cross_report(
        spec,
        [Path(f) for f in files["evals"]],
        [Path(f) for f in files["attention"]],
        [Path(f) for f in files["heads"]],
        [Path(f) for f in files["patterns"]],
        out,
        git_commit(),
    )
    _finish(out, spec)
    log.info("cross-method report regenerated in %s from %d metric files", out, len(files["evals"]))
