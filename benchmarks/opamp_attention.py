"""Benchmark: fused OpAmp attention vs plain causal SDPA vs the materialised OpAmp formula.

Forward + backward of the attention function as the model calls it (post-RoPE q/k/v in, output
out; OpAmp includes its four adapters), at several sequence lengths. Each (variant, length) runs in
a fresh subprocess so that its peak memory is its own: peak = the process's peak RSS during one
forward+backward minus its RSS just before (inputs already allocated). Time = median of repeats.
Results are ratios measured in the same run; write them with

    python benchmarks/opamp_attention.py   # -> benchmarks/results/opamp_attention.{json,md}
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

VARIANTS = ("sdpa", "opamp_fused", "opamp_fused_recompute", "opamp_materialised")
OUT = Path(__file__).resolve().parent / "results"


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024


def measure(
    variant: str,
    n: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    adapter_dim: int,
    repeats: int,
    threads: int,
) -> dict:
    """Runs inside the child process."""
    import torch

    from zoomattn.attention.math import sdpa
    from zoomattn.methods.opamp.config import OpAmpConfig
    from zoomattn.methods.opamp.model import OpAmpAttention

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    q = torch.randn(1, heads, n, head_dim, requires_grad=True)
    k = torch.randn(1, kv_heads, n, head_dim, requires_grad=True)
    v = torch.randn(1, kv_heads, n, head_dim, requires_grad=True)
    cfg = OpAmpConfig(10.0, adapter_dim, 1, 0.0, recompute=variant == "opamp_fused_recompute")
    layer = OpAmpAttention(heads, kv_heads, head_dim, cfg)
    fn = {
        "sdpa": lambda: sdpa(q, k, v),
        "opamp_fused": lambda: layer(q, k, v),
        "opamp_fused_recompute": lambda: layer(q, k, v),
        "opamp_materialised": lambda: layer.materialised(q, k, v),
    }[variant]

    def step():
        fn().square().mean().backward()
        for t in (q, k, v, *layer.parameters()):
            t.grad = None

    before = _rss_kib()
    step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return {
        "variant": variant,
        "n": n,
        "seconds": statistics.median(times),
        "peak_mib": peak / 1024,
    }


def run_child(variant: str, n: int, args) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        variant,
        "--lengths",
        str(n),
        "--heads",
        str(args.heads),
        "--kv-heads",
        str(args.kv_heads),
        "--head-dim",
        str(args.head_dim),
        "--adapter-dim",
        str(args.adapter_dim),
        "--repeats",
        str(args.repeats),
        "--threads",
        str(args.threads),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        return {"variant": variant, "n": n, "error": done.stderr.strip().splitlines()[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def materialised_bytes(n: int, heads: int) -> int:
    return 6 * heads * n * n * 4  # scores/probs of two branches, M̄, and their gradients (fp32)


def report(rows: list[dict], args) -> tuple[dict, str]:
    by = {(r["variant"], r["n"]): r for r in rows}
    table = []
    for n in args.lengths:
        base, mat = by[("sdpa", n)], by[("opamp_materialised", n)]
        for variant in ("opamp_fused", "opamp_fused_recompute"):
            r = by[(variant, n)]
            e = {
                "n": n,
                "variant": variant,
                "seconds": r["seconds"],
                "peak_mib": r["peak_mib"],
                "time_vs_sdpa": r["seconds"] / base["seconds"],
                "memory_vs_sdpa": r["peak_mib"] / base["peak_mib"],
                "sdpa_seconds": base["seconds"],
                "sdpa_peak_mib": base["peak_mib"],
                "materialised_seconds": mat["seconds"],
                "materialised_peak_mib": mat["peak_mib"],
            }
            if mat["seconds"] is not None:
                e["time_vs_materialised"] = r["seconds"] / mat["seconds"]
                e["memory_vs_materialised"] = r["peak_mib"] / mat["peak_mib"]
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
        f"({meta['shape']}; {args.threads} threads; {meta['date']}; median of {args.repeats}).",
        "",
        "| tokens | variant | time / SDPA | peak mem / SDPA | time / materialised "
        "| peak mem / materialised | s | MiB | SDPA s | SDPA MiB | materialised s "
        "| materialised MiB |",
        "|" + "---|" * 12,
    ]
    for e in table:
        lines.append(
            f"| {e['n']} | {e['variant']} | {e['time_vs_sdpa']:.2f}× | {e['memory_vs_sdpa']:.2f}× "
            f"| {fmt(e.get('time_vs_materialised'), '.2f')} "
            f"| {fmt(e.get('memory_vs_materialised'), '.3f')} | {e['seconds']:.3f} "
            f"| {e['peak_mib']:.1f} | {e['sdpa_seconds']:.3f} | {e['sdpa_peak_mib']:.1f} "
            f"| {fmt(e['materialised_seconds'], '.3f')} "
            f"| {fmt(e['materialised_peak_mib'], '.1f')} |"
        )
    return {"meta": meta, "rows": table}, "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192])
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=16)
    p.add_argument("--adapter-dim", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-materialised-gib", type=float, default=12.0)
    p.add_argument("--child", choices=VARIANTS)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    if args.child:
        print(
            json.dumps(
                measure(
                    args.child,
                    args.lengths[0],
                    args.heads,
                    args.kv_heads,
                    args.head_dim,
                    args.adapter_dim,
                    args.repeats,
                    args.threads,
                )
            )
        )
        return
    rows = []
    for n in args.lengths:
        for variant in VARIANTS:
            too_big = materialised_bytes(n, args.heads) > args.max_materialised_gib * 2**30
            if variant == "opamp_materialised" and too_big:
                rows.append({"variant": variant, "n": n, "seconds": None, "peak_mib": None})
                continue
            rows.append(run_child(variant, n, args))
            print(json.dumps(rows[-1]), flush=True)
    data, md = report(rows, args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "opamp_attention.json").write_text(json.dumps(data, indent=1) + "\n")
    (args.out / "opamp_attention.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
