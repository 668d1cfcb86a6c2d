"""A run interrupted mid-job: the next plain ``snakemake`` rebuilds what the interruption removed.

Snakemake removes a job's outputs when it starts the job, and a zoomattn job builds a directory
output as ``<dir>.partial`` (zoomattn/io.atomic_dir). So a forced rerun (``-R finetune``) killed
mid-fine-tune leaves the model missing, after a kill -9 a ``.partial`` beside it, and the old
model's evaluations and reports in place: Snakemake alone would call all of that up to date.
"""

from __future__ import annotations

import shutil

import pytest

from tests.workflow.scratch import TORN_MODEL, planned_jobs

pytestmark = pytest.mark.slow

MODEL = TORN_MODEL  # a MuDAF-part model: read by the MuDAF, LKG-RALM and cross-method reports
EVALUATED = "qlora_s0"  # an OpAmp-part model evaluated on two benchmarks
# the jobs that read a model (besides reports): its evaluations and analyses
READERS = {"evaluate", "attention", "retrieval_heads", "head_masking", "head_patterns"}


@pytest.fixture
def wd(workdir, tmp_path):
    """A copy of the finished smoke run (results and Snakemake's records) that a test may break."""
    return shutil.copytree(workdir, tmp_path / "wd", symlinks=True)


def test_a_model_an_interrupted_run_removed_is_rebuilt_with_everything_that_reads_it(
    rebuilt_after_interruption,
):
    wd, jobs = rebuilt_after_interruption  # the model torn as the module docstring says
    assert ("finetune", {"trained": MODEL}) in jobs
    assert {r for r, w in jobs if w.get("model") == MODEL} == READERS
    reports = {f"report[{s}]" for s in ("mudaf", "lkg", "leaderboard")}
    assert {r for r, _ in jobs if r.startswith("report[")} == reports

    models = wd / "results/smoke/models"
    assert (models / MODEL / "metrics.json").is_file()
    assert not (models / f"{MODEL}.partial").exists()
    assert planned_jobs(wd) == []


def test_an_evaluation_an_interrupted_run_removed_is_rebuilt_with_the_reports_reading_it(wd):
    metrics = wd / f"results/smoke/eval/{EVALUATED}/coqa_like/r0.json"
    metrics.unlink()
    metrics.with_suffix(".predictions.jsonl").unlink()
    jobs = planned_jobs(wd)
    evaluation = {"model": EVALUATED, "benchmark": "coqa_like", "split": "r0"}
    assert sorted(jobs, key=str) == sorted(
        [("evaluate", evaluation), ("report[opamp]", {}), ("report[leaderboard]", {}), ("all", {})],
        key=str,
    )
