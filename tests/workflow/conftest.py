"""The smoke grid's one real run, shared by every workflow test file of the session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.workflow.scratch import SMOKE, copy_workflow, snakemake


@pytest.fixture(scope="session")
def workdir(tmp_path_factory) -> Path:
    """A scratch workflow copy on which the smoke grid has run once with -j 2."""
    wd = copy_workflow(tmp_path_factory.mktemp("workflow"))
    snakemake(wd, "-j", "2", *SMOKE)
    return wd
