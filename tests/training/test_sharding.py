"""Sharded full fine-tuning (training/sharding.py) and resume under several processes.

One torchrun launch of 2 gloo processes (this file run as a module is the worker) makes every
2-process run the tests compare: a MuDAF full fine-tune (against one process with the same global
batch), OpAmp with dropout, and each of the two stopped right after its step-2 checkpoint then
resumed (in the same processes: the stop is an exception on every process, as test_finetune's
interruptions are, and the resumed run builds the model, optimiser and streams again).
"""

import copy
import json
import os
import signal
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.training.test_distributed import (
    WEIGHT_TOL,
    assert_same_gradient,
    run_two_processes,
)
from tests.training.test_distributed import _cell as distributed_cell
from zoomattn.data.build import load_split
from zoomattn.methods import METHODS, StepBatch
from zoomattn.methods.loading import build_trainable
from zoomattn.methods.mudaf.config import MudafConfig
from zoomattn.modeling.loading import load_tokenizer
from zoomattn.training import checkpoint, distributed, sharding
from zoomattn.training.batching import encode_example
from zoomattn.training.distributed import SINGLE, World
from zoomattn.training.finetune import finetune, sharded_optimizer
from zoomattn.training.sharding import Layout, ShardedAdamW

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}


def _cell(processes: int, steps: int = 3) -> dict:
    values = MudafConfig(heads=2, alpha=0.7, negatives=3).resolved(
        LORA, selected_heads=[[1, 0], [2, 3]]
    )
    finetune_block = {
        "steps": steps,
        "batch_size": 4,
        "micro_batch_size": 1,
        "lr": 1e-3,
        "warmup_ratio": 0.0,
        "optimizer": "adamw",
        "log_every": 1,
        "checkpoint_every": 2,
        "lora": LORA,
        "quantization": None,
    }
    if processes > 1:
        finetune_block["processes"] = processes
    return {
        "run": "mudaf-full",
        "seed": 0,
        "preset": "test",
        "method": "mudaf",
        "method_config": values,
        "finetune": finetune_block,
    }


def _cfg(cell):
    return METHODS["mudaf"].make_config(cell["method_config"])


def first_records(train_dir) -> list:
    """Two-document, one-document, two, one: with micro-batches of 1 dealt round robin the first
    process has every contrastive row and the second none (fewer forward passes)."""
    records = load_split(train_dir)
    multi = [r for r in records if len(r["documents"]) > 1][:2]
    single = [r for r in records if len(r["documents"]) == 1][:2]
    return [multi[0], single[0], multi[1], single[1]]


def first_gradient(cell, train_dir, base_dir, world) -> torch.Tensor:
    """The summed gradient of ``first_records``, flat in parameter order: through the sharded
    optimiser's reduce-scatter (gathered back whole) under several processes."""
    cfg, tok = _cfg(cell), load_tokenizer(base_dir)
    records = first_records(train_dir)
    torch.manual_seed(0)
    model = build_trainable(base_dir, "mudaf", cfg, LORA, None)
    batch = StepBatch(
        records=records,
        examples=[encode_example(tok, r) for r in records],
        pad_id=tok.pad_token_id,
        micro_batch_size=1,
        seed=0,
        step=0,
        rank=world.rank,
        world_size=world.size,
        sum_over_ranks=distributed.sum_over_ranks(world),
    )
    named = list(model.named_parameters())
    optimizer = ShardedAdamW(world, named, 1e-3, torch.float32) if world.distributed else None
    metrics = METHODS["mudaf"].objective(cfg).step(model, tok, batch)
    assert metrics["cl_loss"] > 0
    if optimizer is None:
        return torch.cat([p.grad.reshape(-1) for _, p in named])
    optimizer.reduce_gradients()
    return optimizer.gather_full(optimizer.master.grad)


def _dropout_cell() -> dict:
    """OpAmp on 2 processes with dropout in its adapters and the LoRA (a full fine-tune has no
    dropout: our attention has none), 4 steps."""
    cell = copy.deepcopy(distributed_cell("opamp", 2))
    cell["method_config"]["dropout"] = 0.1
    cell["finetune"].update(steps=4, lora={**LORA, "dropout": 0.1})
    return cell


class Killed(Exception):
    pass


def killed_or_resumed(args: dict, world: World) -> None:
    """One launch of the OpAmp dropout run on its checkpoint folder: ``kill`` SIGKILLs the
    process that writes the checkpoints once its step-2 state is on disk (torchrun then ends the
    other); ``resume`` trains from what is there and records the step it started from."""
    out, cell = Path(args["out"]), _dropout_cell()
    if args["mode"] == "kill":
        save = checkpoint.Checkpointer.save

        def save_then_die(self, step, *a, **kw):
            save(self, step, *a, **kw)
            if step == 2 and world.is_main:
                os.kill(os.getpid(), signal.SIGKILL)

        checkpoint.Checkpointer.save = save_then_die
    starts = []
    finetune(
        cell, METHODS["opamp"].make_config(cell["method_config"]), Path(args["train_dir"]),
        Path(args["base_dir"]), out / "model", Path(args["ckpt"]), 2, on_start=starts.append,
    )  # fmt: skip
    if world.is_main:
        (out / "starts.json").write_text(json.dumps(starts))


def worker(args_file: str) -> None:
    args = json.loads(Path(args_file).read_text())
    out, train_dir, base_dir = Path(args["out"]), Path(args["train_dir"]), Path(args["base_dir"])
    world = distributed.join("cpu")
    if "mode" in args:
        killed_or_resumed(args, world)
        distributed.leave(world)
        return
    grads = first_gradient(_cell(2), train_dir, base_dir, world)
    report = {}

    def run(name, cell, **kwargs):
        logged = report.setdefault(name, [])
        cfg = METHODS[cell["method"]].make_config(cell["method_config"])
        finetune(
            cell, cfg, train_dir, base_dir, out / name, out / f"ckpt_{name}", 2,
            on_metrics=lambda metrics, step: logged.append([step, metrics]), **kwargs,
        )  # fmt: skip

    def stopped_after_step_2_then_resumed(name, cell):
        save = checkpoint.Checkpointer.save

        def save_then_stop(self, step, *a, **kw):  # every process stops after the step-2 state
            save(self, step, *a, **kw)
            if step == 2:
                raise Killed

        checkpoint.Checkpointer.save = save_then_stop
        try:
            run(name, cell)
        except Killed:
            report[name] = []  # what the stopped run logged is in its checkpoint
        finally:
            checkpoint.Checkpointer.save = save
        run(name, cell, on_start=report.setdefault(f"{name}_start", []).append)

    run("sharded", _cell(2))
    stopped_after_step_2_then_resumed("sharded_resumed", _cell(2))
    run("dropout", _dropout_cell())
    stopped_after_step_2_then_resumed("dropout_resumed", _dropout_cell())
    if world.is_main:
        torch.save(grads, out / "grads.pt")
        (out / "report.json").write_text(json.dumps(report))
    distributed.leave(world)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, train_dir, base_dir) -> Path:
    """The 2-process runs, made once for the tests of this module."""
    out = tmp_path_factory.mktemp("sharded") / "runs"
    run_two_processes(None, train_dir, base_dir, out, "tests.training.test_sharding")
    return out


def test_a_sharded_full_finetune_on_two_processes_trains_as_one_process(
    runs, tmp_path, train_dir, base_dir
):
    """MuDAF tuning every weight, its AdamW state sharded over 2 processes (one of them with no
    contrastive row, so fewer forward passes): the first gradient (the shards of the sum,
    gathered), every logged metric and every weight after 3 steps equal one process's."""
    want = first_gradient(_cell(1), train_dir, base_dir, SINGLE)
    got = torch.load(runs / "grads.pt")
    assert_same_gradient(got, want, "flat gradient")
    logged = []
    one = _cell(1)
    finetune(
        one, _cfg(one), train_dir, base_dir, tmp_path / "one", tmp_path / "ckpt", 1,
        on_metrics=lambda metrics, step: logged.append([step, metrics]),
    )  # fmt: skip
    report = json.loads((runs / "report.json").read_text())
    assert [s for s, _ in report["sharded"]] == [1, 2, 3]
    for (_, a), (_, b) in zip(report["sharded"], logged, strict=True):
        assert a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], rel=1e-5) for k in a)
    a = load_file(runs / "sharded" / "model.safetensors")
    b = load_file(tmp_path / "one" / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype == torch.float32, k
        torch.testing.assert_close(a[k], b[k], **WEIGHT_TOL, msg=k)


def _same_files(a_dir: Path, b_dir: Path, names: list[str]) -> None:
    for name in names:
        a, b = load_file(a_dir / name), load_file(b_dir / name)
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize(
    "run,files",
    [
        ("sharded", ["model.safetensors"]),
        ("dropout", ["adapter_model.safetensors", "zoom_modules.safetensors"]),
    ],
)
def test_a_two_process_run_stopped_after_a_checkpoint_resumes_to_the_run_never_stopped(
    runs, run, files
):
    """Stopped right after the step-2 checkpoint and resumed from it, every process restoring
    its optimiser shard (the sharded full fine-tune) and its own dropout stream (OpAmp with
    dropout 0.1): the same weights bit for bit and the same metric history as the run never
    stopped."""
    report = json.loads((runs / "report.json").read_text())
    assert report[f"{run}_resumed_start"] == [2]
    assert [s for s, _ in report[run]][-1] >= 3
    assert report[f"{run}_resumed"] == report[run]
    _same_files(runs / run, runs / f"{run}_resumed", files)
    state = torch.load(runs / f"ckpt_{run}_resumed" / "state.pt", weights_only=False)
    assert len(state["ranks_rng"]) == 2
    if run == "dropout":  # the processes draw different masks
        assert not torch.equal(state["ranks_rng"][0]["torch"], state["ranks_rng"][1]["torch"])


def test_a_two_process_run_killed_after_a_checkpoint_resumes_in_a_new_launch(
    runs, train_dir, base_dir
):
    """SIGKILL of the process that wrote the step-2 checkpoint ends the launch (torchrun stops
    the other); a new torchrun launch resumes from that checkpoint, each process with its own
    dropout stream, to the weights of the run never stopped, bit for bit."""
    ckpt, worker = runs.parent / "ckpt_killed", "tests.training.test_sharding"
    killed = run_two_processes(
        None, train_dir, base_dir, runs.parent / "killed", worker,
        {"mode": "kill", "ckpt": str(ckpt)}, succeed=False,
    )  # fmt: skip
    assert killed.returncode != 0 and not (runs.parent / "killed" / "model").exists()
    resumed = runs.parent / "resumed"
    run_two_processes(
        None, train_dir, base_dir, resumed, worker, {"mode": "resume", "ckpt": str(ckpt)}
    )
    assert json.loads((resumed / "starts.json").read_text()) == [2]
    files = ["adapter_model.safetensors", "zoom_modules.safetensors"]
    _same_files(runs / "dropout", resumed / "model", files)


# --- pieces that need no processes ---------------------------------------------------------


def test_the_flat_layout_cuts_weights_into_equal_shards_and_round_trips():
    tensors = [torch.arange(5.0), torch.arange(10.0, 13.0).view(1, 3), torch.arange(20.0, 22.0)]
    layout = Layout((5, 3, 2), 3)
    assert layout.total == 10 and layout.shard == 4
    shards = [torch.empty(4) for _ in range(3)]
    for r, shard in enumerate(shards):
        sharding.read_flat(tensors, layout, 4 * r, shard)
    assert torch.cat(shards).tolist() == [0, 1, 2, 3, 4, 10, 11, 12, 20, 21, 0, 0]  # padded
    back = [torch.zeros_like(t) for t in tensors]
    for r, shard in enumerate(shards):
        sharding.write_flat(back, layout, 4 * r, shard[: max(0, min(4, 10 - 4 * r))])
    assert all(torch.equal(a, b) for a, b in zip(back, tensors, strict=True))


def test_collectives_move_at_most_chunk_bytes(monkeypatch):
    monkeypatch.setattr(sharding, "CHUNK_BYTES", 64)
    layout = Layout((100, 30), 2)  # shards of 65
    chunks = layout.chunks(4)
    assert all(2 * len(c) * 4 <= 64 for c in chunks)
    assert [i for c in chunks for i in c] == list(range(65))


def test_gradients_are_summed_in_buckets_of_at_most_chunk_bytes(monkeypatch):
    """Two processes with the same gradients: every gradient doubled, no all-reduce over 64
    bytes but the first (which processes have a gradient), the small ones flattened together."""
    sizes = []

    def doubling(t):
        sizes.append(t.numel() * t.element_size())
        t.mul_(2)

    monkeypatch.setattr(distributed.dist, "all_reduce", doubling)
    params = [torch.nn.Parameter(torch.zeros(n)) for n in (3, 40, 2, 5)]
    params.append(torch.nn.Parameter(torch.zeros(4, dtype=torch.float64)))
    for i, p in enumerate(params):
        p.grad = torch.arange(p.numel(), dtype=p.dtype) + i
    want = [2 * p.grad.clone() for p in params]
    distributed.sum_gradients(World(0, 2, 0, "gloo"), params, chunk_bytes=64)
    assert all(torch.equal(p.grad, w) for p, w in zip(params, want, strict=True))
    assert max(sizes[1:]) <= 64 and len(sizes) - 1 < sum(p.numel() for p in params)
    buckets = distributed.gradient_buckets([p.grad for p in params], 64)
    for bucket in buckets:
        assert len({params[i].dtype for i, _, _ in bucket}) == 1
    covered = [(i, j) for b in buckets for i, lo, hi in b for j in range(lo, hi)]
    assert covered == [(i, j) for i, p in enumerate(params) for j in range(p.numel())]


def _params(seed=0):
    torch.manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(n)) for n in (7, 12, 3)]


def _grads(params, step):
    for i, p in enumerate(params):
        p.grad = torch.sin(torch.arange(p.numel()) * (i + 1.0) + step) * 3


def test_one_shard_steps_as_adamw_with_clipping_on_the_norm(monkeypatch):
    monkeypatch.setattr(sharding, "CHUNK_BYTES", 24)  # several chunks
    plain, sharded = _params(), _params()
    adamw = torch.optim.AdamW(plain, lr=0.1, weight_decay=0.0)
    ours = ShardedAdamW(SINGLE, [(str(i), p) for i, p in enumerate(sharded)], 0.1, torch.float32)
    for step in range(3):
        _grads(plain, step)
        _grads(sharded, step)
        torch.nn.utils.clip_grad_norm_(plain, 1.0)
        adamw.step()
        adamw.zero_grad()
        ours.step(1.0, 0.1)
        for a, b in zip(plain, sharded, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
        assert all(p.grad is None for p in sharded)


def test_a_consolidated_sharded_state_restores_to_the_same_next_step():
    params = _params()
    named = [(str(i), p) for i, p in enumerate(params)]
    ours = ShardedAdamW(SINGLE, named, 0.1, torch.float32)
    for step in range(2):
        _grads(params, step)
        ours.step(1.0, 0.1)
    weights, state = ours.consolidated()
    fresh = _params(seed=1)
    again = ShardedAdamW(SINGLE, [(str(i), p) for i, p in enumerate(fresh)], 0.1, torch.float32)
    again.load(weights, state)
    for p in (params, fresh):
        _grads(p, 2)
    ours.step(1.0, 0.1)
    again.step(1.0, 0.1)
    assert all(torch.equal(a, b) for a, b in zip(params, fresh, strict=True))
    with pytest.raises(RuntimeError, match="made for .* shards 22 weights over 2 processes"):
        ShardedAdamW(World(0, 2, 0, "none"), named, 0.1, torch.float32).load(weights, state)


def test_a_sharded_full_finetune_refuses_a_paged_optimizer_naming_the_key():
    with pytest.raises(ValueError, match=r"finetune\.optimizer 'paged_adamw_8bit'.*adamw"):
        sharded_optimizer({"optimizer": "paged_adamw_8bit"}, SINGLE, None, torch.bfloat16)


if __name__ == "__main__":
    worker(sys.argv[1])
