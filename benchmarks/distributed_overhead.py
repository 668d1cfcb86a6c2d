"""Benchmark: what the distributed code path of a fine-tune costs at world size 1.

The same QLoRA fine-tune (``zoomattn.training.finetune.finetune``, as the workflow's job runs it)
on a random Llama-shaped model, run (a) as one process and (b) under ``torchrun --standalone
--nproc_per_node 1``: the process group (NCCL on CUDA, gloo on the CPU), the broadcast of the
trainable weights, one gradient all-reduce and the metric sums per step. Tokens/s over the steps
after the warm-up, each mode in its own process, and the ratio b/a. Multi-GPU scaling is not
measured here. Results: one JSON and one Markdown file, with the device named.

    python benchmarks/distributed_overhead.py           # CUDA -> benchmarks/results/
    python benchmarks/distributed_overhead.py --smoke --out /tmp/bench   # seconds, CPU, gloo
    python benchmarks/distributed_overhead.py --estimate   # README's table of the paper jobs

``--estimate`` computes, from config.yaml, what each fine-tune of the ``paper`` preset asks for
and its GPU-hours at the throughput measured on one H100 (``RATE_SOURCE``).
"""

from __future__ import annotations

import os

os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")  # as zoomattn/__main__.py does

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from datetime import date  # noqa: E402
from importlib.metadata import version  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from gpu_paper_cells import ANSWER_TOKENS, bench_tokenizer, save_random_base, sized_records  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]  # the workers import this checkout's zoomattn
OUT = Path(__file__).resolve().parent / "results"
LLAMA_8B = dict(  # Llama-3.1-8B's shape; --layers of its 32
    hidden=4096, heads=32, kv_heads=8, intermediate=14336, vocab=128256, rope_theta=500000.0
)  # fmt: skip
SMOKE_SHAPE = dict(hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=1024, rope_theta=5e5)
SMOKE = dict(layers=2, max_length=128, batch_size=2, steps=3, warmup=1, threads=1)
DEFAULTS = dict(layers=4, max_length=8192, batch_size=2, steps=8, warmup=2)  # ~2 minutes, H100
LORA = {"r": 64, "alpha": 16, "dropout": 0.1,  # the paper preset's
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                           "down_proj"]}  # fmt: skip
MODES = {
    "single": [],  # one process, no process group (distributed.SINGLE)
    "torchrun": ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"],
}
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "TORCHELASTIC_RUN_ID")  # fmt: skip


def fine_tune_cell(args, device: str) -> dict:
    """The QLoRA cell both modes train: the paper preset's LoRA and 4-bit settings (fp32 compute
    on the CPU), one example per micro-batch, no dropout-free shortcuts."""
    compute = "bfloat16" if device == "cuda" else "float32"
    return {
        "run": "distributed-overhead",
        "seed": 0,
        "preset": "benchmark",
        "method": "qlora",
        "method_config": {},
        "device": {"device": device, "dtype": compute, "gpus": int(device == "cuda")},
        "finetune": {
            "steps": args.steps,
            "batch_size": args.batch_size,
            "micro_batch_size": 1,
            "max_length": args.max_length,
            "gradient_checkpointing": True,
            "lr": 2.0e-4,
            "warmup_ratio": 0.0,
            "lr_schedule": "constant",
            "max_grad_norm": 1.0,
            "overlong": "drop",
            "optimizer": "paged_adamw_32bit" if device == "cuda" else "adamw",
            "log_every": 1,
            "checkpoint_every": 0,
            "lora": LORA if device == "cuda" else {**LORA, "r": 8, "alpha": 16},
            "quantization": {"load_in_4bit": True, "quant_type": "nf4", "double_quant": True,
                             "compute_dtype": compute},
        },
    }  # fmt: skip


def worker(task_file: Path) -> None:
    """One mode's fine-tune: the time at the end of every step, written by the first process."""
    from zoomattn.methods import METHODS
    from zoomattn.training import distributed
    from zoomattn.training.finetune import finetune

    task = json.loads(task_file.read_text())
    cell, work = task["cell"], Path(task["work"])
    ends: list[float] = []

    def on_metrics(metrics, step):
        if cell["device"]["device"] == "cuda":
            torch.cuda.synchronize()
        ends.append(time.perf_counter())

    world = distributed.join(cell["device"]["device"])
    finetune(
        cell,
        METHODS["qlora"].make_config({}),
        work / "train",
        work / "base",
        work / f"model-{task['mode']}",
        work / f"ckpt-{task['mode']}",
        task["threads"],
        on_metrics=on_metrics,
    )
    if world.is_main:
        Path(task["result"]).write_text(json.dumps({"ends": ends, "world": world.backend}))
    distributed.leave(world)


def run_mode(mode: str, cell: dict, work: Path, threads: int) -> dict:
    """Train ``cell`` in ``mode`` in a fresh process; its step end times and backend."""
    task = work / f"task-{mode}.json"
    result = work / f"result-{mode}.json"
    task.write_text(json.dumps({"cell": cell, "work": str(work), "mode": mode,
                                "threads": threads, "result": str(result)}))  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    command = [sys.executable, *MODES[mode], str(Path(__file__).resolve()), "--worker", str(task)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{mode}: {' '.join(command)} failed:\n{done.stderr[-4000:]}")
    return json.loads(result.read_text())


def throughput(ends: list[float], warmup: int, tokens_per_step: int) -> dict:
    """Tokens/s over the steps after ``warmup`` (the first step's end starts the clock)."""
    timed = ends[max(warmup, 1) - 1 :]
    seconds = timed[-1] - timed[0]
    steps = len(timed) - 1
    return {"timed_steps": steps, "seconds": seconds,
            "tokens_per_s": steps * tokens_per_step / seconds}  # fmt: skip


# --- what each paper fine-tune asks for and costs (README: Scaling out) --------------------------
H100_TOKENS_PER_S = {"qlora": 4700, "opamp": 4200}  # one H100, Llama-3.1-8B shape, 8192 tokens
RATE_SOURCE = (
    "one H100 on a Llama-3.1-8B-shaped model at 8192 tokens per step, as issue 22 reports it: "
    "QLoRA ≈4.7k tokens/s, OpAmp ≈4.2k"
)


def paper_estimates(protocol: str | None = None) -> list[dict]:
    """One row per study and method of the ``paper`` preset: its fine-tune jobs, the GPUs and
    host memory each asks for, its tokens (steps x batch x max_length: an upper bound, examples
    shorter than max_length train fewer) and GPU-hours at the measured rate (None where the
    method's rate was not measured)."""
    import yaml

    from zoomattn.config import load_config
    from zoomattn.grid import Grid

    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    if protocol:
        raw["presets"]["paper"]["protocol"] = protocol
    cfg = load_config({**raw, "preset": "paper"})
    per_process_mb = cfg["resources"]["finetune"]["mem_mb"]
    rows: dict[tuple[str, str], dict] = {}
    for study in Grid(cfg):
        for model in study.models.values():
            ft = {**study.finetune, **model.finetune}
            n = ft.get("processes", 1)
            tokens = ft["steps"] * ft["batch_size"] * ft["max_length"]
            full = model.method == "mudaf" and model.values.get("tuning", "full") == "full"
            rate = None if full else H100_TOKENS_PER_S.get(model.method, H100_TOKENS_PER_S["qlora"])
            row = rows.setdefault((study.name, model.method), {
                "study": study.name, "method": model.method, "jobs": 0, "gpus": n,
                "host_memory_gb": n * per_process_mb / 1000, "tokens": tokens,
                "rate": rate, "rate_measured": model.method in H100_TOKENS_PER_S,
                "full_fine_tune": full,
            })  # fmt: skip
            row["jobs"] += 1
            row["tokens"] = max(row["tokens"], tokens)  # per_dataset sets differ in steps
    for row in rows.values():
        gpu_hours = row["tokens"] / row["rate"] / 3600 if row["rate"] else None
        row["gpu_hours_per_job"] = gpu_hours
        row["wall_hours_per_job"] = gpu_hours / row["gpus"] if gpu_hours else None
        row["gpu_hours_all_jobs"] = gpu_hours * row["jobs"] if gpu_hours else None
    return list(rows.values())


def estimates_markdown(rows: list[dict]) -> str:
    def hours(h):
        return f"{h:,.0f}" if h is not None else "not measured"

    lines = [
        "| study | method | fine-tune jobs | GPUs per job | host memory per job | tokens per job "
        "(at most) | tokens/s per GPU | GPU-hours per job | hours per job on its GPUs | "
        "GPU-hours, all jobs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rate = f"{r['rate']:,}" + ("" if r["rate_measured"] else " (QLoRA's)") if r["rate"] else "—"
        method = r["method"] + (" (full fine-tune)" if r["full_fine_tune"] else "")
        lines.append(
            f"| {r['study']} | {method} | {r['jobs']} | {r['gpus']} | "
            f"{r['host_memory_gb']:,.0f} GB | {r['tokens'] / 1e9:.2f} B | {rate} | "
            f"{hours(r['gpu_hours_per_job'])} | {hours(r['wall_hours_per_job'])} | "
            f"{hours(r['gpu_hours_all_jobs'])} |"
        )
    return "\n".join(lines) + "\n"


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    import platform

    return f"CPU ({platform.machine()})"


def markdown(data: dict) -> str:
    meta, rows = data["meta"], data["modes"]
    lines = [
        "# Distributed fine-tune overhead at world size 1",
        "",
        f"{meta['device']}; torch {meta['torch']}; {meta['date']}; commit {meta['commit']}"
        + ("; **smoke run (tiny shapes on the CPU): a check of the script, not a measurement**"
           if meta["smoke"] else ""),
        "",
        f"QLoRA on a random Llama-shaped model ({meta['shape']}), {meta['steps']} steps of "
        f"{meta['tokens_per_step']} tokens ({meta['batch_size']} examples of {meta['max_length']} "
        f"tokens, micro-batch 1), {meta['warmup']} untimed. Multi-GPU scaling is not measured.",
        "",
        "| mode | launcher | backend | timed steps | seconds | tokens/s |",
        "|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['mode']} | {r['launcher']} | {r['backend']} | {r['timed_steps']} | "
                     f"{r['seconds']:.2f} | {r['tokens_per_s']:.0f} |")  # fmt: skip
    lines += ["", f"Ratio torchrun / single process (tokens/s): **{data['ratio']:.3f}**", ""]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU, gloo")
    p.add_argument("--out", type=Path, default=OUT, help="folder of distributed_overhead.*")
    p.add_argument("--layers", type=int, default=DEFAULTS["layers"], help="of Llama-3.1-8B shape")
    p.add_argument("--max-length", type=int, default=DEFAULTS["max_length"], help="per example")
    p.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"], help="per step")
    p.add_argument("--steps", type=int, default=DEFAULTS["steps"], help="optimizer steps a mode")
    p.add_argument("--warmup", type=int, default=DEFAULTS["warmup"], help="untimed steps")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--estimate", action="store_true", help="print the paper jobs' estimates")
    p.add_argument("--protocol", help="with --estimate: paper_text | authors_code (default)")
    p.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker)
        return
    if args.estimate:
        print(estimates_markdown(paper_estimates(args.protocol)))
        print(f"Rates: {RATE_SOURCE}. Tokens per job: steps x batch x max_length, at most.")
        return
    if args.smoke:
        p.set_defaults(**SMOKE)
        args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    shape = {**(SMOKE_SHAPE if args.smoke else LLAMA_8B), "layers": args.layers}
    cell = fine_tune_cell(args, device)
    tokens_per_step = args.batch_size * args.max_length
    rows = []
    with tempfile.TemporaryDirectory(prefix="distributed_overhead-") as tmp:
        from zoomattn.data.build import write_split

        work = Path(tmp)
        save_random_base(shape, args.layers, work / "base", device)
        tok = bench_tokenizer(shape["vocab"])
        records = sized_records(tok, args.batch_size * 4, args.max_length, ANSWER_TOKENS)
        write_split(records, work / "train", {})
        for mode in MODES:
            got = run_mode(mode, cell, work, args.threads)
            launcher = "python" if mode == "single" else "torchrun --standalone --nproc_per_node 1"
            row = {"mode": mode, "launcher": launcher, "backend": got["world"]}
            rows.append({**row, **throughput(got["ends"], args.warmup, tokens_per_step)})
    from gpu_paper import git_commit

    meta = {
        "device": device_name(device),
        "date": date.today().isoformat(),
        "commit": git_commit(),
        **{lib: version(lib) for lib in ("torch", "transformers", "bitsandbytes", "peft")},
        "smoke": args.smoke,
        "shape": shape,
        "steps": args.steps,
        "warmup": args.warmup,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "tokens_per_step": tokens_per_step,
    }
    data = {"meta": meta, "modes": rows, "ratio": rows[1]["tokens_per_s"] / rows[0]["tokens_per_s"]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "distributed_overhead.json").write_text(json.dumps(data, indent=1) + "\n")
    (args.out / "distributed_overhead.md").write_text(markdown(data))
    print(markdown(data))


if __name__ == "__main__":
    main()
