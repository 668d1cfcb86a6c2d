"""Report stages: tables and figures of each study, from the metric files alone."""

from __future__ import annotations

import importlib
import json
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


def _train_metrics(path: Path) -> dict:
    """A fine-tune's metrics.json with its model id: the file's own ``model`` key, else the
    path under ``models/`` (``models/lkg/lkg_s0/metrics.json`` -> ``lkg/lkg_s0``)."""
    metrics = read_json(path)
    parts = Path(path).parts
    if "model" not in metrics and "models" in parts:
        start = len(parts) - parts[::-1].index("models")
        metrics["model"] = "/".join(parts[start:-1])
    return metrics


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


LOADERS = {"train_metrics": _train_metrics, "predictions": _jsonl}  # every other kind: JSON


def load_inputs(inputs: dict[str, list[Path]]) -> dict[str, list]:
    """Each kind's files, loaded: JSON, predictions as their JSONL rows, a fine-tune's metrics
    with its model id."""
    return {
        kind: [LOADERS.get(kind, read_json)(p) for p in paths] for kind, paths in inputs.items()
    }


def report_package(study: str):
    """The study's report package, ``zoomattn/reporting/<study>/``: a new study's report is one
    new folder with ``KINDS`` and ``build_report``."""
    name = f"zoomattn.reporting.{study}"
    try:
        package = importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name != name:  # the package exists and one of its imports is missing: say that
            raise
        raise ValueError(
            f"no report for study {study!r}: zoomattn/reporting/{study}/ is missing"
        ) from None
    if not hasattr(package, "build_report"):
        raise ValueError(f"zoomattn/reporting/{study}/ is no study's report (no build_report)")
    return package


def _check_kinds(study: str, package, inputs: dict) -> None:
    """The rule hands the kinds the study's ``Kind`` names (zoomattn/studies.py); they must be
    exactly the kinds its package reads, or a report would draw from missing files in silence."""
    unread = sorted(set(inputs) - set(package.KINDS))
    if unread:
        raise ValueError(
            f"the {study} report reads {', '.join(package.KINDS)}; it has no use for "
            f"{', '.join(unread)}"
        )
    missing = [kind for kind in package.KINDS if kind not in inputs]
    if missing:
        raise ValueError(
            f"zoomattn/reporting/{study}/ reads {', '.join(missing)}, which the workflow does not "
            f"hand it: name them in the study's Kind (zoomattn/studies.py: KINDS)"
        )


def report(study: str, spec: dict, inputs: dict[str, list[Path]], out: Path, results: Path) -> None:
    """One study's report, by its package's ``build_report``, from the files of each kind (a kind
    given with no file, ``KIND=``, is an empty list)."""
    from zoomattn.io import atomic_dir

    package = report_package(study)
    _check_kinds(study, package, inputs)
    with job_run(spec, "report", study, results) as run, atomic_dir(out) as tmp:
        loaded = load_inputs(inputs)
        package.build_report(spec, {kind: loaded[kind] for kind in package.KINDS}, tmp)
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


def _check_results(files: dict[str, list[Path]], config_files: list[Path], preset) -> None:
    missing = [f for kind in files.values() for f in kind if not Path(f).exists()]
    if missing:
        more = f" (and {len(missing) - 1} more of its metric files)" if len(missing) > 1 else ""
        raise MissingResultsError(
            f"{missing[0]} is missing{more}: run the workflow for this config first: "
            f"{_workflow_command(config_files, preset)}"
        )


def cross_report_files(cfg: dict) -> dict[str, list[Path]]:
    """The cross-method report's input files, by kind, as its rule reads them (layout.py)."""
    from zoomattn.grid import Grid
    from zoomattn.layout import Layout

    inputs = Layout(cfg["out"], Grid(cfg)).cross_inputs()
    return {kind: [Path(f) for f in files] for kind, files in inputs.items()}


def regenerate(config_files: list[Path], out: Path, preset: str | None = None) -> None:
    """The cross-method report again, from the metric files a run left under ``results/``:
    nothing is trained or evaluated, no model is read. The first config file is the grid's
    (config.yaml), later ones override it as ``snakemake --configfile`` does, and ``preset`` as
    ``--config preset=NAME`` does."""
    from zoomattn.config import load_config, read_configs
    from zoomattn.reporting import leaderboard
    from zoomattn.specs import Specs

    cfg = load_config(read_configs(config_files, preset))
    files = cross_report_files(cfg)
    _check_results(files, config_files, preset)
    out.mkdir(parents=True, exist_ok=True)
    spec = Specs(cfg).cross_report()
    leaderboard.build_report(spec, load_inputs(files), out)
    _finish(out, spec)
    log.info("cross-method report regenerated in %s from %d metric files", out, len(files["evals"]))
