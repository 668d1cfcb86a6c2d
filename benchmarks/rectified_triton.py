"""GPU micro-benchmark: the fused Triton rectified attention against plain SDPA and the block-wise
torch path, forward + backward, on CUDA.

As the model calls attention: post-RoPE q, the low-rank query update u, k, v laid out as the
projections leave them (``[B, L, H, D]`` viewed as ``[B, H, L, D]``), bf16, B = 1, 32 query heads
over 8 KV heads, head dim 128, causal prefill (no mask), g = Rectifier(--g, 3.0) (max), loss
``out.square().mean()``. Variants: ``sdpa`` (plain causal SDPA on q, k, v: the baseline),
``blockwise`` (``rectified_attention``, the reference path) and ``fused``
(``triton_kernel.fused_rectified_attention``; ``--tiles`` overrides its tile table). Time: CUDA
events, median of ``--repeats`` steps after one warm-up (which compiles the kernels), variants
interleaved. Memory: peak allocated during one step above what was allocated before it (the
inputs), ``torch.cuda.max_memory_allocated``. Also the fused output's relative error to the
block-wise one, as a sanity check. Prints one JSON line per length, then a summary line.

``--padded F`` left-pads the first F of the tokens through a boolean mask (the training
batches' case; the kernel skips the tiles the mask rules out), against causal SDPA on the same
shape without a mask.

``--decode B`` times a decoding step instead (``decode``): B single queries over the cache of
each length, forward only, every variant under the same mask (SDPA included).

``--sweep`` tunes the tile table instead: each kernel's tiles (forward; dK/dV; dQ/dU) over
``SWEEP`` with the others at the table's, forward alone for the forward kernel and forward +
backward for the two others, at ``--lengths[0]``; then the best of each together against the
table and plain SDPA in the same run, and the best table's output error to the table's. A
candidate that does not compile or launch (registers, shared memory) is recorded with its error.
Stops trying candidates after ``--budget-s`` seconds; writes ``--out`` (JSON).

    PYTHONPATH=$PWD python benchmarks/rectified_triton.py                  # 2048 and 8192 tokens
    PYTHONPATH=$PWD python benchmarks/rectified_triton.py --lengths 8192 \\
        --tiles '{"forward": [128, 32, 8, 2], "q": [32, 64, 8, 2]}'
    PYTHONPATH=$PWD python benchmarks/rectified_triton.py --sweep --lengths 4096 \\
        --out results/rectified_tiles.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

VARIANTS = ("sdpa", "blockwise", "fused")
DEVICE = "cuda"  # "cpu" with --smoke
G = "max"  # the rectifier, ξ = 3 (--g)


def _inputs(n: int, heads: int, kv_heads: int, head_dim: int):
    torch.manual_seed(0)

    def projected(h, std=1.0):
        x = std * torch.randn(1, n, h, head_dim, device=DEVICE, dtype=torch.bfloat16)
        return x.transpose(1, 2).requires_grad_(True)

    return projected(heads), projected(heads, 0.3), projected(kv_heads), projected(kv_heads)


def left_padding_mask(n: int, padded: float, device: str | None = None) -> torch.Tensor | None:
    """[1, 1, n, n] causal mask whose first ``padded`` fraction of positions is padding (None for
    none), on ``device`` (default: the benchmark's)."""
    if not padded:
        return None
    device = device or DEVICE
    causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    return (causal & (torch.arange(n, device=device) >= int(padded * n))[None, :])[None, None]


def _steps(q, u, k, v, tiles, mask=None):
    from zoomattn.attention.math import sdpa
    from zoomattn.methods.rectify.kernel import Rectifier, rectified_attention
    from zoomattn.methods.rectify.triton_kernel import fused_rectified_attention

    g = Rectifier(G, 3.0)
    forward = {
        "sdpa": lambda: sdpa(q, k, v),
        "blockwise": lambda: rectified_attention(q, u, k, v, g, mask),
        "fused": lambda: fused_rectified_attention(q, u, k, v, g, mask, tiles=tiles),
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
    step, forward = _steps(q, u, k, v, args.tiles, left_padding_mask(n, args.padded))
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


def decode(n: int, args) -> dict:
    """One decoding step as generation runs it: a batch of ``args.decode`` single queries over n
    cached keys (under the last row of the ``--padded`` mask, the same for every batch row),
    forward only, without gradients; each variant's median time over ``--repeats`` rounds of
    20 steps, variant after variant. The fused kernel runs its forward on the table's ``decode``
    tile here; the dispatch sends decoding to the block-wise path until this shows the kernel
    wins (``kernel.FUSED_DECODING``)."""
    from zoomattn.attention.math import sdpa
    from zoomattn.methods.rectify.kernel import Rectifier, rectified_attention
    from zoomattn.methods.rectify.triton_kernel import fused_rectified_attention

    b, g = args.decode, Rectifier(G, 3.0)
    q, u, k, v = _inputs(n, args.heads, args.kv_heads, args.head_dim)
    q, u = (x[:, :, -1:].detach().expand(b, -1, -1, -1).contiguous() for x in (q, u))
    k, v = (x.detach().expand(b, -1, -1, -1).contiguous() for x in (k, v))
    mask = left_padding_mask(n, args.padded)
    mask = None if mask is None else mask[:, :, -1:].expand(b, -1, -1, -1)
    forward = {
        "sdpa": lambda: sdpa(q, k, v, mask),
        "blockwise": lambda: rectified_attention(q, u, k, v, g, mask),
        "fused": lambda: fused_rectified_attention(q, u, k, v, g, mask, tiles=args.tiles),
    }
    with torch.no_grad():
        fused, blockwise = forward["fused"]().float(), forward["blockwise"]().float()
        error = ((fused - blockwise).norm() / blockwise.norm()).item()
        ms = {name: _median_ms(lambda f=f: [f() for _ in range(20)], args.repeats) / 20
              for name, f in forward.items()}  # fmt: skip
    return {"n": n, "batch": b, "fused_vs_blockwise_rel_error": error,
            **{f"{name}_decode_ms": t for name, t in ms.items()},
            "blockwise_decode_vs_sdpa": ms["blockwise"] / ms["sdpa"],
            "fused_decode_vs_sdpa": ms["fused"] / ms["sdpa"],
            "fused_decode_vs_blockwise": ms["fused"] / ms["blockwise"]}  # fmt: skip


def profile(n: int, args) -> dict:
    """Where the fused step's time goes: each CUDA kernel's total over one forward + backward
    (torch.profiler), beside SDPA's; and forward alone against SDPA's forward alone."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    q, u, k, v = _inputs(n, args.heads, args.kv_heads, args.head_dim)
    step, forward = _steps(q, u, k, v, args.tiles, left_padding_mask(n, args.padded))
    row = {"n": n, "padded": args.padded}
    for variant in ("sdpa", "fused"):
        step(variant)  # warm-up
        with torch.no_grad():
            row[f"{variant}_forward_ms"] = _median_ms(forward[variant], args.repeats)
        activity = ProfilerActivity.CUDA if DEVICE == "cuda" else ProfilerActivity.CPU
        with torch_profile(activities=[activity]) as prof:
            step(variant)
            if DEVICE == "cuda":
                torch.cuda.synchronize()
        total = (
            (lambda e: e.device_time_total) if DEVICE == "cuda" else (lambda e: e.cpu_time_total)
        )
        kernels = sorted((e for e in prof.key_averages() if total(e) > 0), key=lambda e: -total(e))
        row[f"{variant}_kernels_ms"] = {e.key[:90]: round(total(e) / 1e3, 3) for e in kernels[:12]}
    row["forward_fused_vs_sdpa"] = row["fused_forward_ms"] / row["sdpa_forward_ms"]
    return row


# (BLOCK_M, BLOCK_N, warps, stages) tried per kernel; BLOCK_M is the query tile (the dK/dV
# kernel's step over query rows), BLOCK_N the key tile (the forward and dQ kernels' step)
SWEEP = {
    "forward": [(m, n, w, s) for m in (64, 128) for n in (32, 64) for w in (4, 8) for s in (2, 3)],
    "kv": [(m, n, w, s) for n in (32, 64) for m in (16, 32, 64) for w in (4, 8) for s in (1, 2)],
    "q": [(m, n, w, s) for m in (32, 64) for n in (16, 32, 64) for w in (4, 8) for s in (1, 2)],
}


def _median_ms(fn, repeats: int) -> float:
    fn()  # warm-up: compiles this tile's kernels
    times = []
    for _ in range(repeats):
        if DEVICE == "cpu":  # --smoke: Triton's interpreter, wall time
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def sweep(args) -> dict:
    """Each kernel's candidate tiles, the others at the table's; then the best table."""
    from zoomattn.methods.rectify.kernel import Rectifier
    from zoomattn.methods.rectify.triton_kernel import _tiles, fused_rectified_attention

    n = args.lengths[0]
    q, u, k, v = _inputs(n, args.heads, args.kv_heads, args.head_dim)
    mask, g = left_padding_mask(n, args.padded), Rectifier(G, 3.0)
    table = _tiles(args.head_dim, torch.device(DEVICE))

    def run(tiles, backward: bool):
        if not backward:
            with torch.no_grad():
                return fused_rectified_attention(q, u, k, v, g, mask, tiles=tiles)
        fused_rectified_attention(q, u, k, v, g, mask, tiles=tiles).square().mean().backward()
        for t in (q, u, k, v):
            t.grad = None

    deadline, tried = time.monotonic() + args.budget_s, []
    for name, candidates in SWEEP.items():
        for tile in candidates[: 2 if args.smoke else None]:
            row = {"kernel": name, "tile": list(tile)}
            if time.monotonic() > deadline:
                tried.append({**row, "status": "not tried: out of time"})
                continue
            tiles, backward = {**table, name: tile}, name != "forward"
            try:
                ms = _median_ms(lambda t=tiles, b=backward: run(t, b), 3)
                tried.append({**row, "status": "ok", "ms": round(ms, 3)})
            except Exception as error:  # registers, shared memory: the tile does not fit
                tried.append({**row, "status": f"{type(error).__name__}: {str(error)[:160]}"})
            print(json.dumps(tried[-1]), flush=True)
    best = dict(table)
    for name in SWEEP:
        timed = [r for r in tried if r["kernel"] == name and r["status"] == "ok"]
        if timed:
            best[name] = tuple(min(timed, key=lambda r: r["ms"])["tile"])
    step, _ = _steps(q, u, k, v, None, mask)
    times = {
        "sdpa_ms": _median_ms(lambda: step("sdpa"), args.repeats),
        "table_ms": _median_ms(lambda: run(table, True), args.repeats),
        "best_ms": _median_ms(lambda: run(best, True), args.repeats),
    }
    out_table, out_best = run(table, False).float(), run(best, False).float()
    return {
        "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (Triton interpreter)",
        "shape": f"B=1, L={n}, heads={args.heads}, kv_heads={args.kv_heads}, "
        f"head_dim={args.head_dim}, bf16, fwd+bwd, padded={args.padded}",
        "table": {k: list(t) for k, t in table.items()},
        "best": {k: list(t) for k, t in best.items()},
        **{key: round(ms, 3) for key, ms in times.items()},
        "table_vs_sdpa": round(times["table_ms"] / times["sdpa_ms"], 3),
        "best_vs_sdpa": round(times["best_ms"] / times["sdpa_ms"], 3),
        "best_vs_table_rel_error": ((out_best - out_table).norm() / out_table.norm()).item(),
        "tried": tried,
    }


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
    p.add_argument(
        "--padded",
        type=float,
        default=0.0,
        help="fraction of left padding, through a boolean mask (default: none)",
    )
    p.add_argument("--sweep", action="store_true", help="tune the tile table (see above)")
    p.add_argument("--decode", type=int, default=0, metavar="BATCH",
                   help="time a decoding step of BATCH queries instead (see decode)")  # fmt: skip
    p.add_argument("--profile", action="store_true",
                   help="time per CUDA kernel, fused and SDPA (see profile)")  # fmt: skip
    p.add_argument("--budget-s", type=float, default=240, help="time for the sweep's candidates")
    p.add_argument("--out", default=None, help="write the sweep's JSON here")  # fmt: skip
    p.add_argument("--smoke", action="store_true",
                   help="check the sweep's mechanics on the CPU: tiny shape, Triton's interpreter, "
                        "two candidates per kernel (times mean nothing)")  # fmt: skip
    p.add_argument("--g", default="max", help="the rectifier g (max, tanh, tanh_plus_x, sigmoid)")
    args = p.parse_args()
    global DEVICE, G
    G = args.g
    if args.smoke:
        DEVICE = "cpu"
        os.environ["TRITON_INTERPRET"] = "1"  # read when triton is first imported (below)
        from tests.triton_interpreter import squeeze_interpreter_indices

        squeeze_interpreter_indices()
        args.lengths, args.heads, args.kv_heads, args.head_dim = [40], 2, 1, 16
        args.repeats = 1
    elif not torch.cuda.is_available():
        raise SystemExit("rectified_triton.py: needs a CUDA device (the fused kernel's)")
    if args.sweep:
        result = sweep(args)
        print(json.dumps({k: v for k, v in result.items() if k != "tried"}))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)
        return
    if args.tiles is not None:
        from zoomattn.methods.rectify.triton_kernel import _tiles

        default = _tiles(args.head_dim, torch.device("cuda"))
        args.tiles = {**default, **{name: tuple(t) for name, t in args.tiles.items()}}
    rows = []
    for n in args.lengths:
        run = decode if args.decode else profile if args.profile else measure
        rows.append(run(n, args))
        print(json.dumps(rows[-1]), flush=True)
    what = f"decoding steps of {args.decode} queries" if args.decode else "causal, fwd+bwd"
    summary = {
        "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (Triton interpreter)",
        "shape": f"B={args.decode or 1}, heads={args.heads}, kv_heads={args.kv_heads}, "
        f"head_dim={args.head_dim}, bf16, {what}, g={G}",
        "tiles": args.tiles or "default",
        **{f"{r['n']}": {key: float(f"{r[key]:.4g}") for key in r if "vs" in key} for r in rows},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
