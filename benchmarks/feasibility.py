"""Feasibility of the `paper` preset on one GPU: memory per fine-tune and GPU-hours of the grid.

Memory is *computed*, not measured: the preset's model is built on the meta device (no weights,
no GPU) with every method and LoRA attached exactly as a fine-tune job attaches them, and its
tensors are counted: 4-bit NF4 weights at 0.5 byte per parameter plus double-quantised constants
(≈0.127 bit per parameter), unquantised weights in bf16 (or fp32 where the preset tunes the full
model in fp32), and for every trainable parameter its weight, gradient and optimizer state (AdamW
32-bit: 8 bytes, 8-bit: 2). Activations are not in this sum: with gradient checkpointing they
grow with the sequence length, and the GPU benchmark (`benchmarks/gpu_paper.py`) measures the
peak; where its results file exists, its measured peaks are quoted beside the computed floor.

GPU-hours are an upper bound: steps × batch × max_length tokens (every sequence at the preset's
limit; real data is shorter) at a training throughput in tokens/s, the GPU benchmark's measured
one for the method when present, else the one given with ``--tokens-per-second`` (labelled).

    python benchmarks/feasibility.py   # -> benchmarks/results/feasibility.{json,md}
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parent / "results"
NF4_BYTES = 0.5 + 0.127 / 8  # 4-bit codes + double-quantised absmax constants, per parameter
OPTIMIZER_BYTES = {"adamw": 8, "paged_adamw_32bit": 8, "paged_adamw_8bit": 2}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
GIB = 2**30


def paper_config() -> dict:
    from zoomattn.config import ROOT, load_config

    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    raw["preset"] = "paper"
    return load_config(raw)


def _meta_model(base: dict, method: str, values: dict, ft: dict):
    """The fine-tune's model on the meta device: base, the method's modules, LoRA (4-bit runs)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import zoomattn.attention.interface as attn_interface
    from zoomattn.methods import METHODS

    config = LlamaConfig(
        vocab_size=128256,
        hidden_size=base["hidden"],
        num_hidden_layers=base["layers"],
        num_attention_heads=base["heads"],
        num_key_value_heads=base["kv_heads"],
        intermediate_size=base["intermediate"],
    )
    config._attn_implementation = attn_interface.NAME
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    m = METHODS[method]
    cfg = m.make_config(values)
    m.attach(model, cfg)
    if m.tuning(cfg) == "full":
        return model, True
    from peft import LoraConfig, get_peft_model

    lora = ft["lora"]
    targets = m.lora_targets(lora["target_modules"])
    model = get_peft_model(model, LoraConfig(r=lora["r"], lora_alpha=lora["alpha"],
                                             target_modules=targets))  # fmt: skip
    for name, p in model.named_parameters():
        if ".zoom." in name:
            p.requires_grad_(True)
    return model, False


def _resolved_values(m, cfg: dict, study) -> dict:
    """The cell's values with the context a job would fill in (heads, marker ids)."""
    from zoomattn.data.tokenizer import build_tokenizer
    from zoomattn.methods import METHODS, ResolveContext

    n_heads = cfg["base_model"]["heads"]
    heads = [[layer, h] for layer in range(8, 24) for h in range(n_heads)][: max(64, 1)]
    context = ResolveContext(
        selected_heads=heads[: m.values.get("heads", 0) or 0],
        middle_heads=heads[:32],
        tokenizer=build_tokenizer(["a", "b"]),
        xi_auto=3.0,
    )
    ft = {**study.finetune, **m.finetune}
    return METHODS[m.method].resolve(m.values, ft["lora"], context), ft


def memory_gib(model, full: bool, ft: dict, weight_dtype: str) -> dict:
    trainable = frozen_linear = frozen_other = 0
    for name, p in model.named_parameters():
        n = p.numel()
        if p.requires_grad:
            trainable += n
        elif not full and p.dim() == 2 and "embed" not in name and "lm_head" not in name:
            frozen_linear += n  # quantised to 4-bit by bitsandbytes
        else:
            frozen_other += n
    state = OPTIMIZER_BYTES[ft.get("optimizer", "adamw")]
    weight = DTYPE_BYTES[weight_dtype]
    out = {
        "frozen_weights": (frozen_linear * NF4_BYTES + frozen_other * 2) / GIB,
        "trainable_params_m": trainable / 1e6,
        "trainable_weights_grads_optimizer": trainable * (2 * weight + state) / GIB,
    }
    out["floor"] = out["frozen_weights"] + out["trainable_weights_grads_optimizer"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens-per-second", type=float, default=None,
                        help="training throughput when no GPU benchmark result exists")  # fmt: skip
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    from zoomattn.grid import Grid
    from zoomattn.placement import plan

    cfg = paper_config()
    measured = {}
    bench = OUT / "gpu_paper.json"
    if bench.exists():  # the GPU benchmark's measured steps, one per (study, method)
        data = json.loads(bench.read_text())
        if not data["meta"].get("smoke"):
            for row in data["steps"]:
                if row["status"] == "ok":
                    measured[(row["study"], row["method"])] = row
    rows, seen = [], {}
    grid = Grid(cfg)
    for m in grid.models.values():
        study = grid.studies[m.study]
        values, ft = _resolved_values(m, cfg, study)
        key = (
            m.study,
            m.method,
            json.dumps(values, sort_keys=True),
            json.dumps(ft, sort_keys=True),
        )
        if key not in seen:
            model, full = _meta_model(study.base_model, m.method, values, ft)
            dtype = "float32" if full else plan(cfg, "finetune").dtype  # full: fp32 masters
            seen[key] = memory_gib(model, full, ft, dtype) | {"full": full}
        mem = seen[key]
        tokens = ft["steps"] * ft["batch_size"] * (ft.get("max_length") or 8192)
        bench_row = measured.get((m.study, m.method), {})
        tps = bench_row.get("tokens_per_s") or args.tokens_per_second
        rows.append({
            "model": m.id, "study": m.study, "method": m.method, **mem,
            "measured_peak_gib": bench_row.get("peak_gib"),
            "tokens_upper_bound": tokens,
            "tokens_per_second": tps,
            "throughput_source": "gpu benchmark" if bench_row else "given (--tokens-per-second)",
            "gpu_hours_upper_bound": tokens / tps / 3600 if tps else None,
        })  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "feasibility.json").write_text(json.dumps(rows, indent=1))
    (args.out / "feasibility.md").write_text(_markdown(rows))
    print((args.out / "feasibility.md").read_text())


def _markdown(rows: list[dict]) -> str:
    lines = [
        "Feasibility of the `paper` preset on one GPU (80 GB): memory **computed** on the meta "
        "device (weights, trainable weights + gradients + optimizer state; activations not "
        "included), GPU-hours an **upper bound** (every sequence at max_length).",
        "",
        "| study | fine-tunes | method | tuning | trainable (M) | frozen weights GiB | "
        "trainable + grads + optimizer GiB | floor GiB | fits 80 GB? | measured peak GiB | "
        "GPU-h each (≤) | throughput source |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["study"], r["method"], round(r["floor"], 1)), []).append(r)
    total = 0.0
    for (study, method, _), rs in groups.items():
        r = rs[0]
        hours = r["gpu_hours_upper_bound"]
        total += (hours or 0) * len(rs)
        fits = "yes" if r["floor"] < 80 else "**no**"
        lines.append(
            f"| {study} | {len(rs)} | {method} | {'full' if r['full'] else 'LoRA, 4-bit base'} | "
            f"{r['trainable_params_m']:.0f} | {r['frozen_weights']:.1f} | "
            f"{r['trainable_weights_grads_optimizer']:.1f} | {r['floor']:.1f} | {fits} | "
            f"{r['measured_peak_gib'] or 'not measured'} | "
            f"{'—' if hours is None else f'{hours:.0f}'} | {r['throughput_source']} |"
        )
    lines += ["", f"Grid total (≤): {total:.0f} GPU-hours of fine-tuning" if total else ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
