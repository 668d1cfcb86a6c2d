"""What ptxas makes of the fused attention kernels for an H100/H200 (sm_90), without a GPU.

Each kernel is compiled from the launches our host code makes. The method's fused function runs
forward and backward on CPU tensors of the benchmark's shape (post-RoPE q laid out as the
projections leave it, bf16, 32 query heads over 8 KV heads, head dim 128) with its Triton kernels
swapped for recorders and its CUDA-only input check off. Each recorded launch then goes through
Triton's own binder (``JITFunction._pack_args``: an integer 1 becomes a constant, multiples of 16
and 16-byte-aligned pointers are marked divisible) and is compiled for sm_90, as the JIT would
compile it on the card. Compiling without those marks (as the tile tables of 2026-11-26 were
chosen) gives another kernel: no vectorised loads, hence no pipelining, and ~100 more registers.

Per kernel and tile: registers per thread, spilled bytes (stack; local stores and loads), shared
memory and whether it fits the card (227 KiB per block), the tensor-core instructions (wgmma:
Hopper's warpgroup MMA; mma.sync: Ampere's), special-function instructions (MUFU: exp, log,
reciprocal), the subnormal range checks ptxas wraps around such an instruction without .ftz
(a compare and two or three predicated instructions each; the kernels take the .ftz ones,
``triton_tiles.exp``), every instruction of the kernel's code (a static count, not how many run),
those of its inner loop, which every tile runs, the MUFU among them and the bytes its global
loads request (also per score of the tile: ``per_score``), and whether the key and value loads
are pipelined (async copies). The SASS is read by ``sass_counts.py``. Speed stays a
GPU measurement: this finds the tiles that cannot launch, spill, or are not pipelined, or repeat
work, and the other launches the kernels can be given (``VARIANTS``: every g, fp16 and fp32, a
decoding step) that would not compile on the card: the interpreter, which the suite's
correctness tests run, compiles nothing.

    PYTHONPATH=$PWD python benchmarks/triton_static.py                 # tables and VARIANTS
    PYTHONPATH=$PWD python benchmarks/triton_static.py --sweep         # + rectification's sweep
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
from sass_counts import SUBNORMAL_CHECK, base, cuobjdump, inner_loop, load_bytes, opcode_counts
from tile_sweep import padding_mask, switched
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import JITFunction, create_function_from_signature

SM90 = GPUTarget("cuda", 90, 32)
SHARED_LIMIT = 232448  # bytes of shared memory one block may use on sm_90 (227 KiB)
CUDA = torch.device("cuda")  # only to pick the methods' CUDA tile tables: no CUDA call is made
KERNELS = ("_forward", "_backward_kv", "_backward_q")


@dataclass
class Launch:
    kernel: object  # the JITFunction
    args: tuple
    kwargs: dict


class _Recorder:
    def __init__(self, kernel, launches: list):
        self.kernel, self.launches = kernel, launches

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append(Launch(self.kernel, args, kwargs))


@contextlib.contextmanager
def recorded(module):
    """The launches of ``module``'s three kernels while the block runs, none of them run; its
    input check (which wants CUDA tensors) off."""
    launches: list[Launch] = []
    saved = {name: getattr(module, name) for name in (*KERNELS, "_check_inputs")}
    try:
        for name in KERNELS:
            setattr(module, name, _Recorder(saved[name], launches))
        module._check_inputs = lambda *tensors: None
        yield launches
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def _projected(n: int, heads: int, head_dim: int, dtype=torch.bfloat16) -> torch.Tensor:
    """[1, heads, n, head_dim] viewed from the projections' [1, n, heads, head_dim]."""
    x = torch.zeros(1, n, heads, head_dim, dtype=dtype)
    return x.transpose(1, 2).requires_grad_(True)


def _mask(n: int, masked: bool, queries: int | None = None) -> torch.Tensor | None:
    """None (causal prefill), or a causal mask whose first quarter of positions is padding, on
    the CPU (the GPU sweep's ``--padded 0.25``); with ``queries``, its last rows (decoding)."""
    mask = padding_mask(n, 0.25 if masked else 0.0, "cpu")
    return mask if mask is None or queries is None else mask[:, :, -queries:]


def rectify_table() -> dict:
    from zoomattn.methods.rectify import triton_kernel

    return triton_kernel._tiles(128, CUDA)


def opamp_table(dtype=torch.bfloat16) -> dict:
    from zoomattn.methods.opamp import triton_kernel

    return triton_kernel._tiles(CUDA, dtype)


def rectify_launches(
    n: int, masked: bool, tiles=None, g="max", dtype=torch.bfloat16, queries=None, spans=None,
    keys_as_rows=None, kv=None, rounded_once=None, skip_padded_rows=None,
) -> list[Launch]:  # fmt: skip
    """The launches of one forward and backward at n tokens; with ``queries`` (a decoding step:
    that many queries over n keys) the forward only, as generation runs it. The switches, each
    as the kernel module has it unless given: ``spans``, ``PADDING_SPANS`` (the padding mask as
    each row's span of real keys); ``keys_as_rows``, ``KV_KEYS_AS_ROWS`` (dK/dV's tiles as
    [keys, queries]), ``kv`` its tile; ``rounded_once``, ``SPLIT_SCORE_GRADIENTS`` off (dZ
    rounded once in the backward's products); ``skip_padded_rows``, ``SKIP_PADDED_ROWS``."""
    from zoomattn.methods.rectify import triton_kernel
    from zoomattn.methods.rectify.kernel import Rectifier

    q, u = (_projected(queries or n, 32, 128, dtype) for _ in range(2))
    k, v = (_projected(n, 8, 128, dtype) for _ in range(2))
    g = Rectifier(g, 3.0)
    split = None if rounded_once is None else not rounded_once
    switches = {"PADDING_SPANS": spans, "KV_KEYS_AS_ROWS": keys_as_rows,
                "SPLIT_SCORE_GRADIENTS": split, "SKIP_PADDED_ROWS": skip_padded_rows}  # fmt: skip
    with switched(triton_kernel, **{k: on for k, on in switches.items() if on is not None}):
        tiles = tiles or rectify_table()  # the table as the switches give it
        if kv is not None:
            tiles = {**tiles, "kv": kv}
        # a decoding step as generation runs it: without autograd (no output residual stored)
        with recorded(triton_kernel) as launches, torch.set_grad_enabled(queries is None):
            out = triton_kernel.fused_rectified_attention(
                q, u, k, v, g, _mask(n, masked, queries), tiles=tiles
            )
            if queries is None:
                out.backward(torch.zeros_like(out))
    return launches


def opamp_launches(
    n: int, masked: bool, tiles=None, g=None, dtype=torch.bfloat16, queries=None, spans=None,
    keys_as_rows=None, kv=None,
) -> list[Launch]:  # fmt: skip
    """As ``rectify_launches`` (OpAmp has no g; its switches ``PADDING_SPANS`` and
    ``KV_KEYS_AS_ROWS``)."""
    from zoomattn.methods.opamp import triton_kernel

    q_stack = torch.zeros(1, 64, queries or n, 128, dtype=dtype, requires_grad=True)
    k_stack = torch.zeros(1, 16, n, 128, dtype=dtype, requires_grad=True)
    v = _projected(n, 8, 128, dtype)
    switches = {"PADDING_SPANS": spans, "KV_KEYS_AS_ROWS": keys_as_rows}
    with switched(triton_kernel, **{k: on for k, on in switches.items() if on is not None}):
        tiles = tiles or opamp_table(dtype)  # the table as the switches give it
        if kv is not None:
            tiles = {**tiles, "kv": kv}
        with recorded(triton_kernel) as launches:
            out = triton_kernel.two_branch_flash(
                q_stack, k_stack, v, (0.5, 5.0), _mask(n, masked, queries), tiles=tiles
            )
            if queries is None:
                out.backward(torch.zeros_like(out))
    return launches


METHODS = {"rectify": rectify_launches, "opamp": opamp_launches}
TABLES = {"rectify": rectify_table, "opamp": opamp_table}  # each method's CUDA tile table


def specialised(launch: Launch) -> tuple[ASTSource, object]:
    """The launch as Triton's JIT specialises it for an sm_90 card: its source and options."""
    kernel = launch.kernel
    if not isinstance(kernel, JITFunction):  # TRITON_INTERPRET=1 made it an InterpretedFunction
        raise RuntimeError("triton_static compiles JIT kernels: run it without TRITON_INTERPRET")
    backend = make_backend(SM90)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*launch.args, **launch.kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(
        backend, launch.kwargs, bound, specialization, options
    )
    return ASTSource(kernel, signature, constexprs, attrs), options


def compile_for_sm90(launch: Launch):
    """The launch compiled as Triton's JIT compiles it on an sm_90 card."""
    source, options = specialised(launch)
    return triton.compile(source, target=SM90, options=options.__dict__)


def describe(compiled) -> dict:
    """What ptxas made of one compiled kernel (fields as the module docstring)."""
    path = triton.knobs.nvidia.cuobjdump.path
    usage = cuobjdump(compiled.asm["cubin"], "--dump-resource-usage", path)
    sass = cuobjdump(compiled.asm["cubin"], "--dump-sass", path)
    opcodes, loop = opcode_counts(sass), inner_loop(sass)
    shared = compiled.metadata.shared
    return {
        "registers": int(re.search(r"REG:(\d+)", usage).group(1)),
        "spill_stack_bytes": int(re.search(r"STACK:(\d+)", usage).group(1)),
        "local_stores": opcodes["STL"],
        "local_loads": opcodes["LDL"],
        "shared_bytes": shared,
        "fits": shared <= SHARED_LIMIT,
        "wgmma": opcodes["HGMMA"],
        "mma_sync": opcodes["HMMA"],
        "mufu": opcodes["MUFU"],
        "subnormal_checks": len(re.findall(SUBNORMAL_CHECK, sass)),
        "instructions": sum(opcodes.values()),
        "loop_instructions": sum(loop.values()),
        "loop_mufu": base(loop)["MUFU"],
        "loop_load_bytes": load_bytes(loop),
        "pipelined": "async_copy_global_to_local" in compiled.asm["ttgir"],
    }


def per_score(row: dict) -> dict:
    """The inner loop's instructions and MUFU per score of the tile, in thread instructions (the
    loop's count, per thread, times the threads, over BLOCK_M × BLOCK_N): what the SM issues per
    score. A layout that computes each score's element-wise work twice shows as twice the MUFU
    per score of another tile of the same kernel. Also the bytes the loop's global loads request
    per score: the other side's rows, which each program reads again for every tile (K and V for
    a query tile; q, u, dO and their rows' statistics for a key tile) and L2 serves; a load that
    every thread of a warp makes of one address counts once per thread."""
    block_m, block_n, warps, _ = row["tile"]
    threads_per_score = 32 * warps / (block_m * block_n)
    load = row.get("loop_load_bytes")
    return {
        "loop_per_score": round(row["loop_instructions"] * threads_per_score, 1),
        "mufu_per_score": round(row["loop_mufu"] * threads_per_score, 2),
        "load_bytes_per_score": None if load is None else round(load * threads_per_score, 2),
    }


def static_rows(
    method: str, n: int, masked: bool, tiles: dict | None = None, kernels=KERNELS, **variant
) -> list[dict]:
    """One row per kernel (of ``kernels``) of ``method``'s fused forward + backward at ``tiles``
    (default: its table); ``variant`` as ``VARIANTS``' (default: g max, bf16, prefill)."""
    rows = []
    for launch in METHODS[method](n, masked, tiles, **variant):
        if launch.kernel.fn.__name__ not in kernels:
            continue
        kw = launch.kwargs
        mask = "left padding" if kw["HAS_MASK"] else "causal" if kw["CAUSAL"] else "none"
        row = {"method": method, "kernel": launch.kernel.fn.__name__, "tokens": n,
               "tile": [kw["BLOCK_M"], kw["BLOCK_N"], kw["num_warps"], kw["num_stages"]],
               "mask": mask}  # fmt: skip
        if variant:
            row["variant"] = ", ".join(f"{k}={str(v).removeprefix('torch.')}"
                                       for k, v in variant.items())  # fmt: skip
        t0 = time.perf_counter()
        try:
            row.update(describe(compile_for_sm90(launch)))
            row.update(per_score(row))
        except triton.CompilationError as error:  # recorded, as the GPU sweep records it
            row["error"] = str(error).strip().splitlines()[-1][:300]
        rows.append({**row, "compile_s": round(time.perf_counter() - t0, 2)})
    return rows


# The other launches the kernels can be given, (method, masked, variant), each at its method's
# table: every other g of the rectification study (ξ = 0 never reaches the kernel: SDPA on
# q + u), fp16 and fp32 inputs (``dtype: float32`` on a card), and a decoding step, the forward
# of one query over the cache (Triton's binder makes that 1 a constant, hence another kernel),
# with and without a padding mask: what generation would launch with rectification's
# ``FUSED_DECODING`` (on) or OpAmp's opt-in ``path="triton"``.
VARIANTS = [
    *[("rectify", True, {"g": g}) for g in ("tanh", "tanh_plus_x", "sigmoid")],
    # PADDING_SPANS off (on by default since 2026-11-27): the mask's bytes loaded per tile
    ("rectify", True, {"spans": False}),
    # both switches (the default since 2026-11-27): the dK/dV kernel keys first with the padding
    # as key spans, at 64 keys and at the table's 128
    *[
        ("rectify", True, {**both, "kv": kv, "kernels": ["_backward_kv"]})
        for both in [{"spans": True, "keys_as_rows": True}]
        for kv in ((16, 64, 4, 2), (16, 128, 8, 2))
    ],
    # KV_KEYS_AS_ROWS: dK/dV's [keys, queries] tiles at 32, 64 or 128 keys with the mask's bytes,
    # and off, its [queries, keys] tiles at the table's 16×32 as before
    *[
        (
            "rectify",
            masked,
            {"spans": False, "keys_as_rows": True, "kv": kv, "kernels": ["_backward_kv"]},
        )  # fmt: skip
        for kv in ((16, 32, 4, 2), (16, 64, 4, 2), (16, 128, 8, 2))
        for masked in (False, True)
    ],
    *[
        ("rectify", masked, {"spans": False, "keys_as_rows": False, "kernels": ["_backward_kv"]})
        for masked in (False, True)
    ],
    # SPLIT_SCORE_GRADIENTS off: dZ rounded once in the backward's products
    *[
        ("rectify", masked, {"rounded_once": True, "kernels": ["_backward_kv", "_backward_q"]})
        for masked in (False, True)
    ],
    # OpAmp's two switches (off until a card times them): the padding as key spans, and dK/dV
    # keys first at the table's tile (16×64, 8 warps: the one spill-free), at 128 keys and at 4
    # warps (one warpgroup)
    ("opamp", True, {"spans": True}),
    *[
        ("opamp", masked, {"keys_as_rows": True, "kv": kv, "kernels": ["_backward_kv"]})
        for kv in ((16, 64, 8, 2), (16, 128, 8, 2), (16, 64, 4, 2))
        for masked in (False, True)
    ],
    *[(m, True, {"dtype": t}) for m in METHODS for t in (torch.float16, torch.float32)],
    *[(m, masked, {"queries": 1}) for m in METHODS for masked in (True, False)],
]


def variant_rows(n: int, methods) -> list[dict]:
    rows = []
    for method, masked, variant in VARIANTS:
        if method in methods:
            rows += static_rows(method, n, masked, **variant)
            print(json.dumps(rows[-1]), flush=True)
    return rows


KERNEL_OF_TILE = {"forward": "_forward", "kv": "_backward_kv", "q": "_backward_q"}


def sweep_rows(method: str, n: int, masked: bool) -> list[dict]:
    """The candidates of rectification's GPU sweep (``tile_sweep.SWEEP``; dK/dV's from
    ``SWEEP_KEYS_AS_ROWS`` with rectification's ``KV_KEYS_AS_ROWS``, as
    ``rectified_triton.py --sweep`` takes them), each kernel's own tile varied with the others at
    ``method``'s table: the row of the kernel whose tile varies."""
    from tile_sweep import sweep_candidates

    from zoomattn.methods.rectify import triton_kernel

    sweep = sweep_candidates(method == "rectify" and triton_kernel.KV_KEYS_AS_ROWS)
    table, rows = TABLES[method](), []
    for name, candidates in sweep.items():
        for tile in candidates:
            tiles = {**table, name: tile}
            rows += static_rows(method, n, masked, tiles, [KERNEL_OF_TILE[name]])
            print(json.dumps(rows[-1]), flush=True)
    return rows


COLUMNS = ("method", "kernel", "tile", "mask", "registers", "spill_stack_bytes", "local_stores",
           "shared_bytes", "fits", "wgmma", "mma_sync", "mufu", "subnormal_checks",
           "instructions", "loop_instructions", "loop_mufu", "loop_per_score", "mufu_per_score",
           "load_bytes_per_score", "pipelined")  # fmt: skip


def markdown(rows: list[dict], header: str, columns=COLUMNS) -> str:
    lines = [header, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    labels = columns.index("registers")
    for r in rows:
        cells = [str(r[c]) for c in columns[:labels]]
        cells += (
            [str(r[c]) for c in columns[labels:]] if "error" not in r else [f"**{r['error']}**"]
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--methods", nargs="+", default=sorted(METHODS), choices=sorted(METHODS))
    p.add_argument("--sweep", action="store_true", help="also the sweep's candidate tiles")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/triton_static"))
    args = p.parse_args()
    rows = []
    for masked in (False, True):
        for method in args.methods:
            rows += static_rows(method, args.tokens, masked)
    variants = variant_rows(args.tokens, args.methods)
    swept = []
    for masked in (False, True) if args.sweep else ():
        for method in args.methods:
            swept += sweep_rows(method, args.tokens, masked)
    from gpu_paper import git_commit

    about = (
        f"commit {git_commit()}, Triton {triton.__version__}, ptxas for sm_90 (H100/H200), "
        f"{args.tokens} tokens, bf16, 32 query heads over 8 KV heads, head dim 128; compiled on "
        "a CPU, no GPU"
    )
    result = {"about": about, "tables": rows, "variants": variants, "sweep": swept}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(rows, f"# The fused kernels' tile tables for sm_90\n\n{about}.")
    title = "## Every other launch the kernels can be given, at the tables (``VARIANTS``)"
    text += "\n" + markdown(variants, title, (*COLUMNS[:4], "variant", *COLUMNS[4:]))
    if args.sweep:
        title = "## The GPU sweep's candidate tiles (benchmarks/rectified_triton.py)"
        text += "\n" + markdown(swept, title)
    args.out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
