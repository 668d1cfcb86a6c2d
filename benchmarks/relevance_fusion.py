"""Benchmark: LKG-RALM relevance fusion (``zoomattn.methods.lkg.kernel``) vs plain causal SDPA.

Forward + backward (loss ``out.square().mean()``) of one layer's attention as the model calls it
in training: post-RoPE q, k, v laid out as the projections leave them (``[B, L, H, D]`` viewed as
``[B, H, L, D]``), all requiring grad, causal prefill (no mask), at several lengths. The prompt is
bos + "document :" + passages of ``--passage`` tokens (``[d]`` … ``[e_i]``) + a 16-token question
(``[q]`` … ``[e_q]``) + the rest as answer tail. Variants:

- ``sdpa``: plain causal SDPA on every head (the baseline);
- ``fused_all``: every head fused; ``fused_2of8``: two heads fused (1 and 6, both KV groups), the
  others plain. Both build the bias inside the timed step (token ids → ``segment_ids`` →
  ``call_mask`` → ``fusion_bias``) from a log α that requires grad, as in training;
- ``fused_all_frozen_alpha``: as ``fused_all`` but log α needs no grad (evaluation, or α
  detached): PyTorch's fused CPU kernel then runs with the float mask. With a bias that requires
  grad, the dispatcher falls back to the math backend, which materialises the scores: this
  variant shows what that fallback costs.

Memory and time are measured as in ``rectified_attention.py`` (``measure.py``): peak live memory
of one warm step in a fresh process per cell (pinned mmap threshold, RSS high-water mark), time
as the median of interleaved repeats in one process per length.

    python benchmarks/relevance_fusion.py   # -> benchmarks/results/relevance_fusion.{json,md}

``--cuda``: the same step on one GPU in bf16 (defaults: 32 heads, 8 KV heads, head dim 128, 4096
and 8192 tokens), one process, JSON printed to stdout (one line per cell as it is measured, then
the table): plain causal SDPA, today's bias path (``bias_all``, ``bias_2of32``: ``fusion_bias`` +
``relevance_attention``) and FlexAttention (``flex_all``, ``flex_2of32``: ``methods/lkg/flex.py``,
compiled; the first step of each compiles, outside the measure). The segments are computed once
(the model does so once per forward); the bias paths build their bias in every step (the model
builds one per layer); the flex paths reuse their block mask across steps as the model's layers
do, and ``flex_all_new_mask`` builds it in every step (what one layer per forward would pay).
``flex_all_rows_apart`` and ``flex_2of32_rows_apart`` are those paths with ``flex.ROWS_APART``
(the guided rows materialised apart, flex without score_mod). Three more take ``flex_2of32``
apart: ``flex_2of32_alone`` is the two fused heads' FlexAttention on its own (their q, K, V
selected outside the step; ``_fixed_alpha``: log α without a gradient, the score_mod's
captured-tensor gradient left out; ``_rows_apart``: with ``flex.ROWS_APART``),
``flex_2of32_copied`` the split of the heads as ``kernel.by_heads`` does it (the plain heads' q
copied, K and V expanded to them, the outputs concatenated and reordered), which the flex path
used before ``kernel.spliced_by_heads`` (SDPA on every head, the fused heads' outputs put in
place).
Time: median of CUDA-event-timed steps; memory: peak allocated during one step above what was
allocated before it (the inputs).

    PYTHONPATH=$PWD python benchmarks/relevance_fusion.py --cuda
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import date
from pathlib import Path

from measure import median_seconds, peak_mib_above, run_child

VARIANTS = ("sdpa", "fused_all", "fused_2of8", "fused_all_frozen_alpha")
TWO_HEADS = (1, 6)
MARKERS = {"d": 1000, "e": 1001, "q": 1002, "eq": 1003}
QUESTION_TOKENS, HEAD_TOKENS = 16, 3
OUT = Path(__file__).resolve().parent / "results"
CPU_DEFAULTS = {"lengths": [512, 2048, 4096], "heads": 8, "kv_heads": 4, "head_dim": 64}
CUDA_DEFAULTS = {"lengths": [4096, 8192], "heads": 32, "kv_heads": 8, "head_dim": 128}


def layout(n: int, passage: int) -> tuple[list[int], int]:
    """Token ids of an n-token prompt (words are ids below 1000) and its number of passages."""
    n_passages = max((n - HEAD_TOKENS - 2 * QUESTION_TOKENS) // passage, 0)
    ids = [1, 3, 4]  # bos, "document", ":"
    for _ in range(n_passages):
        ids += [MARKERS["d"]] + [5] * (passage - 2) + [MARKERS["e"]]
    ids += [MARKERS["q"]] + [7] * (QUESTION_TOKENS - 2) + [MARKERS["eq"]]
    ids += [9] * (n - len(ids))
    return ids[:n], n_passages


def _setup(n: int, heads: int, kv_heads: int, head_dim: int, passage: int, threads: int):
    """Inputs and the step function of every variant (run in the child process)."""
    import torch

    from zoomattn.attention.math import sdpa
    from zoomattn.methods.lkg import kernel as lkg

    torch.set_num_threads(threads)
    torch.manual_seed(0)

    def projected(h):  # [B, L, H, D] viewed as [B, H, L, D], as q_proj(x).view(...).transpose(1, 2)
        return torch.randn(1, n, h, head_dim).transpose(1, 2).requires_grad_(True)

    q, k, v = projected(heads), projected(kv_heads), projected(kv_heads)
    row, n_passages = layout(n, passage)
    ids = torch.tensor([row])
    boundary = lkg.Boundary(**MARKERS)
    log_alpha = torch.randn(1, n_passages).requires_grad_(True)
    frozen_alpha = log_alpha.detach()

    def fused(fused_heads, alpha):
        segments = lkg.segment_ids(ids, boundary)
        bias = lkg.fusion_bias(segments, segments, alpha, lkg.call_mask(None, n, n, q.device))
        return lkg.relevance_attention(q, k, v, None, None, fused_heads, bias)

    everything = tuple(range(heads))
    fns = {
        "sdpa": lambda: sdpa(q, k, v),
        "fused_all": lambda: fused(everything, log_alpha),
        "fused_2of8": lambda: fused(TWO_HEADS, log_alpha),
        "fused_all_frozen_alpha": lambda: fused(everything, frozen_alpha),
    }

    def step(variant):
        fns[variant]().square().mean().backward()
        for t in (q, k, v, log_alpha):
            t.grad = None

    mib = sum(t.numel() * t.element_size() for t in (q, k, v)) / 2**20
    extra = (ids.numel() * ids.element_size() + log_alpha.numel() * 4) / 2**20
    input_mib = {name: mib + (0 if name == "sdpa" else extra) for name in VARIANTS}
    return step, input_mib, n_passages


def measure_memory(variant: str, n: int, shape: dict, passage: int, threads: int) -> dict:
    step, input_mib, _ = _setup(n, **shape, passage=passage, threads=threads)
    peak = peak_mib_above(lambda: step(variant))
    return {"variant": variant, "n": n, "peak_mib": peak, "input_mib": input_mib[variant]}


def measure_time(
    variants: list[str], n: int, shape: dict, passage: int, threads: int, repeats: int
) -> dict:
    step, _, n_passages = _setup(n, **shape, passage=passage, threads=threads)
    return {"seconds": median_seconds(step, variants, repeats), "passages": n_passages}


def report(memory: dict, timed: dict, args) -> tuple[dict, str]:
    """memory[(variant, n)] = measure_memory(...); timed[n] = measure_time(...)."""
    table = []
    for n in args.lengths:
        seconds, base = timed[n]["seconds"], memory[("sdpa", n)]
        for variant in VARIANTS:
            r = memory[(variant, n)]
            table.append(
                {
                    "n": n,
                    "variant": variant,
                    "passages": timed[n]["passages"],
                    "seconds": seconds[variant],
                    "peak_above_inputs_mib": r["peak_mib"],
                    "peak_with_inputs_mib": r["peak_mib"] + r["input_mib"],
                    "input_mib": r["input_mib"],
                    "time_vs_sdpa": seconds[variant] / seconds["sdpa"],
                    "memory_above_inputs_vs_sdpa": r["peak_mib"] / base["peak_mib"],
                    "memory_with_inputs_vs_sdpa": (r["peak_mib"] + r["input_mib"])
                    / (base["peak_mib"] + base["input_mib"]),
                    "bias_mib": n * n * 4 / 2**20,  # one fp32 [1, 1, L, L] bias
                }
            )
    meta = {
        "date": date.today().isoformat(),
        "threads": args.threads,
        "repeats": args.repeats,
        "passage_tokens": args.passage,
        "fused_heads_of_fused_2of8": list(TWO_HEADS),
        "shape": f"B=1, heads={args.heads}, kv_heads={args.kv_heads}, "
        f"head_dim={args.head_dim}, fp32, CPU",
        "load_average_1min_start_end": args.load,
    }
    lines = [
        f"Relevance fusion (LKG-RALM) forward+backward vs plain causal SDPA ({meta['shape']}; "
        f"passages of {args.passage} tokens; bias built inside the step; {args.threads} threads; "
        f"{meta['date']}; time: median of {args.repeats}, variants interleaved; memory: peak live "
        f"memory of one warm step, fresh process per cell; 1-min load average at start/end "
        f"{args.load[0]:.1f}/{args.load[1]:.1f}: other processes inflate times). "
        f"fused_2of8 fuses heads {', '.join(map(str, TWO_HEADS))}; fused_all_frozen_alpha: log α "
        "without grad (the fused kernel runs; with grad PyTorch falls back to its math backend).",
        "",
        "| tokens | passages | variant | time / SDPA | peak mem above inputs / SDPA "
        "| peak mem with inputs / SDPA | s | MiB above inputs | inputs MiB | bias MiB |",
        "|" + "---|" * 10,
    ]
    for e in table:
        lines.append(
            f"| {e['n']} | {e['passages']} | {e['variant']} | {e['time_vs_sdpa']:.2f}× "
            f"| {e['memory_above_inputs_vs_sdpa']:.2f}× | {e['memory_with_inputs_vs_sdpa']:.2f}× "
            f"| {e['seconds']:.3f} | {e['peak_above_inputs_mib']:.1f} | {e['input_mib']:.1f} "
            f"| {e['bias_mib']:.0f} |"
        )
    return {"meta": meta, "rows": table}, "\n".join(lines) + "\n"


CUDA_VARIANTS = (
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
)
TWO_OF_32 = (1, 22)  # two KV groups of 8


def _cuda_steps(n: int, heads: int, kv_heads: int, head_dim: int, passage: int, device="cuda"):
    """The step of every CUDA variant on one set of bf16 inputs, the inputs' MiB, the number of
    passages, and each variant's forward (``device``: "cpu" for the suite's smoke test, with
    eager flex)."""
    import torch

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
    row, n_passages = layout(n, passage)
    segments = segment_ids(torch.tensor([row], device=device), Boundary(**MARKERS))
    log_alpha = torch.randn(1, n_passages, device=device).requires_grad_(True)
    everything = tuple(range(heads))

    def bias(fused_heads):
        b = fusion_bias(segments, segments, log_alpha, call_mask(None, n, n, q.device))
        return relevance_attention(q, k, v, None, None, fused_heads, b)

    def flex_path(fused_heads, new_mask=False):
        if new_mask:
            flex._last.clear()
        return flex.flex_relevance_attention(
            q, k, v, None, None, fused_heads, segments, segments, log_alpha
        )

    def flex_heads(q, k, v, alpha=log_alpha):  # the fused heads' FlexAttention, as the path's
        return flex.flex_fused_heads(q, k, v, None, None, segments, segments, alpha)

    def apart(on, fn):  # flex.ROWS_APART pinned for the forward (backward reads it not)
        def run():
            previous, flex.ROWS_APART = flex.ROWS_APART, on
            try:
                return fn()
            finally:
                flex.ROWS_APART = previous

        return run

    # the fused heads' kernel alone: their q and K/V selected once, outside the timed step
    two = []
    if max(TWO_OF_32) < heads:
        two = [t.detach().requires_grad_(True) for t in _select(q, k, v, list(TWO_OF_32))]

    fns = {
        "sdpa": lambda: sdpa(q, k, v),
        "bias_all": lambda: bias(everything),
        "bias_2of32": lambda: bias(TWO_OF_32),
        "flex_all": apart(False, lambda: flex_path(everything)),
        "flex_2of32": apart(False, lambda: flex_path(TWO_OF_32)),
        "flex_2of32_copied": apart(
            False, lambda: by_heads(q, k, v, None, None, TWO_OF_32, flex_heads)
        ),
        "flex_2of32_alone": apart(False, lambda: flex_heads(*two)),
        "flex_2of32_alone_fixed_alpha": apart(
            False, lambda: flex_heads(*two, alpha=log_alpha.detach())
        ),
        "flex_all_new_mask": apart(False, lambda: flex_path(everything, new_mask=True)),
        "flex_all_rows_apart": apart(True, lambda: flex_path(everything)),
        "flex_2of32_rows_apart": apart(True, lambda: flex_path(TWO_OF_32)),
        "flex_2of32_alone_rows_apart": apart(True, lambda: flex_heads(*two)),
    }

    def step(variant):
        fns[variant]().float().square().mean().backward()
        for t in (q, k, v, log_alpha, *two):
            t.grad = None

    inputs_mib = sum(t.numel() * t.element_size() for t in (q, k, v)) / 2**20
    return step, inputs_mib, n_passages, fns


def measure_cuda(variant: str, step, repeats: int) -> dict:
    import torch

    step(variant)  # compiles the flex paths
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step(variant)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    step(variant)
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - before) / 2**20
    return {"seconds": sorted(times)[len(times) // 2], "peak_above_inputs_mib": peak}


def main_cuda(args) -> None:
    import torch

    rows = []
    for n in args.lengths:
        step, inputs_mib, n_passages, _ = _cuda_steps(
            n, args.heads, args.kv_heads, args.head_dim, args.passage
        )
        cells = {}
        for variant in args.variants or CUDA_VARIANTS:
            if "2of32" in variant and max(TWO_OF_32) >= args.heads:
                continue
            cells[variant] = measure_cuda(variant, step, args.repeats)
            line = {"n": n, "variant": variant, "passages": n_passages, **cells[variant]}
            print(json.dumps(line), flush=True)
        base = cells["sdpa"]
        for variant, cell in cells.items():
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
        del step
        torch.cuda.empty_cache()
    meta = {
        "date": date.today().isoformat(),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "shape": f"B=1, heads={args.heads}, kv_heads={args.kv_heads}, "
        f"head_dim={args.head_dim}, bf16, forward+backward, log α requires grad",
        "passage_tokens": args.passage,
        "fused_heads_of_2of32": list(TWO_OF_32),
        "repeats": args.repeats,
    }
    print(json.dumps({"meta": meta, "rows": rows}, indent=1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--cuda", action="store_true", help="bf16 on one GPU (module docstring)")
    p.add_argument("--lengths", type=int, nargs="+")
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--head-dim", type=int)
    p.add_argument("--passage", type=int, default=100)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=OUT)
    only = "with --cuda: these variants only, sdpa first (default: every one)"
    p.add_argument("--variants", nargs="+", choices=CUDA_VARIANTS, metavar="VARIANT", help=only)
    args = p.parse_args()
    if args.variants and (not args.cuda or args.variants[0] != "sdpa"):
        p.error("--variants: with --cuda, sdpa first (the baseline of every ratio)")
    defaults = CUDA_DEFAULTS if args.cuda else CPU_DEFAULTS
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.cuda:
        main_cuda(args)
        return
    if args.child:
        task = json.loads(args.child)
        if task.pop("kind") == "memory":
            print(json.dumps(measure_memory(**task)))
        else:
            print(json.dumps(measure_time(**task)))
        return
    if max(TWO_HEADS) >= args.heads:
        raise SystemExit(f"--heads must exceed {max(TWO_HEADS)} (fused_2of8 fuses {TWO_HEADS})")
    shape = {"heads": args.heads, "kv_heads": args.kv_heads, "head_dim": args.head_dim}
    common = {"shape": shape, "passage": args.passage, "threads": args.threads}
    memory, timed = {}, {}
    load_start = os.getloadavg()[0]
    for n in args.lengths:
        for variant in VARIANTS:
            task = {"kind": "memory", "variant": variant, "n": n, **common}
            memory[(variant, n)] = run_child(__file__, task)
            print(json.dumps(memory[(variant, n)]), flush=True)
        task = {"kind": "time", "variants": list(VARIANTS), "n": n, **common}
        timed[n] = run_child(__file__, {**task, "repeats": args.repeats})
        print(json.dumps({"n": n, **timed[n]}), flush=True)
    args.load = (load_start, os.getloadavg()[0])
    data, md = report(memory, timed, args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "relevance_fusion.json").write_text(json.dumps(data, indent=1) + "\n")
    (args.out / "relevance_fusion.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
