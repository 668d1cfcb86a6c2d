"""GPU micro-benchmark: OpAmp's stacked path (``methods/opamp/fused.py``) with its adapters'
activations kept by autograd (today) or recomputed in backward (``fused.RECOMPUTE_ADAPTERS``),
beside plain SDPA, forward + backward of one layer, in one run on one card.

One ``OpAmpAttention`` layer in training mode, adapters included (K = 10, ``--adapter-dim``
default 512 as the paper's Table 6, dropout 0.1), bf16, on post-RoPE q ``[1, H, L, D]`` and k, v
``[1, H_kv, L, D]`` laid out as the projections leave them, causal; ``--padded F`` left-pads the
first F of the tokens through a boolean mask for the OpAmp variants (SDPA stays causal without
one, as in ``rectified_triton.py``). Variants: ``sdpa`` (plain SDPA on q, k, v: the baseline),
``stacked`` and ``stacked_replayed``. Time: CUDA events, median of ``--repeats`` steps after one
warm-up, variants interleaved (``tile_sweep.timed_variants``); memory: peak allocated during one
step above what was allocated before it (q, k and v are allocated before it, so a path that
keeps them shows it only in the next figure). Each row also has all that autograd keeps from
forward to backward, q, k and v included where kept, the layer's weights left out
(``tile_sweep.kept_bytes``), in MiB: the part of the memory a model holds per layer until its
backward. ``--smoke`` runs the mechanics on the CPU at a tiny
shape (times mean nothing; the kept bytes are the CPU's count). ``--profile`` instead takes one
step of ``sdpa`` and ``stacked`` apart under torch's profiler: each kernel's own time, and their
sum by kind (attention, matrix products, the rest: copies and element-wise), read from the kernels'
names: where the stacked path's time beyond its two branches' attention goes.

    PYTHONPATH=$PWD python benchmarks/opamp_stacked.py --lengths 4096 8192
"""

from __future__ import annotations

import argparse

import tile_sweep
import torch

VARIANTS = ("sdpa", "stacked", "stacked_replayed")
DEVICE = "cuda"  # "cpu" with --smoke


def _step(n: int, args):
    from zoomattn.attention.math import sdpa
    from zoomattn.methods.opamp import fused
    from zoomattn.methods.opamp.config import OpAmpConfig
    from zoomattn.methods.opamp.model import OpAmpAttention

    torch.manual_seed(0)
    dtype = torch.bfloat16

    def projected(h):
        x = torch.randn(1, n, h, args.head_dim, device=DEVICE, dtype=dtype)
        return x.transpose(1, 2).requires_grad_(True)

    q, k, v = projected(args.heads), projected(args.kv_heads), projected(args.kv_heads)
    config = OpAmpConfig(10.0, args.adapter_dim, dropout=0.1)
    layer = OpAmpAttention(args.heads, args.kv_heads, args.head_dim, config)
    layer = layer.to(device=DEVICE, dtype=dtype).train()
    mask = tile_sweep.padding_mask(n, args.padded, DEVICE)
    grad = torch.randn_like(q)
    leaves = [q, k, v, *layer.parameters()]

    def forward(variant):
        if variant == "sdpa":
            return sdpa(q, k, v)
        replayed = variant == "stacked_replayed"
        return tile_sweep.with_switch(
            fused, "RECOMPUTE_ADAPTERS", replayed, lambda: layer(q, k, v, mask, path="stacked")
        )

    def step(variant):
        forward(variant).backward(grad)
        for t in leaves:
            t.grad = None

    return step, forward, {p.untyped_storage().data_ptr() for p in layer.parameters()}


def measure(n: int, args) -> dict:
    step, forward, weights = _step(n, args)
    row = {"n": n, **tile_sweep.timed_variants(step, VARIANTS, args.repeats, DEVICE)}
    ran = [variant for variant in VARIANTS if f"{variant}_error" not in row]
    for variant in ran:
        kept = tile_sweep.kept_bytes(lambda v=variant: forward(v), weights)
        row[f"{variant}_kept_mib"] = kept / 2**20
    for variant in ran[1:]:
        row[f"{variant}_kept_vs_sdpa"] = row[f"{variant}_kept_mib"] / row["sdpa_kept_mib"]
    return row


# a kernel's kind by its name: CUDA's (cuDNN's SDPA and its helper kernels, FlashAttention's,
# cuBLAS's gemm and Hopper nvjet kernels, CUTLASS's) and the CPU's ops
KINDS = {
    "attention": ("sdpa", "flash", "fmha", "attention", "attn", "cudnn"),
    "matmul": ("gemm", "nvjet", "xmma", "cutlass", "matmul", "aten::mm", "aten::bmm", "addmm"),
}


def kind(name: str) -> str:
    """``name``'s kind: the first of ``KINDS`` whose words it holds, else ``other``."""
    lowered = name.lower()
    return next((k for k, words in KINDS.items() if any(w in lowered for w in words)), "other")


def profile(n: int, args) -> dict:
    """One forward + backward of ``sdpa`` and of ``stacked`` (adapters kept) taken apart by
    kernel: the 15 longest, each its own time, and the sums by kind."""
    step, _, _ = _step(n, args)
    row = {"n": n, "padded": args.padded}
    for variant in ("sdpa", "stacked"):
        step(variant)  # warm-up
        times = tile_sweep.kernel_times(lambda v=variant: step(v), DEVICE)
        by_kind = dict.fromkeys((*KINDS, "other"), 0.0)
        for name, ms in times:
            by_kind[kind(name)] += ms
        row[f"{variant}_kernels_total_ms"] = round(sum(ms for _, ms in times), 3)
        row[f"{variant}_by_kind_ms"] = {k: round(ms, 3) for k, ms in by_kind.items()}
        row[f"{variant}_kernels_ms"] = tile_sweep.longest(times, top=15)
    sdpa_attention = row["sdpa_by_kind_ms"]["attention"]
    row["stacked_attention_vs_sdpa"] = row["stacked_by_kind_ms"]["attention"] / sdpa_attention
    row["stacked_total_vs_sdpa"] = row["stacked_kernels_total_ms"] / row["sdpa_kernels_total_ms"]
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    tile_sweep.add_shape_arguments(p, [4096, 8192])
    p.add_argument("--adapter-dim", type=int, default=512)
    p.add_argument("--padded", type=float, default=0.0, help="fraction of left padding")
    p.add_argument("--profile", action="store_true", help="time per kernel and kind (see profile)")
    p.add_argument("--smoke", action="store_true", help="the mechanics on the CPU, tiny shape")
    args = p.parse_args()
    global DEVICE
    DEVICE = tile_sweep.torch_device_for(args, "opamp_stacked.py", smoke_length=40)
    if args.smoke:
        args.adapter_dim = 8
    what = f"adapter dim {args.adapter_dim}, K = 10, dropout 0.1, fwd+bwd, padded={args.padded}"
    tile_sweep.report_lengths(args, profile if args.profile else measure, what, DEVICE)


if __name__ == "__main__":
    main()
