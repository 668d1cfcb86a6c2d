"""Benchmark: block-wise rectified attention vs plain causal SDPA vs the materialised formula.

Forward + backward (loss ``out.square().mean()``) of the attention function as the model calls it:
post-RoPE q, the low-rank query update u, k and v, laid out as the model's projections leave them
(``[B, L, H, D]`` viewed as ``[B, H, L, D]``), all requiring grad, causal prefill (no mask), at
several sequence lengths. Variants: ``sdpa`` is plain causal SDPA on q, k, v (the baseline: no
update), ``rectified_blockwise`` is ``zoomattn.methods.rectify.kernel.rectified_attention`` with
g = Rectifier("max", 3.0) (query blocks of ``--block`` rows, each a checkpoint), and
``rectified_materialised`` the formula with the whole ``[L, S]`` score matrix; it is skipped at a
length where its estimated memory exceeds ``--max-materialised-gib``.

Memory: each (variant, length) runs in a fresh process with glibc's mmap threshold pinned, so
freed tensors go back to the OS and the resident set follows live memory. After one warm-up step,
the kernel's peak-RSS counter is reset (``/proc/self/clear_refs``) and one more step runs; its
peak RSS minus the RSS before it is the peak *above the inputs*. The peak *including the inputs*
adds the inputs the variant reads (q, k, v for SDPA; q, u, k, v for the rectified variants).
Time: all variants of one length alternate in one process (default malloc), median of the repeats.

    python benchmarks/rectified_attention.py   # -> benchmarks/results/rectified_attention.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import date
from pathlib import Path

from measure import median_seconds, peak_mib_above, run_child

VARIANTS = ("sdpa", "rectified_blockwise", "rectified_materialised")
RECTIFIED = ("rectified_blockwise", "rectified_materialised")
G_NAME, G_XI = "max", 3.0
OUT = Path(__file__).resolve().parent / "results"
# [B, H, L, S] fp32 matrices the materialised variant holds at its peak (measured: ~14 at 2048
# tokens with this g; the smooth max keeps several intermediates for backward), with a margin.
MATERIALISED_MATRICES = 16


def _setup(n: int, heads: int, kv_heads: int, head_dim: int, threads: int, block: int | None):
    """Inputs and the step function of every variant (run in the child process)."""
    import torch

    from zoomattn.attention.math import sdpa
    from zoomattn.methods.rectify.kernel import (
        Rectifier,
        rectified_attention,
        rectified_attention_materialised,
    )

    torch.set_num_threads(threads)
    torch.manual_seed(0)

    def projected(h):  # [B, L, H, D] viewed as [B, H, L, D], as q_proj(x).view(...).transpose(1, 2)
        return torch.randn(1, n, h, head_dim).transpose(1, 2).requires_grad_(True)

    q, u, k, v = projected(heads), projected(heads), projected(kv_heads), projected(kv_heads)
    g = Rectifier(G_NAME, G_XI)
    fns = {
        "sdpa": lambda: sdpa(q, k, v),
        "rectified_blockwise": lambda: rectified_attention(q, u, k, v, g, block=block),
        "rectified_materialised": lambda: rectified_attention_materialised(q, u, k, v, g),
    }
    inputs = {"sdpa": (q, k, v), **{name: (q, u, k, v) for name in RECTIFIED}}

    def step(variant):
        fns[variant]().square().mean().backward()
        for t in (q, u, k, v):
            t.grad = None

    input_mib = {
        name: sum(t.numel() * t.element_size() for t in ts) / 2**20 for name, ts in inputs.items()
    }
    return step, input_mib


def measure_memory(variant: str, n: int, shape: dict, threads: int, block: int | None) -> dict:
    step, input_mib = _setup(n, **shape, threads=threads, block=block)
    peak = peak_mib_above(lambda: step(variant))
    return {"variant": variant, "n": n, "peak_mib": peak, "input_mib": input_mib[variant]}


def measure_time(
    variants: list[str], n: int, shape: dict, threads: int, block: int | None, repeats: int
) -> dict:
    step, _ = _setup(n, **shape, threads=threads, block=block)
    return median_seconds(step, variants, repeats)


def materialised_bytes(n: int, heads: int) -> int:
    return MATERIALISED_MATRICES * heads * n * n * 4  # B = 1, fp32


def report(memory: dict, seconds: dict, skipped: dict, args) -> tuple[dict, str]:
    """memory[(variant, n)] = measure_memory(...); seconds[n][variant] = median seconds;
    skipped[n] = estimated GiB of the materialised variant where it did not run."""
    table = []
    for n in args.lengths:
        base, mat = memory[("sdpa", n)], memory.get(("rectified_materialised", n))
        for variant in RECTIFIED:
            if n in skipped and variant == "rectified_materialised":
                table.append({"n": n, "variant": variant, "skipped_needs_gib": skipped[n]})
                continue
            r = memory[(variant, n)]
            e = {
                "n": n,
                "variant": variant,
                "seconds": seconds[n][variant],
                "peak_above_inputs_mib": r["peak_mib"],
                "peak_with_inputs_mib": r["peak_mib"] + r["input_mib"],
                "input_mib": r["input_mib"],
                "time_vs_sdpa": seconds[n][variant] / seconds[n]["sdpa"],
                "memory_above_inputs_vs_sdpa": r["peak_mib"] / base["peak_mib"],
                "memory_with_inputs_vs_sdpa": (r["peak_mib"] + r["input_mib"])
                / (base["peak_mib"] + base["input_mib"]),
                "sdpa_seconds": seconds[n]["sdpa"],
                "sdpa_peak_above_inputs_mib": base["peak_mib"],
                "sdpa_input_mib": base["input_mib"],
            }
            if mat is not None:
                e["time_vs_materialised"] = seconds[n][variant] / seconds[n][RECTIFIED[1]]
                e["memory_above_inputs_vs_materialised"] = r["peak_mib"] / mat["peak_mib"]
                e["materialised_seconds"] = seconds[n][RECTIFIED[1]]
                e["materialised_peak_above_inputs_mib"] = mat["peak_mib"]
            table.append(e)
    block = args.block or "default (QUERY_BLOCK)"
    meta = {
        "date": date.today().isoformat(),
        "threads": args.threads,
        "repeats": args.repeats,
        "block": args.block,
        "g": f'Rectifier("{G_NAME}", {G_XI})',
        "shape": f"B=1, heads={args.heads}, kv_heads={args.kv_heads}, "
        f"head_dim={args.head_dim}, fp32, CPU",
        "max_materialised_gib": args.max_materialised_gib,
        "load_average_1min_start_end": args.load,
    }

    def fmt(x, spec):
        return "–" if x is None else format(x, spec)

    lines = [
        f"Rectified attention ({meta['g']}, causal) forward+backward vs plain causal SDPA and the "
        f"materialised formula ({meta['shape']}; query block {block}; {args.threads} threads; "
        f"{meta['date']}; time: median of {args.repeats}, variants interleaved; memory: peak "
        f"live memory of one warm step, fresh process per cell; 1-min load average at start/end "
        f"{args.load[0]:.1f}/{args.load[1]:.1f}: other processes inflate times).",
        "",
        "| tokens | variant | time / SDPA | peak mem above inputs / SDPA "
        "| peak mem with inputs / SDPA | time / materialised | peak mem / materialised "
        "| s | MiB above inputs | inputs MiB | SDPA s | SDPA MiB above inputs | SDPA inputs MiB |",
        "|" + "---|" * 13,
    ]
    for e in table:
        if "skipped_needs_gib" in e:
            note = f"skipped (needs ~{e['skipped_needs_gib']:.0f} GiB)"
            lines.append(f"| {e['n']} | {e['variant']} | {note} |" + " |" * 11)
            continue
        lines.append(
            f"| {e['n']} | {e['variant']} | {e['time_vs_sdpa']:.2f}× "
            f"| {e['memory_above_inputs_vs_sdpa']:.2f}× | {e['memory_with_inputs_vs_sdpa']:.2f}× "
            f"| {fmt(e.get('time_vs_materialised'), '.2f')} "
            f"| {fmt(e.get('memory_above_inputs_vs_materialised'), '.3f')} "
            f"| {e['seconds']:.3f} | {e['peak_above_inputs_mib']:.1f} | {e['input_mib']:.1f} "
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
    p.add_argument("--block", type=int, default=None, help="query block (default: QUERY_BLOCK)")
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
    shape = {"heads": args.heads, "kv_heads": args.kv_heads, "head_dim": args.head_dim}
    common = {"shape": shape, "threads": args.threads, "block": args.block}
    memory, seconds, skipped = {}, {}, {}
    load_start = os.getloadavg()[0]
    for n in args.lengths:
        need = materialised_bytes(n, args.heads)
        if need > args.max_materialised_gib * 2**30:
            skipped[n] = need / 2**30
        variants = [v for v in VARIANTS if n not in skipped or v != "rectified_materialised"]
        for variant in variants:
            task = {"kind": "memory", "variant": variant, "n": n, **common}
            memory[(variant, n)] = run_child(__file__, task)
            print(json.dumps(memory[(variant, n)]), flush=True)
        task = {"kind": "time", "variants": variants, "n": n, **common, "repeats": args.repeats}
        seconds[n] = run_child(__file__, task)
        print(json.dumps({"n": n, "seconds": seconds[n]}), flush=True)
    args.load = (load_start, os.getloadavg()[0])
    data, md = report(memory, seconds, skipped, args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rectified_attention.json").write_text(json.dumps(data, indent=1) + "\n")
    (args.out / "rectified_attention.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
