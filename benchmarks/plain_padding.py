"""GPU micro-benchmark: a right-padded batch's attention with its mask, and run causal without it
(``attention_kernels: {plain: fused}``, ``zoomattn/attention/math.py`` ``plain_mask``), in one run.

Training's batches are right-padded; transformers' mask for them lets the padded rows see every
real key and takes SDPA off its flash kernel (onto the memory-efficient one, with GQA's KV heads
repeated). Under right padding a real row's causal keys are all real, so the plain path may run
causal without the mask: every real row the same, the padded rows (no loss reads them) different.
One layer, forward + backward, bf16, B = 1, ``--padded`` (default 0.25) of the tokens right
padding. Variants, each a ratio to ``causal`` (plain SDPA without a mask: an unpadded batch):

- ``masked`` / ``as_causal``: plain SDPA (``math.sdpa``) under the mask, with ``plain`` reference
  / fused; the check that the mask is right padding is made once per mask, as a forward's layers
  share it (``detect_ms``: that check alone, once per forward);
- ``opamp_masked`` / ``opamp_as_causal``: OpAmp's stacked path (``{opamp: fused}``; K = 10,
  adapter dim ``--adapter-dim``), one SDPA call over both branches;
- ``lkg_masked`` / ``lkg_as_causal``: LKG-RALM's fusion on 2 of 32 heads (``{lkg: fused}``,
  compiled FlexAttention; ``relevance_fusion_cuda.steps``; on the CPU its bias path, which
  dispatch takes there), the other heads SDPA.

Time: CUDA events, median of ``--repeats`` after a warm-up, variants interleaved (LKG-RALM's
apart, with causal SDPA timed again for their ratios: their inputs have a mask of their own);
memory: peak allocated during one step above what was allocated before it
(``tile_sweep.timed_variants``).
``--smoke`` runs the mechanics on the CPU at a tiny shape (times mean nothing; the CPU never takes
the fused paths, so its variants run the same code).

    PYTHONPATH=$PWD:$PWD/benchmarks python benchmarks/plain_padding.py --lengths 4096 8192
"""

from __future__ import annotations

import argparse
import time

import tile_sweep
import torch

VARIANTS = ("causal", "masked", "as_causal", "opamp_masked", "opamp_as_causal")
LKG_VARIANTS = ("lkg_masked", "lkg_as_causal")
DEVICE = "cuda"  # "cpu" with --smoke


def _steps(n: int, args):
    from relevance_fusion_cuda import TWO_OF_32
    from relevance_fusion_cuda import steps as lkg_steps

    from zoomattn.attention import kernels
    from zoomattn.attention.math import right_padded_causal, sdpa
    from zoomattn.methods.opamp.config import OpAmpConfig
    from zoomattn.methods.opamp.model import OpAmpAttention

    torch.manual_seed(0)

    def projected(h):  # [B, L, H, D] viewed as [B, H, L, D], as the projections leave them
        x = torch.randn(1, n, h, args.head_dim, device=DEVICE, dtype=torch.bfloat16)
        return x.transpose(1, 2).requires_grad_(True)

    q, k, v = projected(args.heads), projected(args.kv_heads), projected(args.kv_heads)
    mask = tile_sweep.padding_mask(n, args.padded, DEVICE, "right")
    layer = OpAmpAttention(args.heads, args.kv_heads, args.head_dim,
                           OpAmpConfig(10.0, args.adapter_dim, dropout=0.0))  # fmt: skip
    layer = layer.to(device=DEVICE, dtype=torch.bfloat16).train()
    leaves = [q, k, v, *layer.parameters()]
    # the path dispatch takes: flex on CUDA, the bias on the CPU (no flex backward there)
    fused_heads = ("flex" if DEVICE == "cuda" else "bias") + (
        "_2of32" if max(TWO_OF_32) < args.heads else "_all"
    )
    lkg_step, *_ = lkg_steps(n, args.heads, args.kv_heads, args.head_dim, args.passage,
                             device=DEVICE, padded=args.padded, side="right")  # fmt: skip

    runs = {  # variant: (attention_kernels, forward + backward)
        "causal": ("reference", lambda: sdpa(q, k, v)),
        "masked": ("reference", lambda: sdpa(q, k, v, mask)),
        "as_causal": ({"plain": "fused"}, lambda: sdpa(q, k, v, mask)),
        "opamp_masked": ({"opamp": "fused"}, lambda: layer(q, k, v, mask)),
        "opamp_as_causal": ({"opamp": "fused", "plain": "fused"}, lambda: layer(q, k, v, mask)),
        "lkg_masked": ({"lkg": "fused"}, None),
        "lkg_as_causal": ({"lkg": "fused", "plain": "fused"}, None),
    }
    ran = {}

    def step(variant):
        setting, forward = runs[variant]
        with kernels.using(setting):
            if forward is None:
                lkg_step(fused_heads)
            else:
                forward().float().square().mean().backward()
            ran[variant] = kernels.paths_run()
        for t in leaves:
            t.grad = None

    def detect_ms() -> float:  # a new mask's check, as each forward pays it once
        fresh = mask.clone()
        if DEVICE == "cuda":
            torch.cuda.synchronize()  # the clone outside the time
        t0 = time.perf_counter()
        right_padded_causal(fresh)  # a host sync: its wall time is the GPU's
        return (time.perf_counter() - t0) * 1000

    return step, ran, detect_ms


def measure(n: int, args) -> dict:
    step, ran, detect_ms = _steps(n, args)
    row = {"n": n, **tile_sweep.timed_variants(step, VARIANTS, args.repeats, DEVICE)}
    if args.lkg:  # apart, against causal SDPA again: LKG-RALM's inputs bring their own mask, and
        # interleaved with the others each step would check anew which mask it has
        lkg = tile_sweep.timed_variants(step, ("causal", *LKG_VARIANTS), args.repeats, DEVICE)
        row |= {key: value for key, value in lkg.items() if key.startswith("lkg_")}
    row["detect_ms"] = min(detect_ms() for _ in range(3))
    row["paths"] = {variant: ran[variant] for variant in ran}
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    tile_sweep.add_shape_arguments(p, [4096, 8192])
    p.add_argument("--adapter-dim", type=int, default=512)
    p.add_argument("--passage", type=int, default=100, help="LKG-RALM's passage tokens")
    p.add_argument("--padded", type=float, default=0.25, help="fraction of right padding")
    p.add_argument("--lkg", action=argparse.BooleanOptionalAction, default=True,
                   help="LKG-RALM's variants (compiled FlexAttention on CUDA)")  # fmt: skip
    p.add_argument("--smoke", action="store_true", help="the mechanics on the CPU, tiny shape")
    args = p.parse_args()
    global DEVICE
    DEVICE = tile_sweep.torch_device_for(args, "plain_padding.py", smoke_length=48)
    if args.smoke:
        args.adapter_dim, args.passage = 8, 10
    if not 0 < args.padded < 1:
        raise SystemExit(f"--padded: a fraction in (0, 1), got {args.padded}")
    what = (
        f"B=1, right padding {args.padded}, fwd+bwd; OpAmp K = 10, adapter dim {args.adapter_dim}"
    )
    tile_sweep.report_lengths(args, measure, what, DEVICE)


if __name__ == "__main__":
    main()
