"""GPU micro-benchmark: the fused Triton rectified attention against plain SDPA and the block-wise
torch path, forward + backward, on CUDA.

As the model calls attention: post-RoPE q, the low-rank query update u, k, v laid out as the
projections leave them (``[B, L, H, D]`` viewed as ``[B, H, L, D]``), bf16, B = 1, 32 query heads
over 8 KV heads, head dim 128, causal prefill (no mask), g = Rectifier("max", 3.0), loss
``out.square().mean()``. Variants: ``sdpa`` (plain causal SDPA on q, k, v: the baseline),
``blockwise`` (``rectified_attention``, the reference path) and ``fused``
(``triton_kernel.fused_rectified_attention``; ``--tiles`` overrides its tile table). Time: CUDA
events, median of ``--repeats`` steps after one warm-up (which compiles the kernels), variants
interleaved. Memory: peak allocated during one step above what was allocated before it (the
inputs), ``torch.cuda.max_memory_allocated``. Also the fused output's relative error to the
block-wise one, as a sanity check. Prints one JSON line per length, then a summary line.

    PYTHONPATH=$PWD python benchmarks/rectified_triton.py                  # 2048 and 8192 tokens
    PYTHONPATH=$PWD python benchmarks/rectified_triton.py --lengths 8192 \\
        --tiles '{"forward": [128, 32, 8, 2], "q": [32, 64, 8, 2]}'
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

VARIANTS = ("sdpa", "blockwise", "fused")


def _inputs(n: int, heads: int, kv_heads: int, head_dim: int):
    torch.manual_seed(0)

    def projected(h, std=1.0):
        x = std * torch.randn(1, n, h, head_dim, device="cuda", dtype=torch.bfloat16)
        return x.transpose(1, 2).requires_grad_(True)

    return projected(heads), projected(heads, 0.3), projected(kv_heads), projected(kv_heads)


def _steps(q, u, k, v, tiles):
    from zoomattn.attention.math import sdpa
    from zoomattn.methods.rectify.kernel import Rectifier, rectified_attention
    from zoomattn.methods.rectify.triton_kernel import fused_rectified_attention

    g = Rectifier("max", 3.0)
    forward = {
        "sdpa": lambda: sdpa(q, k, v),
        "blockwise": lambda: rectified_attention(q, u, k, v, g),
        "fused": lambda: fused_rectified_attention(q, u, k, v, g, tiles=tiles),
    }

    def step(variant):
        forward[variant]().square().mean().backward()
        for t in (q, u, k, v):
            t.grad = None

    return step, forward


def _milliseconds(step, variant) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    step(variant)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def _peak_mib(step, variant) -> float:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    step(variant)
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def measure(n: int, args) -> dict:
    q, u, k, v = _inputs(n, args.heads, args.kv_heads, args.head_dim)
    step, forward = _steps(q, u, k, v, args.tiles)
    with torch.no_grad():
        fused, blockwise = forward["fused"]().float(), forward["blockwise"]().float()
    error = ((fused - blockwise).norm() / blockwise.norm()).item()
    del fused, blockwise
    for variant in VARIANTS:
        step(variant)  # warm-up: compiles the Triton kernels, fills the caches
    times = {variant: [] for variant in VARIANTS}
    for _ in range(args.repeats):
        for variant in VARIANTS:
            times[variant].append(_milliseconds(step, variant))
    row = {"n": n, "fused_vs_blockwise_rel_error": error}
    for variant in VARIANTS:
        row[f"{variant}_ms"] = statistics.median(times[variant])
        row[f"{variant}_peak_mib_above_inputs"] = _peak_mib(step, variant)
    for variant in ("blockwise", "fused"):
        row[f"{variant}_time_vs_sdpa"] = row[f"{variant}_ms"] / row["sdpa_ms"]
        row[f"{variant}_memory_vs_sdpa"] = (
            row[f"{variant}_peak_mib_above_inputs"] / row["sdpa_peak_mib_above_inputs"]
        )
    row["input_mib"] = sum(t.numel() * t.element_size() for t in (q, u, k, v)) / 2**20
    return row


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192])
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--tiles", type=json.loads, default=None,
                   help='JSON {"forward"|"kv"|"q": [BLOCK_M, BLOCK_N, warps, stages]}, '
                        "merged over the default table")  # fmt: skip
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("rectified_triton.py: needs a CUDA device (the fused kernel's)")
    if args.tiles is not None:
        from zoomattn.methods.rectify.triton_kernel import _tiles

        default = _tiles(args.head_dim, torch.device("cuda"))
        args.tiles = {**default, **{name: tuple(t) for name, t in args.tiles.items()}}
    rows = []
    for n in args.lengths:
        rows.append(measure(n, args))
        print(json.dumps(rows[-1]), flush=True)
    summary = {
        "device": torch.cuda.get_device_name(),
        "shape": f"B=1, heads={args.heads}, kv_heads={args.kv_heads}, head_dim={args.head_dim}, "
        "bf16, causal, fwd+bwd",
        "tiles": args.tiles or "default",
        **{f"{r['n']}": {key: float(f"{r[key]:.4g}") for key in r if "vs" in key} for r in rows},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
