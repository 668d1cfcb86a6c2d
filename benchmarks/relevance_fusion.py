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

``--cuda``: the same step on one GPU in bf16 with FlexAttention beside it
(``relevance_fusion_cuda.py``, whose docstring lists its variants).

    PYTHONPATH=$PWD python benchmarks/relevance_fusion.py --cuda
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import date
from pathlib import Path

import relevance_fusion_cuda
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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--cuda", action="store_true", help="bf16 on one GPU (module docstring)")
    p.add_argument("--lengths", type=int, nargs="+")
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--head-dim", type=int)
    p.add_argument("--passage", type=int, default=100)
    padded = "with --cuda: this fraction of the tokens padding (a mask)"
    p.add_argument("--padded", type=float, default=0.0, help=padded)
    p.add_argument("--padding-side", choices=("left", "right"), default="left",
                   help="left: generation's prompts; right: training's batches")  # fmt: skip
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=OUT)
    only = "with --cuda: these variants only, sdpa first (default: every one)"
    p.add_argument("--variants", nargs="+", choices=relevance_fusion_cuda.VARIANTS,
                   metavar="VARIANT", help=only)  # fmt: skip
    args = p.parse_args()
    if args.padded and not args.cuda:
        p.error("--padded: with --cuda only")
    if not 0 <= args.padded < 1:
        p.error(f"--padded: a fraction of the tokens in [0, 1), got {args.padded}")
    if args.variants and (not args.cuda or args.variants[0] != "sdpa"):
        p.error("--variants: with --cuda, sdpa first (the baseline of every ratio)")
    defaults = CUDA_DEFAULTS if args.cuda else CPU_DEFAULTS
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.cuda:
        relevance_fusion_cuda.main(args)
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
