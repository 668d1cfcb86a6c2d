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

``--padded F`` pads F of the tokens through a boolean mask, the first F (``--padding-side left``,
the default: generation's prompts) or the last (``right``: training's batches); the kernel skips
the tiles the mask rules out. Against causal SDPA on the same shape without a mask.

``--decode B`` times a decoding step instead (``decode``): B single queries over the cache of
each length, forward only, every variant under the same mask (SDPA included).

``--sweep`` tunes the tile table instead (``tile_sweep.py``): each kernel's tiles (forward;
dK/dV; dQ/dU) over ``tile_sweep.SWEEP`` (dK/dV over ``SWEEP_KEYS_AS_ROWS`` with
``KV_KEYS_AS_ROWS``, the default) with the others at the table's, forward alone for the
forward kernel and forward + backward for the two others, at ``--lengths[0]``; then the best of
each together against the table and plain SDPA in the same run, and the best table's output
error to the table's. A candidate that does not compile or launch (registers, shared memory) is
recorded with its error. Stops trying candidates after ``--budget-s`` seconds; writes ``--out``
(JSON).

    PYTHONPATH=$PWD python benchmarks/rectified_triton.py                  # 2048 and 8192 tokens
    PYTHONPATH=$PWD python benchmarks/rectified_triton.py --lengths 8192 \\
        --tiles '{"forward": [128, 32, 8, 2], "q": [32, 64, 8, 2]}'
    PYTHONPATH=$PWD python benchmarks/rectified_triton.py --sweep --lengths 4096 \\
        --out results/rectified_tiles.json
"""

from __future__ import annotations

import argparse

import tile_sweep
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


def padding_mask(n: int, args) -> torch.Tensor | None:
    """``tile_sweep.padding_mask`` of ``args``' padding on the benchmark's device."""
    return tile_sweep.padding_mask(n, args.padded, DEVICE, args.padding_side)


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


def _fused_vs_blockwise(forward: dict, mask) -> float:
    """The fused output's relative error against the block-wise path's, on the rows the kernel
    computes: with SKIP_PADDED_ROWS under key spans, right padding's padded rows get no key (0)
    where the block-wise path gives them every real key, so they are left out."""
    from zoomattn.attention.tile_ranges import padding_spans
    from zoomattn.methods.rectify import triton_kernel

    fused, blockwise = forward["fused"](), forward["blockwise"]()
    spans = None
    if mask is not None and triton_kernel.PADDING_SPANS and triton_kernel.SKIP_PADDED_ROWS:
        spans = padding_spans(mask)
    if spans is not None:
        rows = triton_kernel.without_padded_rows(mask, spans).any(-1, keepdim=True)
        fused, blockwise = fused.where(rows, 0.0), blockwise.where(rows, 0.0)
    return tile_sweep.rel_error(fused, blockwise)


def measure(n: int, args) -> dict:
    q, u, k, v = _inputs(n, args.heads, args.kv_heads, args.head_dim)
    mask = padding_mask(n, args)
    step, forward = _steps(q, u, k, v, args.tiles, mask)
    with torch.no_grad():
        error = _fused_vs_blockwise(forward, mask)
    row = {"n": n, "fused_vs_blockwise_rel_error": error}
    trace = args.memory_trace and f"{args.memory_trace}/{n}_padded{args.padded}"
    row.update(tile_sweep.timed_variants(step, VARIANTS, args.repeats, DEVICE, trace))
    row["input_mib"] = sum(t.numel() * t.element_size() for t in (q, u, k, v)) / 2**20
    return row


def decode(n: int, args) -> dict:
    """One decoding step as generation runs it: a batch of ``args.decode`` single queries over n
    cached keys (under the last row of the ``--padded`` mask, the same for every batch row),
    forward only, without gradients; each variant's median time over ``--repeats`` rounds of
    20 steps (2 with ``--smoke``), variant after variant. The fused kernel runs its forward on
    the table's ``decode`` tile here, as the dispatch sends decoding (``kernel.FUSED_DECODING``,
    on since this showed the kernel winning on an H200)."""
    from zoomattn.attention.math import sdpa
    from zoomattn.methods.rectify.kernel import Rectifier, rectified_attention
    from zoomattn.methods.rectify.triton_kernel import fused_rectified_attention

    b, g = args.decode, Rectifier(G, 3.0)
    q, u, k, v = _inputs(n, args.heads, args.kv_heads, args.head_dim)
    q, u = (x[:, :, -1:].detach().expand(b, -1, -1, -1).contiguous() for x in (q, u))
    k, v = (x.detach().expand(b, -1, -1, -1).contiguous() for x in (k, v))
    mask = padding_mask(n, args)
    mask = None if mask is None else mask[:, :, -1:].expand(b, -1, -1, -1)
    forward = {
        "sdpa": lambda: sdpa(q, k, v, mask),
        "blockwise": lambda: rectified_attention(q, u, k, v, g, mask),
        "fused": lambda: fused_rectified_attention(q, u, k, v, g, mask, tiles=args.tiles),
    }
    with torch.no_grad():
        error = _fused_vs_blockwise(forward, mask)
        steps = 2 if args.smoke else 20
        ms = {name: _median_ms(lambda f=f: [f() for _ in range(steps)], args.repeats) / steps
              for name, f in forward.items()}  # fmt: skip
    return {"n": n, "batch": b, "fused_vs_blockwise_rel_error": error,
            **{f"{name}_decode_ms": t for name, t in ms.items()},
            "blockwise_decode_vs_sdpa": ms["blockwise"] / ms["sdpa"],
            "fused_decode_vs_sdpa": ms["fused"] / ms["sdpa"],
            "fused_decode_vs_blockwise": ms["fused"] / ms["blockwise"]}  # fmt: skip


def profile(n: int, args) -> dict:
    """Where the fused step's time goes: each CUDA kernel's own time over one forward + backward
    (torch.profiler), beside SDPA's; and forward alone against SDPA's forward alone (without
    autograd, as evaluation runs it: the training forward also stores the output's rounding
    error)."""
    q, u, k, v = _inputs(n, args.heads, args.kv_heads, args.head_dim)
    step, forward = _steps(q, u, k, v, args.tiles, padding_mask(n, args))
    row = {"n": n, "padded": args.padded}
    for variant in ("sdpa", "fused"):
        step(variant)  # warm-up
        with torch.no_grad():
            row[f"{variant}_forward_ms"] = _median_ms(forward[variant], args.repeats)
        times = tile_sweep.kernel_times(lambda v=variant: step(v), DEVICE)
        row[f"{variant}_kernels_ms"] = tile_sweep.longest(times)
    row["forward_fused_vs_sdpa"] = row["fused_forward_ms"] / row["sdpa_forward_ms"]
    return row


def _median_ms(fn, repeats: int) -> float:
    return tile_sweep.median_ms(fn, repeats, DEVICE)


def sweep(args) -> dict:
    """Each kernel's candidate tiles, the others at the table's; then the best table. With
    ``KV_KEYS_AS_ROWS`` (on by default) dK/dV's candidates are its own, at 64 or 128 keys
    (``SWEEP_KEYS_AS_ROWS``), and the kernel with the switch off at its table
    (``kv_queries_as_rows``) is timed beside SDPA."""
    from zoomattn.methods.rectify import triton_kernel
    from zoomattn.methods.rectify.triton_kernel import _tiles

    n = args.lengths[0]
    q, u, k, v = _inputs(n, args.heads, args.kv_heads, args.head_dim)
    mask = padding_mask(n, args)
    table = _tiles(args.head_dim, torch.device(DEVICE))

    def run(tiles, backward: bool):
        step, forward = _steps(q, u, k, v, tiles, mask)
        if not backward:
            with torch.no_grad():
                return forward["fused"]()
        step("fused")

    per_kernel = 2 if args.smoke else None
    step, _ = _steps(q, u, k, v, None, mask)
    baselines = {"sdpa": lambda: step("sdpa")}
    shape = f"B=1, L={n}, heads={args.heads}, kv_heads={args.kv_heads}, head_dim={args.head_dim}"
    candidates = tile_sweep.sweep_candidates(triton_kernel.KV_KEYS_AS_ROWS)
    if triton_kernel.KV_KEYS_AS_ROWS:  # beside SDPA, the kernel with the switch off
        shape = f"{shape}, dK/dV keys as rows"
        baselines["kv_queries_as_rows"] = lambda: tile_sweep.with_switch(
            triton_kernel, "KV_KEYS_AS_ROWS", False, lambda: step("fused")
        )
    tried, best = tile_sweep.try_tiles(table, run, args.budget_s, DEVICE, per_kernel, candidates)
    return tile_sweep.sweep_result(
        table, best, tried, run, baselines, args.repeats, DEVICE, f"{shape}, padded={args.padded}"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    tile_sweep.add_arguments(p)
    p.add_argument("--decode", type=int, default=0, metavar="BATCH",
                   help="time a decoding step of BATCH queries instead (see decode)")  # fmt: skip
    p.add_argument("--profile", action="store_true",
                   help="time per CUDA kernel, fused and SDPA (see profile)")  # fmt: skip
    p.add_argument("--g", default="max", help="the rectifier g (max, tanh, tanh_plus_x, sigmoid)")
    p.add_argument("--skip-padded-rows", action=argparse.BooleanOptionalAction,
                   help="with padding spans, right padding's padded rows attend to nothing "
                        "(SKIP_PADDED_ROWS; off by default)")  # fmt: skip
    p.add_argument("--rounded-once", action="store_true",
                   help="dZ rounded once in the backward's products, not in two parts "
                        "(SPLIT_SCORE_GRADIENTS off)")  # fmt: skip
    args = p.parse_args()
    global DEVICE, G
    DEVICE, G = tile_sweep.device_for(args, "rectified_triton.py"), args.g
    import triton_special  # after device_for: it imports triton

    special = triton_special.use(args)
    from zoomattn.methods.rectify import triton_kernel

    switches = tile_sweep.set_switches(triton_kernel, args)  # both on since the H200 timed them
    if args.skip_padded_rows is not None:
        triton_kernel.SKIP_PADDED_ROWS = args.skip_padded_rows
    if args.rounded_once:
        triton_kernel.SPLIT_SCORE_GRADIENTS = False
    if args.sweep:
        return tile_sweep.report_sweep(sweep(args), args.out)
    from zoomattn.methods.rectify.triton_kernel import _tiles

    args.tiles = tile_sweep.merged_tiles(_tiles(args.head_dim, torch.device(DEVICE)), args.tiles)
    run = decode if args.decode else profile if args.profile else measure
    padding = f"{args.padding_side} padding {args.padded}" if args.padded else "causal"
    what = (
        f"B={args.decode}, decoding steps, {padding}" if args.decode else f"B=1, {padding}, fwd+bwd"
    )
    what = f"{what}, g={G}, {special}, {switches}"  # the switches as the kernel module has them
    spans_and_skip = triton_kernel.PADDING_SPANS and triton_kernel.SKIP_PADDED_ROWS
    what += ", padded rows skipped" if spans_and_skip else ""
    what += "" if triton_kernel.SPLIT_SCORE_GRADIENTS else ", dZ rounded once"
    tile_sweep.report_lengths(args, run, what, DEVICE)


if __name__ == "__main__":
    main()
