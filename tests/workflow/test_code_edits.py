"""What a code edit in the smoke run's scratch copy reruns (zoomattn/code_hash.py): a comment or
docstring edit nothing, a code change the jobs whose code needs it."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import pytest

from tests.test_code_hash import reword_comments_and_docstrings
from tests.workflow.scratch import planned_jobs

pytestmark = pytest.mark.slow

GRID_MODULE = "zoomattn/grid.py"  # the grid's module: the cross-method report calls it
ATTENTION_MODULE = "zoomattn/attention/math.py"  # the attention math every model job runs


@contextlib.contextmanager
def edited(workdir: Path, relative: str, edit, backup: Path):
    """The file edited for the block. After it, the report specs a dry run rewrote are put back
    as they were, times included: a spec newer than its report would rerun the report."""
    path, specs = workdir / relative, workdir / "results/smoke/specs"
    original = path.read_text()
    shutil.copytree(specs, backup)  # copy2: with the times
    path.write_text(edit(original))
    try:
        yield
    finally:
        path.write_text(original)
        for saved in backup.iterdir():
            shutil.copy2(saved, specs / saved.name)


def test_a_comment_and_docstring_edit_in_the_attention_math_schedules_nothing(workdir, tmp_path):
    with edited(workdir, ATTENTION_MODULE, reword_comments_and_docstrings, tmp_path / "specs"):
        assert planned_jobs(workdir) == []


def test_a_code_change_in_the_grid_reruns_the_reports_and_nothing_else(workdir, tmp_path):
    with edited(workdir, GRID_MODULE, lambda text: text + "\nEDITED = True\n", tmp_path / "specs"):
        rules = {rule for rule, _ in planned_jobs(workdir)}
    assert "report[leaderboard]" in rules
    assert all(rule == "all" or rule.startswith("report[") for rule in rules), rules
    assert planned_jobs(workdir) == []  # the specs put back: nothing left to rerun
