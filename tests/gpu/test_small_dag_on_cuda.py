"""The gpu lane: the `small` preset's DAG (local Llama-3-style model, real-format data) end to end
on the GPU, with the warm worker on and cards handed out per job."""

import pytest

from tests.gpu.lane import DEVICE
from tests.workflow.scratch import mlflow_runs, snakemake
from tests.workflow.test_paper_scale import small_workflow

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_small_dag_completes_on_the_gpu_with_the_worker_on(tmp_path):
    wd = small_workflow(tmp_path, "auto" if DEVICE == "cuda" else "cpu")
    done = snakemake(wd, "-j", "4", "--resources", "gpu=1", "--config", "preset=small")
    assert "Nothing to be done" not in done.stdout + done.stderr
    log = (wd / "results/small/logs/worker.log").read_text()
    assert "ready in" in log and "job finetune" in log, log  # jobs ran in the warm worker
    runs, default = mlflow_runs(wd, "small")
    assert default == [] and {r.info.status for r in runs} == {"FINISHED"}
    model_jobs = [r for r in runs if r.data.tags.get("zoomattn.stage") in ("finetune", "evaluate")]
    assert model_jobs
    for run in model_jobs:
        assert run.data.tags["zoomattn.device"].startswith(DEVICE), run.info.run_name
        assert run.data.tags["zoomattn.planned_device"].startswith(DEVICE), run.info.run_name
    if DEVICE == "cuda":
        finetunes = [r for r in model_jobs if r.data.tags["zoomattn.stage"] == "finetune"]
        assert all(r.data.tags["zoomattn.dtype.method_modules"] in ("torch.bfloat16", "none")
                   for r in finetunes)  # fmt: skip
        assert any(k.startswith("system/gpu") for r in finetunes for k in r.data.metrics)
    assert len(list((wd / "results/small/eval").rglob("r*.json"))) == 9
