"""Benchmark: fused OpAmp attention vs plain causal SDPA vs the materialised OpAmp formula.

Forward + backward of the attention function as the model calls it (post-RoPE q/k/v laid out as
the model's projections leave them, output out; OpAmp includes its four adapters), at several
sequence lengths. Variants: ``opamp_fused`` is what training runs on CPU (the memory-lean
autograd function of ``zoomattn.methods.opamp.kernel``), ``opamp_fused_autograd`` is plain
autograd through the two SDPA calls (the path on devices without a wired kernel), and
``opamp_materialised`` the formula.

Memory: each (variant, length) runs in a fresh process with glibc's mmap threshold pinned, so
freed tensors go back to the OS and the resident set follows live memory. After one warm-up step,
the kernel's peak-RSS counter is reset (``/proc/self/clear_refs``) and one more step runs; its
peak RSS minus the RSS before it is the peak *above the inputs*. The peak *including the inputs*
adds q, k, v and the adapter weights (what ``torch.cuda.max_memory_allocated`` would count).
Time: all variants of one length alternate in one process (default malloc), median of the repeats.

    python benchmarks/opamp_attention.py   # -> benchmarks/results/opamp_attention.{json,md}
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path

from measure import median_seconds, peak_mib_above, run_child

VARIANTS = ("sdpa", "opamp_fused", "opamp_fused_autograd", "opamp_materialised")
OPAMP = ("opamp_fused", "opamp_fused_autograd")
OUT = Path(__file__).resolve().parent / "results"


def _setup(n: int, heads: int, kv_heads: int, head_dim: int, adapter_dim: int, threads: int):
    """Inputs and the step function of every variant (run in the child process)."""
    import torch

    from zoomattn.attention.math import sdpa
    from zoomattn.methods.opamp.config import OpAmpConfig
    from zoomattn.methods.opamp.model import OpAmpAttention

    torch.set_num_threads(threads)
    torch.manual_seed(0)

    def projected(h):  # [B, L, H, D] viewed as [B, H, L, D], as q_proj(x).view(...).transpose(1, 2)
        return torch.randn(1, n, h, head_dim).transpose(1, 2).requires_grad_(True)

    q, k, v = projected(heads), projected(kv_heads), projected(kv_heads)
    layer = OpAmpAttention(heads, kv_heads, head_dim, OpAmpConfig(10.0, adapter_dim, 1, 0.0))
    fns = {
        "sdpa": lambda: sdpa(q, k, v),
        "opamp_fused": lambda: layer(q, k, v, path="lean"),
        "opamp_fused_autograd": lambda: layer(q, k, v, path="plain"),
        "opamp_materialised": lambda: layer.materialised(q, k, v),
    }
    tensors = (q, k, v, *layer.parameters())

    def step(variant):
        fns[variant]().square().mean().backward()
        for t in tensors:
            t.grad = None

    input_mib = sum(t.numel() * t.element_size() for t in tensors) / 2**20
    return step, input_mib


def measure_memory(variant: str, n: int, shape: dict, threads: int) -> dict:
    step, input_mib = _setup(n, **shape, threads=threads)
    peak = peak_mib_above(lambda: step(variant))
    return {"variant": variant, "n": n, "peak_mib": peak, "input_mib": input_mib}


def measure_time(variants: list[str], n: int, shape: dict, threads: int, repeats: int) -> dict:
    step, _ = _setup(n, **shape, threads=threads)
    return median_seconds(step, variants, repeats)


def materialised_bytes(n: int, heads: int) -> int:
    return 6 * heads * n * n * 4  # scores/probs of two branches, M̄, and their gradients (fp32)


def report(memory: dict, seconds: dict, args) -> tuple[dict, str]:
    """memory[(variant, n)] = measure_memory(...); seconds[n][variant] = median seconds."""
    table = []
    for n in args.lengths:
        base, mat = memory[("sdpa", n)], memory.get(("opamp_materialised", n))
        for variant in OPAMP:
            r = memory[(variant, n)]
            e = {
                "n": n,
                "variant": variant,
                "seconds": seconds[n][variant],
                "peak_above_inputs_mib": r["peak_mib"],
                "peak_with_inputs_mib": r["peak_mib"] + r["input_mib"],
                "time_vs_sdpa": seconds[n][variant] / seconds[n]["sdpa"],
                "memory_above_inputs_vs_sdpa": r["peak_mib"] / base["peak_mib"],
                "memory_with_inputs_vs_sdpa": (r["peak_mib"] + r["input_mib"])
                / (base["peak_mib"] + base["input_mib"]),
                "sdpa_seconds": seconds[n]["sdpa"],
                "sdpa_peak_above_inputs_mib": base["peak_mib"],
                "sdpa_input_mib": base["input_mib"],
            }
            if mat is not None:
                e["time_vs_materialised"] = seconds[n][variant] / seconds[n]["opamp_materialised"]
                e["memory_above_inputs_vs_materialised"] = r["peak_mib"] / mat["peak_mib"]
                e["materialised_seconds"] = seconds[n]["opamp_materialised"]
                e["materialised_peak_above_inputs_mib"] = mat["peak_mib"]
            table.append(e)
    meta = {
        "date": date.today().isoformat(),
        "threads": args.threads,
        "repeats": args.repeats,
        "shape": f"B=1, heads={args.heads}, kv_heads={args.kv_heads}, "
        f"head_dim={args.head_dim}, adapter_dim={args.adapter_dim}, fp32, CPU",
    }

    def fmt(x, spec):
        return "skipped" if x is None else format(x, spec)

    lines = [
        f"OpAmp attention forward+backward vs plain causal SDPA and the materialised formula "
        f"({meta['shape']}; {args.threads} threads; {meta['date']}; time: median of "
        f"{args.repeats}, variants interleaved; memory: peak live memory of one warm step).",
        "",
        "| tokens | variant | time / SDPA | peak mem above inputs / SDPA "
        "| peak mem with inputs / SDPA | time / materialised | peak mem / materialised "
        "| s | MiB above inputs | SDPA s | SDPA MiB above inputs | inputs MiB |",
        "|" + "---|" * 12,
    ]
    for e in table:
        lines.append(
            f"| {e['n']} | {e['variant']} | {e['time_vs_sdpa']:.2f}× "
            f"| {e['memory_above_inputs_vs_sdpa']:.2f}× | {e['memory_with_inputs_vs_sdpa']:.2f}× "
            f"| {fmt(e.get('time_vs_materialised'), '.2f')} "
            f"| {fmt(e.get('memory_above_inputs_vs_materialised'), '.3f')} "
            f"| {e['seconds']:.3f} | {e['peak_above_inputs_mib']:.1f} "
            f"| {e['sdpa_seconds']:.3f} | {e['sdpa_peak_above_inputs_mib']:.1f} "
            f"| {e['sdpa_input_mib']:.1f} |"
        )
    return {"meta": meta, "rows": table}, "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192])
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=16)
    p.add_argument("--adapter-dim", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-materialised-gib", type=float, default=12.0)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    if args.child:
        task = json.loads(args.child)
        if task.pop("kind") == "memory":
            print(json.dumps(measure_memory(**task)))
        else:
            print(json.dumps(measure_time(**task)))
        return
    shape = {
        "heads": args.heads,
        "kv_heads": args.kv_heads,
        "head_dim": args.head_dim,
        "adapter_dim": args.adapter_dim,
    }
    memory, seconds = {}, {}
    for n in args.lengths:
        fits = materialised_bytes(n, args.heads) <= args.max_materialised_gib * 2**30
        variants = [v for v in VARIANTS if fits or v != "opamp_materialised"]
        for variant in variants:
            task = {"kind": "memory", "variant": variant, "n": n, "shape": shape}
            memory[(variant, n)] = run_child(__file__, {**task, "threads": args.threads})
            print(json.dumps(memory[(variant, n)]), flush=True)
        task = {"kind": "time", "variants": variants, "n": n, "shape": shape}
        seconds[n] = run_child(__file__, {**task, "threads": args.threads, "repeats": args.repeats})
        print(json.dumps({"n": n, "seconds": seconds[n]}), flush=True)
    data, md = report(memory, seconds, args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "opamp_attention.json").write_text(json.dumps(data, indent=1) + "\n")
    (args.out / "opamp_attention.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
