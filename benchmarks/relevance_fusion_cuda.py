"""Benchmark: LKG-RALM relevance fusion on one GPU, ``relevance_fusion.py --cuda``.

The step of ``relevance_fusion.py`` on one GPU in bf16 (defaults: 32 heads, 8 KV heads, head dim
128, 4096 and 8192 tokens), one process, JSON printed to stdout (one line per cell as it is
measured, then the table): plain causal SDPA, today's bias path (``bias_all``, ``bias_2of32``:
``fusion_bias`` + ``relevance_attention``) and FlexAttention (``flex_all``, ``flex_2of32``:
``methods/lkg/flex.py``, compiled; the first step of each compiles, outside the measure). The
segments are computed once (the model does so once per forward); the bias paths build their bias in
every step (the model builds one per layer); the flex paths reuse their block mask across steps as
the model's layers do, and ``flex_all_new_mask`` builds it in every step (what one layer per
forward would pay). ``flex_all_rows_apart`` and ``flex_2of32_rows_apart`` are those paths with
``flex.ROWS_APART`` (the guided rows computed apart, flex without score_mod). Three more take
``flex_2of32`` apart: ``flex_2of32_alone`` is the two fused heads' FlexAttention on its own (their
q, K, V selected outside the step; ``_fixed_alpha``: log α without a gradient, the score_mod's
captured-tensor gradient left out; ``_rows_apart``: with ``flex.ROWS_APART``; ``_log_alpha_apart``:
with ``flex.LOG_ALPHA_GRADIENT_APART``, log α detached in the score_mod and its gradient from the
guided rows apart, as for the path and every head),
``flex_2of32_copied`` the split of the heads as ``kernel.by_heads`` does it (the plain heads' q
copied, K and V expanded to them, the outputs concatenated and reordered), which the flex path used
before ``kernel.spliced_by_heads`` (SDPA on every head, the fused heads' outputs put in place).
Two more ask whether few fused heads leave SMs idle: ``_small_tiles`` runs flex with
``flex.FEW_HEADS_TILES`` (as ``flex.KERNEL_OPTIONS``), twice the programs of torch's defaults, and
``_autotuned`` compiles flex with max-autotune (``flex.AUTOTUNE``; inductor prints the candidates'
times and the one it keeps to stderr), each for the path and for the two heads alone.
``--padded F`` pads F of the tokens through a boolean mask on every variant (default: causal
without a mask, where flex reads no mask), the first F (``--padding-side left``, the default:
generation's prompts) or the last (``right``: training's batches). The flex variants read that
padding as the module has it, since 2026-11-27 as each row's span of real keys
(``flex.PADDING_SPANS``), and ``_mask_bytes`` reads the mask's bytes instead (the path before),
for every head, two and the two alone.
Time: median of CUDA-event-timed steps; memory: peak allocated during one step above what was
allocated before it (the inputs). A variant that fails is recorded with its error and the others
go on (``measured_cells``).

    PYTHONPATH=$PWD python benchmarks/relevance_fusion.py --cuda [--padded F [--padding-side right]]
"""

from __future__ import annotations

import json
from datetime import date

VARIANTS = (
    "sdpa",
    "bias_all",
    "bias_2of32",
    "flex_all",
    "flex_2of32",
    "flex_2of32_copied",
    "flex_2of32_alone",
    "flex_2of32_alone_fixed_alpha",
    "flex_all_new_mask",
    "flex_all_rows_apart",
    "flex_2of32_rows_apart",
    "flex_2of32_alone_rows_apart",
    "flex_all_log_alpha_apart",
    "flex_2of32_log_alpha_apart",
    "flex_2of32_alone_log_alpha_apart",
    "flex_2of32_small_tiles",
    "flex_2of32_alone_small_tiles",
    "flex_2of32_autotuned",
    "flex_2of32_alone_autotuned",
    "flex_all_mask_bytes",
    "flex_2of32_mask_bytes",
    "flex_2of32_alone_mask_bytes",
)
TWO_OF_32 = (1, 22)  # two KV groups of 8


def steps(n: int, heads: int, kv_heads: int, head_dim: int, passage: int, device="cuda",
          padded: float = 0.0, side: str = "left"):  # fmt: skip
    """The step of every CUDA variant on one set of bf16 inputs, the inputs' MiB, the number of
    passages, and each variant's forward (``device``: "cpu" for the suite's smoke test, with
    eager flex). ``padded``: that fraction of the tokens padding on ``side`` (a mask of causal &
    real keys on every variant, SDPA's included), else causal without a mask."""
    import tile_sweep
    import torch
    from relevance_fusion import MARKERS, layout  # the CPU benchmark's prompt

    from zoomattn.attention.math import sdpa
    from zoomattn.methods.lkg import flex
    from zoomattn.methods.lkg.kernel import (
        Boundary,
        _select,
        by_heads,
        call_mask,
        fusion_bias,
        relevance_attention,
        segment_ids,
    )

    torch.manual_seed(0)

    def projected(h):  # [B, L, H, D] viewed as [B, H, L, D], as the projections leave them
        x = torch.randn(1, n, h, head_dim, device=device, dtype=torch.bfloat16)
        return x.transpose(1, 2).requires_grad_(True)

    q, k, v = projected(heads), projected(kv_heads), projected(kv_heads)
    pads = int(padded * n)
    row, n_passages = layout(n - pads, passage)
    row = [0] * pads + row if side == "left" else row + [0] * pads  # a pad id that is no marker
    mask = tile_sweep.padding_mask(n, padded, device, side)
    ids = torch.tensor([row], device=device)
    segments = segment_ids(ids, Boundary(**MARKERS), ids != 0)  # padding OTHER, as the model's
    log_alpha = torch.randn(1, n_passages, device=device).requires_grad_(True)
    everything = tuple(range(heads))

    def bias(fused_heads):
        b = fusion_bias(segments, segments, log_alpha, call_mask(mask, n, n, q.device))
        return relevance_attention(q, k, v, mask, None, fused_heads, b)

    def flex_path(fused_heads, new_mask=False):
        if new_mask:
            flex._layouts.clear()
        return flex.flex_relevance_attention(
            q, k, v, mask, None, fused_heads, segments, segments, log_alpha
        )

    def flex_heads(q, k, v, alpha=log_alpha):  # the fused heads' FlexAttention, as the path's
        return flex.flex_fused_heads(q, k, v, mask, None, segments, segments, alpha)

    def apart(on, fn):  # flex.ROWS_APART pinned for the forward (backward reads it not)
        return lambda: tile_sweep.with_switch(flex, "ROWS_APART", on, fn)

    def alpha_apart(fn):  # log α's gradient from the guided rows apart (no score_mod gradient)
        return lambda: tile_sweep.with_switch(flex, "LOG_ALPHA_GRADIENT_APART", True, fn)

    def small_tiles(fn):  # the options reach the compiled graph, forward and backward, in forward
        return lambda: tile_sweep.with_switch(flex, "KERNEL_OPTIONS", flex.FEW_HEADS_TILES, fn)

    def autotuned(fn):
        return lambda: tile_sweep.with_switch(flex, "AUTOTUNE", True, fn)

    def mask_bytes(fn):  # padding read from the mask, not as key spans (a block mask per switch)
        return lambda: tile_sweep.with_switch(flex, "PADDING_SPANS", False, fn)

    # the fused heads' kernel alone: their q and K/V selected once, outside the timed step
    two = []
    if max(TWO_OF_32) < heads:
        two = [t.detach().requires_grad_(True) for t in _select(q, k, v, list(TWO_OF_32))]

    fns = {
        "sdpa": lambda: sdpa(q, k, v, mask),
        "bias_all": lambda: bias(everything),
        "bias_2of32": lambda: bias(TWO_OF_32),
        "flex_all": apart(False, lambda: flex_path(everything)),
        "flex_2of32": apart(False, lambda: flex_path(TWO_OF_32)),
        "flex_2of32_copied": apart(
            False, lambda: by_heads(q, k, v, mask, None, TWO_OF_32, flex_heads)
        ),
        "flex_2of32_alone": apart(False, lambda: flex_heads(*two)),
        "flex_2of32_alone_fixed_alpha": apart(
            False, lambda: flex_heads(*two, alpha=log_alpha.detach())
        ),
        "flex_all_new_mask": apart(False, lambda: flex_path(everything, new_mask=True)),
        "flex_all_rows_apart": apart(True, lambda: flex_path(everything)),
        "flex_2of32_rows_apart": apart(True, lambda: flex_path(TWO_OF_32)),
        "flex_2of32_alone_rows_apart": apart(True, lambda: flex_heads(*two)),
        "flex_all_log_alpha_apart": apart(False, alpha_apart(lambda: flex_path(everything))),
        "flex_2of32_log_alpha_apart": apart(False, alpha_apart(lambda: flex_path(TWO_OF_32))),
        "flex_2of32_alone_log_alpha_apart": apart(False, alpha_apart(lambda: flex_heads(*two))),
        "flex_2of32_small_tiles": apart(False, small_tiles(lambda: flex_path(TWO_OF_32))),
        "flex_2of32_alone_small_tiles": apart(False, small_tiles(lambda: flex_heads(*two))),
        "flex_2of32_autotuned": apart(False, autotuned(lambda: flex_path(TWO_OF_32))),
        "flex_2of32_alone_autotuned": apart(False, autotuned(lambda: flex_heads(*two))),
        "flex_all_mask_bytes": apart(False, mask_bytes(lambda: flex_path(everything))),
        "flex_2of32_mask_bytes": apart(False, mask_bytes(lambda: flex_path(TWO_OF_32))),
        "flex_2of32_alone_mask_bytes": apart(False, mask_bytes(lambda: flex_heads(*two))),
    }

    def step(variant):
        fns[variant]().float().square().mean().backward()
        for t in (q, k, v, log_alpha, *two):
            t.grad = None

    inputs_mib = sum(t.numel() * t.element_size() for t in (q, k, v)) / 2**20
    return step, inputs_mib, n_passages, fns


def measure(variant: str, step, repeats: int) -> dict:
    """Median seconds of ``step(variant)`` over ``repeats`` after one call (which compiles the flex
    paths), and its peak memory above what was allocated before it: ``tile_sweep``'s timers."""
    import tile_sweep  # imports torch: here, so the CPU benchmark's parent stays without it

    ms = tile_sweep.median_ms(lambda: step(variant), repeats, "cuda")
    return {
        "seconds": ms / 1000,
        "peak_above_inputs_mib": tile_sweep.peak_mib(lambda: step(variant)),
    }


def measured_cells(variants, measure_one, line: dict, device: str) -> tuple[dict, str | None]:
    """Each variant's cell, ``measure_one(variant)``, printed as a JSON line (``line`` and the
    cell) as it is measured. A variant that fails (a compile the card refuses, its memory) gets
    its error and the others go on; once a failure has left the device unusable
    (``tile_sweep.device_lost``), the rest are marked not tried. Returns (the cells, why the
    device was lost or None)."""
    import tile_sweep

    cells, lost = {}, None
    for variant in variants:
        if lost:
            cells[variant] = {"error": f"not tried: {lost}"}
        else:
            try:
                cells[variant] = measure_one(variant)
            except Exception as error:
                cells[variant] = {"error": tile_sweep.failure(error)}
                if tile_sweep.device_lost(device):
                    lost = f"the device was unusable after {variant}"
        print(json.dumps({**line, "variant": variant, **cells[variant]}), flush=True)
    return cells, lost


def main(args) -> None:
    import torch

    from zoomattn.methods.lkg import flex

    rows = []
    for n in args.lengths:
        step, inputs_mib, n_passages, forwards = steps(
            n, args.heads, args.kv_heads, args.head_dim, args.passage,
            padded=args.padded, side=args.padding_side,
        )  # fmt: skip
        wanted = [v for v in args.variants or VARIANTS
                  if "2of32" not in v or max(TWO_OF_32) < args.heads]  # fmt: skip
        line = {"n": n, "padded": args.padded, "side": args.padding_side, "passages": n_passages}

        def measure_one(variant, step=step):
            return measure(variant, step, args.repeats)

        cells, lost = measured_cells(wanted, measure_one, line, "cuda")
        base = cells.get("sdpa", {})
        for variant, cell in cells.items():
            if "error" in cell or "seconds" not in base:
                rows.append({"n": n, "variant": variant, **cell})
                continue
            rows.append(
                {
                    "n": n,
                    "variant": variant,
                    "passages": n_passages,
                    **cell,
                    "inputs_mib": inputs_mib,
                    "time_vs_sdpa": cell["seconds"] / base["seconds"],
                    "memory_above_inputs_vs_sdpa": cell["peak_above_inputs_mib"]
                    / base["peak_above_inputs_mib"],
                }
            )
        if lost:  # no other length can run in this process
            break
        del step, measure_one, forwards  # this length's inputs freed before the next's
        torch.cuda.empty_cache()
    meta = {
        "date": date.today().isoformat(),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "shape": f"B=1, heads={args.heads}, kv_heads={args.kv_heads}, "
        f"head_dim={args.head_dim}, bf16, forward+backward, log α requires grad, "
        + (f"{args.padding_side} padding {args.padded} (mask)" if args.padded else "causal"),
        "passage_tokens": args.passage,
        "fused_heads_of_2of32": list(TWO_OF_32),
        "repeats": args.repeats,
        # the switches as the module has them (the variants named after one pin it)
        "switches": {name: getattr(flex, name) for name in ("PADDING_SPANS", "ROWS_APART")},
    }
    print(json.dumps({"meta": meta, "rows": rows}, indent=1))
