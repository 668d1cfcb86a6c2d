"""The gpu lane: the sharded full fine-tune (training/sharding.py) on CUDA, one process under
torchrun with NCCL, against the single-process path, through ``finetune`` as the job calls it.

Run as a module (``python -m tests.gpu.test_distributed_on_cuda ARGS.json``) this file is the
worker torchrun starts. With ``ZOOMATTN_GPU_LANE_DEVICE=cpu`` the same runs on the CPU with gloo
(bf16 still): a check of the test, not of CUDA. Multi-GPU scaling is not measured here.
"""

import json
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.gpu.lane import DEVICE, LANE
from tests.training.test_distributed import run_two_processes
from zoomattn.methods import METHODS
from zoomattn.methods.mudaf.config import MudafConfig
from zoomattn.training import distributed
from zoomattn.training.finetune import finetune

pytestmark = pytest.mark.gpu

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
STEPS = 5  # timed: steps 2-4 (the checkpoint of step 4 is written after its stamp)


def _cell() -> dict:
    values = MudafConfig(heads=2, alpha=0.7, negatives=3).resolved(
        LORA, selected_heads=[[1, 0], [2, 3]]
    )
    return {
        "run": "mudaf-full-gpu",
        "seed": 0,
        "preset": "test",
        "method": "mudaf",
        "method_config": values,
        "device": LANE.as_spec(),
        "finetune": {
            "steps": STEPS,
            "batch_size": 4,
            "micro_batch_size": 2,
            "lr": 1e-3,
            "warmup_ratio": 0.0,
            "optimizer": "adamw",
            "log_every": 1,
            "checkpoint_every": 4,
            "lora": LORA,
            "quantization": None,
        },
    }


def _finetune(train_dir, base_dir, out: Path) -> dict:
    """Metrics by step, tags, seconds per step of steps 2-4 (CUDA synchronised)."""
    cell, logged, tags, stamps = _cell(), [], {}, []

    def on_metrics(metrics, step):
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        stamps.append(time.perf_counter())
        logged.append([step, metrics])

    finetune(
        cell,
        METHODS["mudaf"].make_config(cell["method_config"]),
        train_dir,
        base_dir,
        out / "model",
        out / "ckpt",
        2,
        on_metrics=on_metrics,
        on_tags=tags.update,
    )
    per_step = (stamps[3] - stamps[0]) / 3
    return {"metrics": logged, "tags": tags, "seconds_per_step": per_step}


def worker(args_file: str) -> None:
    args = json.loads(Path(args_file).read_text())
    out = Path(args["out"])
    world = distributed.join(DEVICE)
    report = _finetune(Path(args["train_dir"]), Path(args["base_dir"]), out)
    if DEVICE == "cuda":
        report["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    (out / "report.json").write_text(json.dumps(report))
    distributed.leave(world)


def test_the_sharded_full_finetune_runs_under_torchrun_with_nccl_as_one_process_does(
    tmp_path, train_dir, base_dir
):
    """World size 1 under torchrun (NCCL on CUDA): the sharded path (bf16 weights, fp32 master
    shard) trains MuDAF in full, records its engine and device, saves the fp32 model as one
    process does; its losses follow the single-process path's (fp32 compute) to bf16 accuracy."""
    run_two_processes(
        None, train_dir, base_dir, tmp_path / "dist", "tests.gpu.test_distributed_on_cuda",
        processes=1,
    )  # fmt: skip
    sharded = json.loads((tmp_path / "dist" / "report.json").read_text())
    single = _finetune(train_dir, base_dir, tmp_path / "single")
    assert sharded["tags"]["distributed.engine"].endswith("sharded AdamW (ZeRO-2)")
    assert sharded["tags"]["distributed.backend"] == ("nccl" if DEVICE == "cuda" else "gloo")
    assert sharded["tags"]["distributed.devices"] == ("cuda:0" if DEVICE == "cuda" else "cpu")
    assert [s for s, _ in sharded["metrics"]] == list(range(1, STEPS + 1))
    for (_, a), (_, b) in zip(sharded["metrics"], single["metrics"], strict=True):
        assert a["qa_loss"] == pytest.approx(b["qa_loss"], rel=3e-2), (a, b)
    a = load_file(tmp_path / "dist" / "model" / "model.safetensors")
    b = load_file(tmp_path / "single" / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(a[k].dtype == torch.float32 for k in a)
    base = load_file(base_dir / "model.safetensors")
    moved_a = torch.cat([(a[k] - base[k]).flatten() for k in a])
    moved_b = torch.cat([(b[k] - base[k]).flatten() for k in a])
    cosine = torch.nn.functional.cosine_similarity(moved_a, moved_b, dim=0).item()
    assert cosine > 0.8, cosine  # the same updates but for bf16 rounding (unrelated ones: ~0)
    print(
        f"\nsharded (torchrun, {sharded['tags']['distributed.backend']}, world 1): "
        f"{sharded['seconds_per_step'] * 1e3:.1f} ms/step, peak {sharded.get('peak_gib', 0):.2f}"
        f" GiB; single process: {single['seconds_per_step'] * 1e3:.1f} ms/step; update cosine "
        f"{cosine:.3f}"
    )


if __name__ == "__main__":
    worker(sys.argv[1])
