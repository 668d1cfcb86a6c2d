"""GPU micro-benchmark: OpAmp's Triton kernel (``methods/opamp/triton_kernel.two_branch_flash``)
against the stacked SDPA call and plain SDPA, forward + backward, on CUDA; and its tile sweep.

The attention alone, adapters left out (they cost the same on both fused paths): the two branches'
adapted queries and keys stacked, q_stack = [Q₀ | Q₁] ``[1, 2H, L, D]`` and k_stack = [K₀ | K₁]
``[1, 2H_kv, L, D]``, v ``[1, H_kv, L, D]`` laid out as the projection leaves it, bf16, 32 query
heads over 8 KV heads, head dim 128, gains (c, d) = (0.5, 5.0), loss
``out.float().square().mean()``. Variants: ``sdpa`` (plain causal SDPA on Q₀, K₀, V: the baseline),
``stacked`` (one SDPA call over both branches, V twice, then (c + d)·O₀ + (c − d)·O₁: the attention
of ``fused.stacked_two_branch``) and ``triton`` (the kernel; ``--tiles`` overrides its table). Time:
CUDA events, median of ``--repeats`` steps after one warm-up, variants interleaved
(``tile_sweep.timed_variants``); memory: peak allocated during one step above what was allocated
before it. ``--padded F`` pads F of the tokens through a boolean mask for ``stacked`` and
``triton`` (``--padding-side``: left, the default, or right), against causal SDPA without one, as
``rectified_triton.py`` does. ``--padding-spans`` and ``--kv-keys-as-rows`` (or ``--no-...``) set
the kernel's two switches, off until a card times them (``triton_kernel``); the summary names them.

``--sweep``: each kernel's tiles over ``tile_sweep.SWEEP`` with the others at the table's, at
``--lengths[0]``, then the best of each together against the table, the stacked call and SDPA in
the same run; writes ``--out`` (JSON). ``--smoke`` checks the mechanics on the CPU (Triton's
interpreter, a tiny shape, two candidates per kernel; times mean nothing).

    PYTHONPATH=$PWD python benchmarks/opamp_triton.py --lengths 4096 8192
    PYTHONPATH=$PWD python benchmarks/opamp_triton.py --sweep --lengths 4096 --padded 0.25 \\
        --out results/opamp_tiles.json
"""

from __future__ import annotations

import argparse

import tile_sweep
import torch

VARIANTS = ("sdpa", "stacked", "triton")
GAINS = (0.5, 5.0)
DEVICE = "cuda"  # "cpu" with --smoke


def _inputs(n: int, heads: int, kv_heads: int, head_dim: int):
    torch.manual_seed(0)

    def stacked(h):
        x = torch.randn(1, 2 * h, n, head_dim, device=DEVICE, dtype=torch.bfloat16)
        return x.requires_grad_(True)

    v = torch.randn(1, n, kv_heads, head_dim, device=DEVICE, dtype=torch.bfloat16)
    return stacked(heads), stacked(kv_heads), v.transpose(1, 2).requires_grad_(True)


def _forwards(q_stack, k_stack, v, mask, tiles) -> dict:
    from zoomattn.attention.math import sdpa
    from zoomattn.methods.opamp.triton_kernel import two_branch_flash

    heads, kv_heads = q_stack.shape[1] // 2, k_stack.shape[1] // 2
    c, d = GAINS

    def stacked():
        both = sdpa(q_stack, k_stack, torch.cat([v, v], dim=1), mask)
        return (c + d) * both[:, :heads] + (c - d) * both[:, heads:]

    return {
        "sdpa": lambda: sdpa(q_stack[:, :heads], k_stack[:, :kv_heads], v),
        "stacked": stacked,
        "triton": lambda: two_branch_flash(q_stack, k_stack, v, GAINS, mask, tiles=tiles),
    }


def _step(forwards: dict, tensors):
    def step(variant):
        forwards[variant]().float().square().mean().backward()
        for t in tensors:
            t.grad = None

    return step


def measure(n: int, args) -> dict:
    q_stack, k_stack, v = _inputs(n, args.heads, args.kv_heads, args.head_dim)
    mask = tile_sweep.padding_mask(n, args.padded, DEVICE, args.padding_side)
    forwards = _forwards(q_stack, k_stack, v, mask, args.tiles)
    step = _step(forwards, (q_stack, k_stack, v))
    with torch.no_grad():
        error = tile_sweep.rel_error(forwards["triton"](), forwards["stacked"]())
    row = {"n": n, "triton_vs_stacked_rel_error": error}
    trace = args.memory_trace and f"{args.memory_trace}/{n}_padded{args.padded}"
    row.update(tile_sweep.timed_variants(step, VARIANTS, args.repeats, DEVICE, trace))
    return row


def sweep(args) -> dict:
    from zoomattn.methods.opamp import triton_kernel

    n = args.lengths[0]
    q_stack, k_stack, v = _inputs(n, args.heads, args.kv_heads, args.head_dim)
    mask = tile_sweep.padding_mask(n, args.padded, DEVICE, args.padding_side)
    table = triton_kernel._tiles(torch.device(DEVICE))

    def run(tiles, backward: bool):
        forwards = _forwards(q_stack, k_stack, v, mask, tiles)
        if not backward:
            with torch.no_grad():
                return forwards["triton"]()
        _step(forwards, (q_stack, k_stack, v))("triton")

    per_kernel = 2 if args.smoke else None
    candidates = tile_sweep.sweep_candidates(triton_kernel.KV_KEYS_AS_ROWS)
    tried, best = tile_sweep.try_tiles(table, run, args.budget_s, DEVICE, per_kernel, candidates)
    step = _step(_forwards(q_stack, k_stack, v, mask, table), (q_stack, k_stack, v))
    baselines = {name: (lambda name=name: step(name)) for name in ("sdpa", "stacked")}
    shape = f"B=1, L={n}, heads={args.heads}, kv_heads={args.kv_heads}, head_dim={args.head_dim}"
    return tile_sweep.sweep_result(
        table, best, tried, run, baselines, args.repeats, DEVICE, f"{shape}, padded={args.padded}"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    tile_sweep.add_arguments(p)
    args = p.parse_args()
    global DEVICE
    DEVICE = tile_sweep.device_for(args, "opamp_triton.py")
    import triton_special  # after device_for: it imports triton

    special = triton_special.use(args, has_g=False)
    from zoomattn.methods.opamp import triton_kernel

    switches = tile_sweep.set_switches(triton_kernel, args)
    if args.sweep:
        return tile_sweep.report_sweep(sweep(args), args.out)
    args.tiles = tile_sweep.merged_tiles(triton_kernel._tiles(torch.device(DEVICE)), args.tiles)
    what = f"B=1, fwd+bwd, padded={args.padded} ({args.padding_side}), {switches}, {special}"
    tile_sweep.report_lengths(args, measure, what, DEVICE)


if __name__ == "__main__":
    main()
