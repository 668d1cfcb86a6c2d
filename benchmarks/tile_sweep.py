"""What the fused kernels' GPU benchmarks (``rectified_triton.py``, ``opamp_triton.py``, partly
``opamp_stacked.py``) share: their common arguments and ``--smoke`` set-up, timing a step and its
peak memory, the bytes autograd keeps, a padding mask, and the tile sweep, which tries each
kernel's candidate tiles with the others at the table's.

A tile is (BLOCK_M, BLOCK_N, warps, stages). BLOCK_M is the query tile (the dK/dV kernel's step
over query rows), BLOCK_N the key tile (the forward and dQ kernels' step). Both kernels take a
table ``{"forward": tile, "kv": tile, "q": tile, "decode": tile}`` (the forward's tile for a call
of a few queries; the sweep leaves it as the table has it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time

import allocator_trace
import torch

SWEEP = {
    "forward": [(m, n, w, s) for m in (64, 128) for n in (32, 64) for w in (4, 8) for s in (2, 3)],
    "kv": [(m, n, w, s) for n in (32, 64) for m in (16, 32, 64) for w in (4, 8) for s in (1, 2)],
    "q": [(m, n, w, s) for m in (32, 64) for n in (16, 32, 64) for w in (4, 8) for s in (1, 2)],
}
# rectification's dK/dV as [keys, queries] tiles (KV_KEYS_AS_ROWS): 64 or 128 keys, the rows
# Hopper's warpgroup MMA needs (benchmarks/results/triton_static.md)
SWEEP_KEYS_AS_ROWS = {
    "kv": [(m, n, w, s) for n in (64, 128) for m in (16, 32) for w in (4, 8) for s in (1, 2)],
}


def sweep_candidates(keys_as_rows: bool) -> dict:
    """Each kernel's candidate tiles: ``SWEEP``, dK/dV's from ``SWEEP_KEYS_AS_ROWS`` where its
    tiles are laid out keys first (rectification's ``KV_KEYS_AS_ROWS``)."""
    return {**SWEEP, **SWEEP_KEYS_AS_ROWS} if keys_as_rows else SWEEP


def once_ms(fn, device: str) -> float:
    """Milliseconds of one call of ``fn``: CUDA events on CUDA, wall time on the CPU (Triton's
    interpreter: ``--smoke``)."""
    if device == "cpu":
        t0 = time.perf_counter()
        fn()
        return 1e3 * (time.perf_counter() - t0)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def median_ms(fn, repeats: int, device: str) -> float:
    """Median ``once_ms`` of ``fn`` over ``repeats`` calls after one warm-up (which compiles the
    kernels)."""
    fn()
    return statistics.median(once_ms(fn, device) for _ in range(repeats))


def kernel_times(fn, device: str) -> list[tuple[str, float]]:
    """One call of ``fn`` under torch's profiler: every kernel (CUDA's; on the CPU, ops:
    ``--smoke``) with its own time in ms summed over its launches, longest first (no parent op
    counts its children again)."""
    from torch.profiler import ProfilerActivity, profile

    activity = ProfilerActivity.CUDA if device == "cuda" else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        fn()
        if device == "cuda":
            torch.cuda.synchronize()

    def own(e):
        return e.self_device_time_total if device == "cuda" else e.self_cpu_time_total

    times = [(e.key, own(e) / 1e3) for e in prof.key_averages() if own(e) > 0]
    return sorted(times, key=lambda t: -t[1])


def longest(times: list[tuple[str, float]], top: int = 12) -> dict[str, float]:
    """The first ``top`` of ``kernel_times``, by name cut to 90 characters."""
    return {name[:90]: round(ms, 3) for name, ms in times[:top]}


def peak_mib(fn) -> float:
    """Peak CUDA memory allocated while ``fn`` runs, above what was allocated before it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def rel_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    """‖ours − reference‖ / ‖reference‖ in fp32."""
    ours, reference = ours.float(), reference.float()
    return ((ours - reference).norm() / reference.norm()).item()


def timed_variants(step, variants, repeats: int, device: str, trace: str | None = None) -> dict:
    """Each variant's ``step(variant)``: its median milliseconds over ``repeats`` rounds, variants
    interleaved after one warm-up each (which compiles the kernels), and on CUDA its peak memory;
    then every variant but the first (the baseline, plain SDPA) as a ratio to the first. A variant
    whose warm-up fails gets ``<variant>_error`` and the others go on, unless it is the baseline
    or the failure left the device unusable (``device_lost``): then the error is raised. With
    ``trace`` (a path prefix, CUDA) each variant's step once more under ``allocator_trace``."""
    row, base = {}, variants[0]
    for variant in variants:
        try:
            step(variant)
        except Exception as error:
            if variant == base or device_lost(device):
                raise
            row[f"{variant}_error"] = failure(error)
    variants = [variant for variant in variants if f"{variant}_error" not in row]
    times = {variant: [] for variant in variants}
    for _ in range(repeats):
        for variant in variants:
            times[variant].append(once_ms(lambda v=variant: step(v), device))
    for variant in variants:
        row[f"{variant}_ms"] = statistics.median(times[variant])
        if device == "cuda":
            row[f"{variant}_peak_mib_above_inputs"] = peak_mib(lambda v=variant: step(v))
        if device == "cuda" and trace:
            path = f"{trace}_{variant}.pickle"
            row[f"{variant}_memory_trace"] = allocator_trace.traced(lambda v=variant: step(v), path)
    for variant in variants[1:]:
        row[f"{variant}_time_vs_{base}"] = row[f"{variant}_ms"] / row[f"{base}_ms"]
        if device == "cuda":
            row[f"{variant}_memory_vs_{base}"] = (
                row[f"{variant}_peak_mib_above_inputs"] / row[f"{base}_peak_mib_above_inputs"]
            )
    return row


def try_tiles(table: dict, run, budget_s: float, device: str, per_kernel=None, candidates=None):
    """Each kernel's candidates (``candidates``, default ``SWEEP``; the first ``per_kernel`` of
    each) with the others at ``table``'s, timed by ``run(tiles, backward)``: the forward kernel
    forward alone, the two others forward + backward. A candidate that does not compile or launch
    (registers, shared memory) is recorded with its error; after ``budget_s`` seconds, or once an
    error has left the device unusable (``device_lost``), the rest are recorded as not tried.
    Returns (every candidate's row, the table with each kernel's fastest tile)."""
    deadline, tried, candidates = time.monotonic() + budget_s, [], candidates or SWEEP
    lost = None
    for name, tiles_of_kernel in candidates.items():
        for tile in tiles_of_kernel[:per_kernel]:
            row = {"kernel": name, "tile": list(tile)}
            if lost or time.monotonic() > deadline:
                tried.append({**row, "status": f"not tried: {lost or 'out of time'}"})
                continue
            tiles, backward = {**table, name: tile}, name != "forward"
            try:
                ms = median_ms(lambda t=tiles, b=backward: run(t, b), 3, device)
                tried.append({**row, "status": "ok", "ms": round(ms, 3)})
            except Exception as error:  # registers, shared memory: the tile does not fit
                tried.append({**row, "status": failure(error, 160)})
                if device_lost(device):
                    lost = f"the device was unusable after {name} {list(tile)}"
            print(json.dumps(tried[-1]), flush=True)
    best = dict(table)
    for name in candidates:
        timed = [r for r in tried if r["kernel"] == name and r["status"] == "ok"]
        if timed:
            best[name] = tuple(min(timed, key=lambda r: r["ms"])["tile"])
    return tried, best


def failure(error: Exception, limit: int = 300) -> str:
    """A failed variant's or candidate's record: the error's type and its message's start."""
    return f"{type(error).__name__}: {str(error)[:limit]}"


def device_lost(device: str) -> bool:
    """After an error: whether ``device`` still runs work. A tile that does not fit leaves CUDA as
    it was; an illegal memory access breaks its context for the rest of the process."""
    try:
        torch.ones(1, device=device).add_(1).item()
        return False
    except RuntimeError:
        return True


def sweep_result(table, best, tried, run, baselines: dict, repeats, device, shape) -> dict:
    """The sweep's record: the baselines' times (``{name: step}``, plain SDPA first), the table's
    and the best table's forward + backward, each as a ratio to the first baseline, the best
    table's output error to the table's, and every candidate's row (``tried``). Where those
    timings fail (the device lost to a candidate), the rows and the error, not a crash that would
    lose the rows."""
    record = {
        "device": device_name(device),
        "shape": f"{shape}, bf16, fwd+bwd",
        "table": {k: list(t) for k, t in table.items()},
        "best": {k: list(t) for k, t in best.items()},
    }
    try:
        times = {f"{name}_ms": median_ms(fn, repeats, device) for name, fn in baselines.items()}
        times["table_ms"] = median_ms(lambda: run(table, True), repeats, device)
        times["best_ms"] = median_ms(lambda: run(best, True), repeats, device)
        error = rel_error(run(best, False), run(table, False))
    except Exception as failed:
        return {**record, "error": failure(failed), "tried": tried}
    base = next(iter(times))
    return {
        **record,
        **{key: round(ms, 3) for key, ms in times.items()},
        **{
            f"{key[:-3]}_vs_{base[:-3]}": round(ms / times[base], 3)
            for key, ms in times.items()
            if key != base
        },  # fmt: skip
        "best_vs_table_rel_error": error,
        "tried": tried,
    }


def padding_mask(n: int, padded: float, device: str, side: str = "left") -> torch.Tensor | None:
    """[1, 1, n, n] causal mask whose first (``side`` "left": generation's prompts) or last
    ("right": training's batches, whose padded rows see every real key) ``padded`` fraction of
    positions is padding, as transformers builds it (None for none)."""
    if not padded:
        return None
    causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    keys, pads = torch.arange(n, device=device), int(padded * n)
    real = keys >= pads if side == "left" else keys < n - pads
    return (causal & real[None, :])[None, None]


def add_shape_arguments(p: argparse.ArgumentParser, lengths: list[int]) -> None:
    """One layer's shape and the repeats, as every attention micro-benchmark takes them."""
    p.add_argument("--lengths", type=int, nargs="+", default=lengths)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments both Triton kernels' benchmarks take."""
    add_shape_arguments(p, [2048, 8192])
    p.add_argument("--tiles", type=json.loads, default=None,
                   help='JSON {"forward"|"kv"|"q": [BLOCK_M, BLOCK_N, warps, stages]}, '
                        "merged over the default table")  # fmt: skip
    p.add_argument("--padded", type=float, default=0.0,
                   help="fraction of padding, through a boolean mask")  # fmt: skip
    p.add_argument("--padding-side", choices=("left", "right"), default="left",
                   help="left: generation's prompts; right: training's batches")  # fmt: skip
    p.add_argument("--sweep", action="store_true", help="tune the tile table (see above)")
    p.add_argument("--budget-s", type=float, default=240, help="time for the sweep's candidates")
    p.add_argument("--out", default=None, help="write the sweep's JSON here")
    p.add_argument("--memory-trace", metavar="DIR", default=None,
                   help="on CUDA: each variant's step once more under the allocator's "
                        "history, pickled in DIR, and the blocks live at its peak")  # fmt: skip
    # each kernel's two switches on or off (--no-...), else as its module has them
    p.add_argument("--padding-spans", action=argparse.BooleanOptionalAction,
                   help="a padding mask as each row's real keys (PADDING_SPANS)")  # fmt: skip
    p.add_argument("--kv-keys-as-rows", action=argparse.BooleanOptionalAction,
                   help="dK/dV's tiles as [keys, queries] (KV_KEYS_AS_ROWS), at the table's "
                        'tile for it or one given: --tiles \'{"kv": [16, 64, 4, 2]}\'')  # fmt: skip
    p.add_argument("--tritons-special", action="store_true",
                   help="the kernels' special functions (eˣ, 1/x, σ, ln x), g and row finish as "
                        "before their .ftz instructions (triton_special.py)")  # fmt: skip
    p.add_argument("--libdevice-log", action="store_true",
                   help="ln x as tl.log (libdevice's logf), not lg2.approx "
                        "(triton_special.py)")  # fmt: skip
    p.add_argument("--smoke", action="store_true",
                   help="the mechanics on the CPU: tiny shape, Triton's interpreter, two "
                        "candidates per kernel in a sweep (times mean nothing)")  # fmt: skip


def device_for(args, script: str) -> str:
    """ "cuda", or with ``--smoke`` "cpu" under Triton's interpreter at a tiny shape (set on args;
    call before triton is first imported)."""
    if args.smoke and args.memory_trace:
        raise SystemExit(f"{script}: --memory-trace reads CUDA's allocator, not with --smoke")
    if not args.smoke:
        if not torch.cuda.is_available():
            raise SystemExit(f"{script}: needs a CUDA device (the Triton kernel's)")
        return "cuda"
    os.environ["TRITON_INTERPRET"] = "1"  # read when triton is first imported
    from tests.triton_interpreter import squeeze_interpreter_indices

    squeeze_interpreter_indices()
    args.lengths, args.heads, args.kv_heads, args.head_dim, args.repeats = [40], 2, 1, 16, 1
    return "cpu"


def torch_device_for(args, script: str, smoke_length: int) -> str:
    """For a benchmark without a Triton kernel: "cuda", or with ``--smoke`` "cpu" at a tiny shape
    (set on args, ``smoke_length`` tokens); ``args.tiles`` says there is none
    (``report_lengths`` reads it)."""
    args.tiles = "none: no Triton kernel"
    if args.smoke:
        args.lengths, args.heads, args.kv_heads, args.head_dim = [smoke_length], 2, 1, 16
        args.repeats = 1
        return "cpu"
    if not torch.cuda.is_available():
        raise SystemExit(f"{script}: needs a CUDA device (--smoke: the mechanics on the CPU)")
    return "cuda"


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    return "cpu (Triton interpreter)" if os.environ.get("TRITON_INTERPRET") == "1" else "cpu"


@contextlib.contextmanager
def switched(module, **values):
    """The block with ``module``'s switches (a kernel's module constants) set to ``values``, each
    put back as it was after it."""
    previous = {name: getattr(module, name) for name in values}
    try:
        for name, value in values.items():
            setattr(module, name, value)
        yield
    finally:
        for name, value in previous.items():
            setattr(module, name, value)


def set_switches(module, args) -> str:
    """Set the kernel ``module``'s PADDING_SPANS and KV_KEYS_AS_ROWS where the command line gives
    them (``add_arguments``); what they then are, for the report's header."""
    for name, on in (("PADDING_SPANS", args.padding_spans),
                     ("KV_KEYS_AS_ROWS", args.kv_keys_as_rows)):  # fmt: skip
        if on is not None:
            setattr(module, name, on)
    spans = "padding spans" if module.PADDING_SPANS else "mask bytes"
    return f"{spans}, dK/dV {'keys' if module.KV_KEYS_AS_ROWS else 'queries'} as rows"


def with_switch(module, name: str, value, fn):
    """fn() with ``module.name`` (a kernel's switch) set to ``value``, then put back as it was."""
    with switched(module, **{name: value}):
        return fn()


def kept_bytes(fn, exclude: set[int]) -> int:
    """Bytes of the tensors autograd keeps from ``fn``'s forward for its backward, counted once per
    storage, leaving out the storages whose pointers are in ``exclude`` (the inputs)."""
    kept = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(n for ptr, n in kept.items() if ptr not in exclude)


def report_sweep(result: dict, out: str | None) -> None:
    """The sweep's summary on stdout, and every candidate's row in ``out`` (JSON)."""
    print(json.dumps({k: v for k, v in result.items() if k != "tried"}))
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)


def merged_tiles(default: dict, tiles: dict | None) -> dict | None:
    """``--tiles`` over the kernel's default table (None: the kernel picks its own)."""
    if tiles is None:
        return None
    return {**default, **{name: tuple(t) for name, t in tiles.items()}}


def report_lengths(args, measure_one, what: str, device: str) -> None:
    """``measure_one(n, args)`` at each of ``--lengths``, a JSON line per length as it is measured,
    then a summary line: the device, the shape (``what`` says the case), the tiles and each
    length's ratios (the rows' keys with "vs")."""
    rows = []
    for n in args.lengths:
        rows.append(measure_one(n, args))
        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({
        "device": device_name(device),
        "shape": f"heads={args.heads}, kv_heads={args.kv_heads}, head_dim={args.head_dim}, bf16, "
        + what,
        "tiles": args.tiles or "default",
        **{f"{r['n']}": {k: float(f"{r[k]:.4g}") for k in r if "vs" in k} for r in rows},
    }))  # fmt: skip
