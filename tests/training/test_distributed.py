"""Data-parallel fine-tuning (training/distributed.py): 2 processes with gloo on the CPU, started
by torchrun from the test, against 1 process with the same global batch.

Run as a module (``python -m tests.training.test_distributed ARGS.json``) this file is the
worker torchrun starts in each process: the gradient of the first batch, then ``finetune``.
Dropout is 0 in these cells: with dropout each process draws its own masks (as the micro-batches
of one process do), so only the dropout-free runs can be compared weight for weight.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from zoomattn.data.build import load_split
from zoomattn.methods import METHODS, ResolveContext, StepBatch
from zoomattn.methods.loading import build_trainable
from zoomattn.methods.mudaf.config import MudafConfig
from zoomattn.methods.protocol import micro_batch_starts
from zoomattn.modeling.loading import load_tokenizer
from zoomattn.training import distributed
from zoomattn.training.answer_loss import AnswerLoss
from zoomattn.training.batching import encode_example
from zoomattn.training.finetune import finetune, micro_batch_size

ROOT = Path(__file__).resolve().parents[2]
# float32 on the CPU; the runs add the same terms in another order (micro-batch sums, the
# all-reduce), so gradients agree to rounding, relative to each tensor's largest entry (entries
# near 0 of a tensor whose largest is ~10 differ by ~1e-6), and Adam's steps keep that over 3 steps


def assert_same_gradient(got, want, name):
    atol = 1e-6 * want.abs().max().item()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=atol, msg=name)


WEIGHT_TOL = {"rtol": 1e-4, "atol": 1e-6}

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
QUANTIZATION = {
    "load_in_4bit": True,
    "quant_type": "nf4",
    "double_quant": True,
    "compute_dtype": "float32",
}
CELLS = {
    "qlora": {"method": "qlora", "method_config": {}},
    "opamp": {
        "method": "opamp",
        "method_config": {"K": 10, "adapter_dim": 8, "every": 2, "dropout": 0.0},
    },
}


def _cell(method: str, processes: int) -> dict:
    finetune_block = {
        "steps": 3,
        "batch_size": 4,
        "lr": 1e-3,
        "warmup_ratio": 0.0,
        "optimizer": "adamw",
        "log_every": 1,
        "checkpoint_every": 2,
        "lora": LORA,
        "quantization": QUANTIZATION,
    }
    if processes > 1:
        finetune_block["processes"] = processes
    return {
        "run": f"{method}-dp",
        "seed": 0,
        "preset": "test",
        **CELLS[method],
        "finetune": finetune_block,
    }


def first_batch_gradients(cell: dict, train_dir, base_dir, world) -> dict[str, torch.Tensor]:
    """The summed gradient of the first 4 records, built as fine-tuning builds the model."""
    method = METHODS[cell["method"]]
    cfg = method.make_config(cell["method_config"])
    tok = load_tokenizer(base_dir)
    records = load_split(train_dir)[:4]
    torch.manual_seed(0)
    ft = cell["finetune"]
    model = build_trainable(base_dir, cell["method"], cfg, ft["lora"], ft["quantization"])
    batch = StepBatch(
        records=records,
        examples=[encode_example(tok, r) for r in records],
        pad_id=tok.pad_token_id,
        micro_batch_size=micro_batch_size(ft, world.size),
        seed=0,
        step=0,
        rank=world.rank,
        world_size=world.size,
        sum_over_ranks=distributed.sum_over_ranks(world),
    )
    (method.objective(cfg) or AnswerLoss()).step(model, tok, batch)
    trainable = [p for p in model.parameters() if p.requires_grad]
    distributed.sum_gradients(world, trainable)
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def worker(args_file: str) -> None:
    """One process of the 2-process run: writes (rank 0) the first gradient and the metrics."""
    args = json.loads(Path(args_file).read_text())
    cell, out = args["cell"], Path(args["out"])
    train_dir, base_dir = Path(args["train_dir"]), Path(args["base_dir"])
    world = distributed.join("cpu")
    grads = first_batch_gradients(cell, train_dir, base_dir, world)
    logged, tags = [], {}
    cfg = METHODS[cell["method"]].make_config(cell["method_config"])
    result = finetune(
        cell,
        cfg,
        train_dir,
        base_dir,
        out / "model",
        out / "ckpt",
        2,
        on_metrics=lambda metrics, step: logged.append([step, metrics]),
        on_tags=tags.update,
    )
    if world.is_main:
        torch.save(grads, out / "grads.pt")
        (out / "report.json").write_text(json.dumps({"metrics": logged, "tags": tags, **result}))
    else:
        assert not logged and not tags  # only the first process reports
    distributed.leave(world)


def run_two_processes(
    cell,
    train_dir,
    base_dir,
    out: Path,
    worker="tests.training.test_distributed",
    extra=None,
    processes=2,
    succeed=True,
) -> subprocess.CompletedProcess:
    """``python -m WORKER ARGS.json`` in ``processes`` processes under torchrun (ARGS: the
    cell, the directories and ``extra``); ``succeed``: assert that the launch succeeded."""
    out.mkdir(parents=True)
    args = out / "args.json"
    paths = {"out": str(out), "train_dir": str(train_dir), "base_dir": str(base_dir)}
    args.write_text(json.dumps({"cell": cell, **paths, **(extra or {})}))
    env = {k: v for k, v in os.environ.items() if k not in distributed.TORCHRUN_ENV}
    command = distributed.torchrun_command(processes, worker, str(args))
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 or not succeed, done.stderr[-3000:]
    return done


@pytest.mark.parametrize("method", ["qlora", "opamp"])
def test_two_gloo_processes_train_as_one_process_with_the_same_global_batch(
    method, tmp_path, train_dir, base_dir
):
    """The first batch's gradient (summed over the processes, not averaged), every logged
    metric and the trainable weights after 3 steps equal one process's (no accumulation: the
    model's own mean loss) within float32 rounding; only the first process wrote the model."""
    run_two_processes(_cell(method, 2), train_dir, base_dir, tmp_path / "dp")
    one = _cell(method, 1)
    logged = []
    finetune(
        one,
        METHODS[method].make_config(one["method_config"]),
        train_dir,
        base_dir,
        tmp_path / "one",
        tmp_path / "ckpt_one",
        1,
        on_metrics=lambda metrics, step: logged.append([step, metrics]),
    )
    want = first_batch_gradients(one, train_dir, base_dir, distributed.SINGLE)
    got = torch.load(tmp_path / "dp" / "grads.pt")
    assert got.keys() == want.keys()
    for name in want:
        assert_same_gradient(got[name], want[name], name)
    report = json.loads((tmp_path / "dp" / "report.json").read_text())
    assert [step for step, _ in report["metrics"]] == [1, 2, 3]
    for (_, a), (_, b) in zip(report["metrics"], logged, strict=True):
        assert a.keys() == b.keys() and all(a[k] == pytest.approx(b[k], rel=1e-5) for k in a)
    assert report["tags"]["distributed.world_size"] == "2"
    assert report["tags"]["distributed.devices"] == "cpu cpu"
    names = ["adapter_model.safetensors"] + (
        ["zoom_modules.safetensors"] if method == "opamp" else []
    )
    for name in names:
        a, b = load_file(tmp_path / "dp" / "model" / name), load_file(tmp_path / "one" / name)
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(a[k], b[k], **WEIGHT_TOL, msg=k)
    assert (tmp_path / "dp" / "ckpt" / "state.pt").exists()


class SimulatedRanks:
    """``StepBatch.sum_over_ranks`` for ranks run one after the other in this process (the
    project's attention hooks are per process, so ranks cannot be threads): a first round
    records what each rank adds up, a second hands every rank the sums of the first round."""

    def __init__(self, world_size: int):
        self.posted: list[list] = [[] for _ in range(world_size)]
        self.totals: list | None = None

    def of(self, rank: int):
        served = 0

        def summed(values):
            nonlocal served
            if self.totals is None:
                self.posted[rank].append(list(values))
                return values
            served += 1
            return list(self.totals[served - 1])

        return summed

    def close_first_round(self) -> None:
        """Sum every call's values over the ranks (each rank made the same calls)."""
        calls = zip(*self.posted, strict=True)
        self.totals = [[sum(col) for col in zip(*values, strict=True)] for values in calls]


def _method_step(method, values, base_dir, records, micro, rank=0, world_size=1, summed=None):
    """(the step's metrics, the gradients) of one rank's share of a method's objective step."""
    cfg = METHODS[method].make_config(values)
    tok = load_tokenizer(base_dir)
    METHODS[method].prepare_tokenizer(tok, cfg)
    torch.manual_seed(0)
    model = build_trainable(base_dir, method, cfg, LORA, None)
    batch = StepBatch(
        records=records,
        examples=[encode_example(tok, r) for r in records],
        pad_id=tok.pad_token_id,
        micro_batch_size=micro,
        seed=0,
        step=0,
        rank=rank,
        world_size=world_size,
        **({"sum_over_ranks": summed} if summed else {}),
    )
    metrics = METHODS[method].objective(cfg).step(model, tok, batch)
    return metrics, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def _method_values(method, base_dir):
    if method == "mudaf":
        values = MudafConfig(heads=2, alpha=0.7, negatives=3)
        return values.resolved(LORA, selected_heads=[[1, 0], [2, 3]])
    context = ResolveContext(middle_heads=[[1, 0], [2, 3]], tokenizer=load_tokenizer(base_dir))
    return METHODS["lkg"].resolve({"dropout": 0.0}, LORA, context)


@pytest.mark.parametrize("method", ["mudaf", "lkg"])
def test_the_shares_of_two_ranks_add_up_to_a_method_step_on_the_whole_batch(
    method, base_dir, train_dir
):
    """MuDAF (the contrastive mean over the whole batch's rows) and LKG-RALM (its estimator
    losses and golden top-1 ratio): two ranks, each running its micro-batches of 1, give the
    gradients (summed) and the metrics of one process running the same 4 micro-batches
    (LKG-RALM's estimator losses are means per micro-batch, so its reference has the same
    micro-batches; for MuDAF that equals one pass)."""
    records = [r for r in load_split(train_dir) if len(r["documents"]) > 1][:4]
    values = _method_values(method, base_dir)
    want_metrics, want = _method_step(method, values, base_dir, records, micro=1)
    ranks = SimulatedRanks(2)
    for rank in (0, 1):  # first round: what each rank adds up
        _method_step(method, values, base_dir, records, 1, rank, 2, ranks.of(rank))
    ranks.close_first_round()
    results = [
        _method_step(method, values, base_dir, records, 1, rank, 2, ranks.of(rank))
        for rank in (0, 1)
    ]
    (metrics_0, grads_0), (metrics_1, grads_1) = results
    assert metrics_0 == metrics_1 and metrics_0.keys() == want_metrics.keys()
    for k, v in want_metrics.items():
        assert metrics_0[k] == pytest.approx(v, rel=1e-5, abs=1e-7), k
    if method == "mudaf":
        assert want_metrics["cl_loss"] > 0  # the contrastive term is part of the comparison
    for name in want:
        zero = torch.zeros_like(want[name])
        got = grads_0.get(name, zero) + grads_1.get(name, zero)
        assert_same_gradient(got, want[name], name)


def test_micro_batches_are_dealt_round_robin_and_cover_the_batch_once():
    starts = [list(micro_batch_starts(10, 2, rank, 3)) for rank in range(3)]
    assert starts == [[0, 6], [2, 8], [4]]
    assert sorted(s for ranks in starts for s in ranks) == list(range(0, 10, 2))
    assert list(micro_batch_starts(10, 4)) == [0, 4, 8]  # one process: every micro-batch


def test_a_batch_that_does_not_split_evenly_over_the_processes_is_refused_naming_the_keys():
    assert micro_batch_size({"batch_size": 8}, 2) == 4
    assert micro_batch_size({"batch_size": 8, "micro_batch_size": 2}, 2) == 2
    assert micro_batch_size({"batch_size": 6, "micro_batch_size": 4}, 1) == 4  # as before
    for ft in ({"batch_size": 6, "micro_batch_size": 2}, {"batch_size": 3}):
        with pytest.raises(ValueError, match=r"finetune\.micro_batch_size.*finetune\.processes"):
            micro_batch_size(ft, 2)


def test_a_cell_asking_for_two_processes_run_in_one_is_refused(tmp_path, train_dir, base_dir):
    cell = _cell("qlora", 2)
    with pytest.raises(ValueError, match="finetune.processes is 2 but this job runs 1"):
        finetune(cell, METHODS["qlora"].make_config({}), train_dir, base_dir, tmp_path, tmp_path, 1)


def test_a_job_relaunches_its_own_command_under_torchrun(monkeypatch):
    calls = []
    monkeypatch.setattr(distributed.os, "execv", lambda path, argv: calls.append((path, argv)))
    monkeypatch.setattr(sys, "argv", ["/x/zoomattn/__main__.py", "finetune", "--spec", "{}"])
    distributed.relaunch_under_torchrun(4)
    assert calls == [
        (
            sys.executable,
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4"]
            + ["-m", "zoomattn", "finetune", "--spec", "{}"],
        )
    ]


if __name__ == "__main__":
    worker(sys.argv[1])
