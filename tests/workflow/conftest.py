"""The smoke grid's one real run, shared by every workflow test file of the session, and what
several files read from it: its ``snakemake --report`` page, and one model rebuilt after an
interrupted rerun."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.workflow.scratch import (
    SMOKE,
    TORN_MODEL,
    copy_workflow,
    planned_jobs,
    snakemake,
    tear_model,
)


@pytest.fixture(scope="session")
def workdir(tmp_path_factory) -> Path:
    """A scratch workflow copy on which the smoke grid has run once with -j 2 (what Snakemake
    printed on stderr kept in ``snakemake.stderr`` beside it)."""
    wd = copy_workflow(tmp_path_factory.mktemp("workflow"))
    done = snakemake(wd, "-j", "2", *SMOKE)
    (wd.parent / "snakemake.stderr").write_text(done.stderr)
    return wd


@pytest.fixture(scope="session")
def report_html(workdir, tmp_path_factory) -> Path:
    """The smoke run's ``snakemake --report`` page (made once: several files read it)."""
    html = tmp_path_factory.mktemp("report") / "report.html"
    snakemake(workdir, "--report", str(html), *SMOKE)
    return html


@pytest.fixture(scope="session")
def rebuilt_after_interruption(workdir, tmp_path_factory):
    """(copy, planned jobs): a copy of the smoke run whose forced rerun of TORN_MODEL's fine-tune
    was killed (tear_model), the jobs a dry run then planned, and the copy after a plain
    ``snakemake -j 2`` rebuilt them, every job in a fresh process (no warm worker), so that
    the rebuilt files can also be compared with the worker-made ones of ``workdir``."""
    wd = shutil.copytree(workdir, tmp_path_factory.mktemp("rebuilt") / "wd", symlinks=True)
    tear_model(wd, TORN_MODEL)
    planned = planned_jobs(wd)
    snakemake(wd, "-j", "2", *SMOKE, env={"ZOOMATTN_NO_WORKER": "1"})
    return wd, planned
