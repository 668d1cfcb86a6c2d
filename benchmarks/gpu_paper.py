"""Benchmark: every method of the ``paper`` preset at the paper's scale, on one GPU.

On a random model of Llama-3.1-8B's shape, loaded in 4-bit with LoRA and the method's modules
exactly as the workflow's fine-tune job builds it (``build_trainable``), each study of the preset
(OpAmp, rectification, MuDAF, LKG-RALM) is measured at its own fine-tuning settings (the preset's
``finetune`` merged with the study's): QLoRA and one cell per method (OpAmp K = 10, rectify ξ = 3,
MuDAF 8 heads with ``tuning: lora``, since a full fine-tune of 8B does not fit one card, LKG-RALM
in full). Per cell: the step time of one optimizer step on one micro-batch at the study's
``max_length``, tokens/s, peak memory, and generated tokens/s on one evaluation batch (the
preset's batch size and max_new_tokens, prompts of ``--prompt-tokens``), all as ratios to QLoRA at
the same settings and layer count in the same run. A cell that runs out of memory with every
layer is retried, with QLoRA, at half the layers, down to ``--min-layers``. Then each custom
attention function's forward + backward against plain causal SDPA at ``--lengths``, under
``attention_kernels: reference`` (variant ``opamp``) and ``fused`` (``opamp_fused``) in the same
run, with the path that actually ran (on the CPU the fused setting runs the reference paths); and
OpAmp's opt-in Triton path (``opamp_triton``: ``path="triton"``, on CUDA only; ``--smoke`` records
it as skipped).
Results: one JSON and one Markdown file, with the device named.

    python benchmarks/gpu_paper.py            # CUDA -> benchmarks/results/gpu_paper.{json,md}
    python benchmarks/gpu_paper.py --attention-only   # the attention functions alone (minutes)
    python benchmarks/gpu_paper.py --smoke --out /tmp/bench   # the whole run, tiny, on the CPU
"""

from __future__ import annotations

import os
import sys

# bitsandbytes compiles its CPU 4-bit ops (seconds per process); as zoomattn/__main__.py does. On
# CUDA dynamo stays on: the fused kernels may compile (FlexAttention)
if "--smoke" in sys.argv:
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
from datetime import date  # noqa: E402
from importlib.metadata import PackageNotFoundError, version  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import yaml  # noqa: E402
from gpu_paper_cells import (  # noqa: E402
    EXPLICIT_PATHS,
    OOM,
    attention_cell,
    free_memory,
    guarded,
    save_random_base,
    step_cell,
)
from gpu_paper_report import goals, markdown  # noqa: E402

from zoomattn.config import ROOT, load_config  # noqa: E402
from zoomattn.grid import Grid  # noqa: E402
from zoomattn.methods import METHODS, ResolveContext, cells  # noqa: E402

OUT = Path(__file__).resolve().parent / "results"
LLAMA_8B = {"vocab": 128256, "rope_theta": 500000.0}  # Llama-3.1-8B's, beside SHAPE_KEYS
SHAPE_KEYS = ("hidden", "layers", "heads", "kv_heads", "intermediate")  # the preset's base_model
SMOKE_SHAPE = dict(
    hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=1024, rope_theta=500000.0
)
SMOKE = dict(  # --smoke: the same run on the CPU, tiny and short (flags given still win)
    lengths=[64, 128, 256], goal_tokens=128, max_length=128, prompt_tokens=96, max_new_tokens=4,
    min_layers=1, steps=1, warmup=1, repeats=2,
)  # fmt: skip
PREFERRED = {"opamp": {"K": 10}, "rectify": {"xi": 3, "g": "max"}, "mudaf": {"heads": 8}}
VARIANTS = ("sdpa", "opamp", "opamp_triton", "rectified", "lkg_fusion")
SETTINGS = {"": "reference", "_fused": "fused"}  # variant suffix -> attention_kernels setting


def paper_config() -> dict:
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    return load_config({**raw, "preset": "paper"})


def plan(cfg: dict) -> list[dict]:
    """One group per study: its fine-tuning settings, QLoRA and one cell per other method."""
    blocks = []
    for study in Grid(cfg):
        if not study.kind.cross:  # the leaderboard's cells are the studies' settings again
            entries = {e: entry.values for e, entry in study.entries.items()}
            blocks.append((study.name, entries, study.finetune))
    groups = []
    for study, methods, ft in blocks:
        picked = {}  # method -> (run, values, whether it is the preferred cell)
        for run, (method, values) in cells(methods).items():
            preferred = all(values.get(k) == v for k, v in PREFERRED.get(method, {}).items())
            if method != "qlora" and (method not in picked or preferred and not picked[method][2]):
                picked[method] = (run, values, preferred)
        group = [{"run": "qlora", "method": "qlora", "values": {}, "note": ""}]
        for method, (run, values, _) in picked.items():
            note = ""
            if METHODS[method].tuning(METHODS[method].make_config(values)) == "full":
                values, note = {**values, "tuning": "lora"}, "tuning: lora (the paper: full)"
            group.append({"run": run, "method": method, "values": values, "note": note})
        groups.append({"study": study, "finetune": ft, "cells": group})
    return groups


def run_child(task: dict) -> dict | str:
    """One cell in a fresh process: its own peak memory, no allocator or paged-optimizer state
    left over from the cells before (bitsandbytes never frees its paged buffers)."""
    cmd = [sys.executable, __file__, "--child", json.dumps(task)]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)  # its log goes to ours
    if done.returncode:
        return {"error": f"exit status {done.returncode} (log above)"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def in_process(task: dict) -> dict | str:
    result = guarded(lambda: step_cell(task))
    free_memory()
    return result


def is_oom(result) -> bool:
    return result == OOM or result.get("train_oom", False)


def ratio(a, b, key: str) -> float | None:
    if not isinstance(a, dict) or not isinstance(b, dict) or not b.get(key) or key not in a:
        return None  # not measured, or (the CPU's resident set) nothing to compare with
    return a[key] / b[key]


def measure_steps(groups: list[dict], setup: dict, run, base_dir) -> list[dict]:
    rows = []
    for group in groups:
        ft = {**group["finetune"], **setup["finetune"]}
        baselines = {}  # layers -> QLoRA's result

        def measure(cell: dict, layers: int, group=group, ft=ft):
            print(f"[gpu_paper] {group['study']}/{cell['run']}, {layers} layers", flush=True)
            task = {**setup["task"], **cell, "finetune": ft, "layers": layers}
            return run({**task, "base_dir": str(base_dir(layers))})

        for cell in group["cells"]:
            oom_at, layers = [], setup["layers"]
            while True:
                if layers not in baselines:
                    baselines[layers] = measure(group["cells"][0], layers)
                base = baselines[layers]
                result = (
                    base if cell["method"] == "qlora" or is_oom(base) else measure(cell, layers)
                )
                if not is_oom(result) or layers // 2 < setup["min_layers"]:
                    break
                oom_at.append(layers)
                layers //= 2
            rows.append(step_row(group["study"], cell, ft, layers, oom_at, result, base))
    return rows


def step_row(study, cell, ft, layers, oom_at, result, base) -> dict:
    status = "OOM" if is_oom(result) else result.get("error", "ok")
    measured = result if status == "ok" else {}
    return {
        "study": study,
        "cell": cell["run"],
        "method": cell["method"],
        "note": cell["note"],
        "status": status,
        "layers": layers,
        "oom_at_layers": oom_at,
        "max_length": ft["max_length"],
        "micro_batch_size": ft.get("micro_batch_size") or ft["batch_size"],
        "lora_r": ft["lora"]["r"],
        "optimizer": ft["optimizer"],
        "gradient_checkpointing": bool(ft.get("gradient_checkpointing")),
        **measured,
        "step_vs_qlora": ratio(measured, base, "step_s"),
        "tokens_per_s_vs_qlora": ratio(measured, base, "tokens_per_s"),
        "peak_vs_qlora": ratio(measured, base, "peak_gib"),
        "eval_vs_qlora": ratio(measured, base, "eval_tokens_per_s"),
    }


def measure_attention(groups: list[dict], setup: dict, args) -> list[dict]:
    by_method = {c["method"]: (c, g) for g in groups for c in g["cells"]}
    rect, rect_group = by_method["rectify"]
    methods = {
        "opamp": by_method["opamp"][0]["values"],
        "rectify": METHODS["rectify"].resolve(
            rect["values"], rect_group["finetune"]["lora"], ResolveContext()
        ),
    }
    device, dtype = setup["task"]["placement"]["device"], getattr(torch, setup["dtype"])
    rows = []
    for n in args.lengths:
        results = {}
        for variant in VARIANTS:
            for suffix, setting in SETTINGS.items():
                if (variant == "sdpa" or variant in EXPLICIT_PATHS) and suffix:
                    continue  # plain SDPA has no other path; the others name theirs
                if variant in EXPLICIT_PATHS and device != "cuda":
                    results[variant] = (setting, _not_run(variant))
                    continue
                print(f"[gpu_paper] attention {variant}{suffix}, {n} tokens", flush=True)
                results[variant + suffix] = (
                    setting,
                    guarded(
                        lambda v=variant, n=n, s=setting: attention_cell(
                            v, n, setup["task"]["shape"], methods, device, dtype, args.repeats, s
                        )
                    ),
                )
                free_memory()
        base = results["sdpa"][1]
        for variant, (setting, r) in results.items():
            rows.append(
                {
                    "tokens": n,
                    "variant": variant,
                    "attention_kernels": setting,
                    "status": "OOM" if r == OOM else r.get("status", "ok"),
                    **(r if r != OOM else {}),
                    "time_vs_sdpa": ratio(r, base, "seconds"),
                    "memory_vs_sdpa": ratio(r, base, "peak_mib_above_inputs"),
                }
            )
    return rows


def _not_run(variant: str) -> dict:
    """The row of an opt-in Triton path on the CPU: not run (its CPU check is the test suite's,
    in Triton's interpreter), rather than the reference path under its name."""
    return {
        "status": "skipped: Triton kernel, CUDA only",
        "path": f"{EXPLICIT_PATHS[variant]} (not run)",
    }


def measure_all_steps(groups: list[dict], setup: dict, args, isolate: bool) -> list[dict]:
    """Every study's cells on random bases saved for the run (deleted after)."""
    device = setup["task"]["placement"]["device"]
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="gpu_paper-") as work:
        bases = {}

        def base_dir(layers: int) -> Path:
            if layers not in bases:
                out = Path(work) / f"base-{layers}"
                bases[layers] = save_random_base(setup["task"]["shape"], layers, out, device)
            return bases[layers]

        return measure_steps(groups, setup, run_child if isolate else in_process, base_dir)


def git_commit() -> str:
    def git(*a):
        done = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD") or "unknown"
        return commit + (" + uncommitted changes" if git("status", "--porcelain") else "")
    except OSError:  # no git
        return "unknown"


def installed_version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "absent"


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    return f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--smoke", action="store_true", help="tiny shapes on the CPU (checks the script)"
    )
    p.add_argument("--out", type=Path, default=OUT, help="folder of gpu_paper.json and .md")
    p.add_argument("--layers", type=int, help="decoder layers to try first (default: preset's)")
    p.add_argument("--min-layers", type=int, default=8, help="fewest layers to retry with")
    p.add_argument("--steps", type=int, default=3, help="timed optimizer steps per cell")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps (0: no warm-up at all)")
    p.add_argument("--repeats", type=int, default=5, help="timed attention repeats")
    p.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192, 32768])
    p.add_argument("--goal-tokens", type=int, default=8192, help="length of the OpAmp goal")
    p.add_argument("--max-length", type=int, help="override every study's max_length")
    p.add_argument("--prompt-tokens", type=int, default=4000, help="generation prompt length")
    p.add_argument("--max-new-tokens", type=int, help="default: the preset's evaluation's")
    p.add_argument("--workdir", type=Path, help="where the random base is saved (16 GB)")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, help="a process per cell")
    p.add_argument(
        "--attention-only", action="store_true", help="only the attention functions (no model)"
    )
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(guarded(lambda: step_cell(json.loads(args.child)))))
        return
    if args.smoke:
        p.set_defaults(**SMOKE)
        args = p.parse_args()
    elif not torch.cuda.is_available():
        raise SystemExit(
            "gpu_paper.py: no CUDA device visible. This benchmark measures the paper scale on a "
            "GPU; `--smoke` runs the script end to end on the CPU with tiny shapes (a check of the "
            "script, not a measurement)."
        )
    cfg = paper_config()
    groups = plan(cfg)
    device = "cpu" if args.smoke else "cuda"
    dtype = "float32" if args.smoke else "bfloat16"
    base_model = {k: cfg["base_model"][k] for k in SHAPE_KEYS}
    shape = SMOKE_SHAPE if args.smoke else {**base_model, **LLAMA_8B}
    quantization = dict(cfg["finetune"]["quantization"])
    overrides = {"max_length": args.max_length} if args.max_length else {}
    if args.smoke:  # 4-bit on the CPU computes in fp32 (the tiny preset's setting)
        overrides["quantization"] = quantization = {**quantization, "compute_dtype": "float32"}
    evaluation = {
        "batch_size": cfg["evaluation"]["batch_size"],
        "max_new_tokens": args.max_new_tokens or cfg["evaluation"]["max_new_tokens"],
        "prompt_tokens": args.prompt_tokens,
    }
    setup = {
        "layers": args.layers or shape["layers"],
        "min_layers": args.min_layers,
        "dtype": dtype,
        "finetune": overrides,
        "task": {
            "shape": shape,
            "placement": {"device": device, "dtype": dtype, "gpus": int(device == "cuda")},
            "steps": args.steps,
            "warmup": args.warmup,
            "eval": evaluation,
        },
    }
    isolate = args.isolate if args.isolate is not None else device == "cuda"
    steps = [] if args.attention_only else measure_all_steps(groups, setup, args, isolate)
    attention = measure_attention(groups, setup, args)
    meta = {
        "device": device_name(device),
        "date": date.today().isoformat(),
        "commit": git_commit(),
        "torch": torch.__version__,  # the build: +cu130, +cpu (its package metadata may omit it)
        **{lib: version(lib) for lib in ("transformers", "bitsandbytes", "peft")},
        "triton": installed_version("triton"),  # compiles the fused kernels on CUDA
        "smoke": args.smoke,
        "attention_only": args.attention_only,
        "preset": "paper",
        "shape": {**shape, "layers": setup["layers"]},
        "layers_used": sorted({r["layers"] for r in steps}),
        "quantization": f"{quantization['quant_type']}, double quant "
        f"{quantization['double_quant']}, {quantization['compute_dtype']} compute",
        "dtype": dtype,
        "steps": args.steps,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "eval": evaluation,
        "attention_lengths": args.lengths,
        "goal_tokens": args.goal_tokens,
        "isolated_processes": isolate,
        "memory": "torch.cuda.max_memory_allocated (paged optimizer state, in unified memory, "
        "is not in it)"
        if device == "cuda"
        else "peak resident set (VmHWM)",
    }
    data = {"meta": meta, "goals": goals(steps, attention, args.goal_tokens), "steps": steps}
    data["attention"] = attention
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_paper.json").write_text(json.dumps(data, indent=1) + "\n")
    (args.out / "gpu_paper.md").write_text(markdown(data))
    print(markdown(data))


if __name__ == "__main__":
    main()
