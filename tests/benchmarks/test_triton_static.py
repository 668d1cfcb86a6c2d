"""benchmarks/triton_static.py compiles the launches our host code makes, as the JIT would on an
sm_90 card: the recorder sees every kernel and leaves the module as it was, and a launch's unit
strides and aligned sizes reach the compiler (without them the loads are not pipelined)."""

import importlib
import json
import os
import subprocess
import sys

import pytest

from zoomattn.config import ROOT
from zoomattn.methods.rectify import triton_kernel


@pytest.fixture
def triton_static(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module("triton_static")


@pytest.mark.parametrize("method", ["rectify", "opamp"])
@pytest.mark.parametrize("masked", [False, True])
def test_the_recorder_sees_the_three_launches_of_a_forward_and_backward(
    triton_static, method, masked
):
    launches = triton_static.METHODS[method](64, masked)
    assert [launch.kernel.fn.__name__ for launch in launches] == list(triton_static.KERNELS)
    assert all(bool(launch.kwargs["HAS_MASK"]) is masked for launch in launches)
    tiles = triton_static.TABLES[method]()
    prefill = [tiles[name][0] for name in ("forward", "kv", "q")]
    assert [launch.kwargs["BLOCK_M"] for launch in launches] == prefill


def test_the_recorder_puts_the_kernels_and_the_input_check_back_even_after_an_error(
    triton_static,
):
    before = {n: getattr(triton_kernel, n) for n in (*triton_static.KERNELS, "_check_inputs")}
    with pytest.raises(RuntimeError), triton_static.recorded(triton_kernel):
        raise RuntimeError
    assert {n: getattr(triton_kernel, n) for n in before} == before


# the kernels the suite compiles for sm_90, in processes that run at once (with TRITONS_SPECIAL:
# ~35 compiles, ~30 s in one process on 2 cores)
_TILES = """
import json, triton_static
tiles = {"forward": (64, 32, 4, 2), "kv": (16, 32, 4, 2), "q": (32, 16, 4, 2),
         "decode": (16, 64, 4, 2)}
"""
COMPILE_TABLES = (
    _TILES
    + """
rows = [r for m in ("rectify", "opamp") for r in triton_static.static_rows(m, 256, True, tiles)]
forward = triton_static.rectify_launches(256, False, tiles)[0]
compiled = triton_static.compile_for_sm90(forward)
variants = [r for g in ("tanh", "tanh_plus_x", "sigmoid")
            for r in triton_static.static_rows("rectify", 256, True, tiles, ["_backward_q"], g=g)]
variants += [r for m in ("rectify", "opamp")
             for r in triton_static.static_rows(m, 256, True, tiles, ["_forward"], queries=1)]
step = triton_static.rectify_launches(256, True, tiles, queries=1)[0]
opamp_switches = triton_static.static_rows("opamp", 256, True, tiles, spans=True)
opamp_switches += triton_static.static_rows("opamp", 256, True, None, ["_backward_kv"],
                                            keys_as_rows=True)
opamp_switches += triton_static.static_rows("opamp", 256, True, None, ["_backward_kv"],
                                            keys_as_rows=False)
print(json.dumps({"rows": rows, "arch": compiled.metadata.target.arch,
                  "opamp_switches": opamp_switches,
                  "upcast": forward.kwargs["UPCAST"], "signature": compiled.src.signature,
                  "variants": variants,
                  "step": triton_static.specialised(step)[0].signature}))
"""
)
COMPILE_SWITCHES = (
    _TILES
    + """
keys_as_rows = triton_static.static_rows("rectify", 256, True, tiles, ["_backward_kv"],
                                         keys_as_rows=True, kv=(16, 64, 4, 2))
queries_first = triton_static.static_rows("rectify", 256, True, tiles, ["_backward_kv"],
                                          keys_as_rows=False)
default_kv = triton_static.static_rows("rectify", 256, True, None, ["_backward_kv"])
switches = [r for switch in ({"spans": True}, {"rounded_once": True},
                             {"spans": True, "skip_padded_rows": True})
            for r in triton_static.static_rows("rectify", 256, True, tiles, **switch)]
spans_modes = [launch.kwargs["HAS_MASK"]
               for skip in (False, True)
               for launch in triton_static.rectify_launches(256, True, tiles, spans=True,
                                                            skip_padded_rows=skip)]
spans_modes += [launch.kwargs["HAS_MASK"]
                for launch in triton_static.opamp_launches(256, True, tiles, spans=True)]
print(json.dumps({"keys_as_rows": keys_as_rows, "queries_first": queries_first,
                  "default_kv": default_kv, "switches": switches, "spans_modes": spans_modes}))
"""
)


def _in_own_processes(scripts: list[str], tmp_path_factory) -> list[dict]:
    """The last line of each script's output (a JSON object), each script run in a process of
    its own, all at once: the suite runs Triton's interpreter, whose kernels do not
    compile (and which ran OpAmp's backward kernels that failed to compile for any GPU unless
    BLOCK_M = BLOCK_N)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    # the benchmarks and this checkout first, then the caller's (bin/test-triton-version: a Triton)
    paths = [str(ROOT / "benchmarks"), str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    running = []
    for script in scripts:  # each with its own empty cache: no earlier run's kernels
        env["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton"))
        running.append(subprocess.Popen([sys.executable, "-c", script], env=dict(env),
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True))  # fmt: skip
    results = []
    for process in running:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Every row the module's tests read; ``special_rows``: the table's kernels compiled with
    ``--tritons-special`` (TRITONS_SPECIAL, below)."""
    tables, switches, special = _in_own_processes(
        [COMPILE_TABLES, COMPILE_SWITCHES, TRITONS_SPECIAL], tmp_path_factory
    )
    return {**tables, **switches, "special_rows": special["rows"]}


def _assert_compiled(row):
    assert row.get("error") is None, row
    assert 0 < row["registers"] <= 255 and row["fits"] and row["pipelined"], row
    assert row["wgmma"] + row["mma_sync"] > 0 and row["mufu"] > 0, row


def test_every_kernel_compiles_for_sm90_at_unequal_tiles_as_the_jit_specialises_it(compiled):
    rows = compiled["rows"]
    assert [(r["method"], r["kernel"]) for r in rows] == [
        (m, k) for m in ("rectify", "opamp") for k in ("_forward", "_backward_kv", "_backward_q")
    ]
    for row in rows:
        _assert_compiled(row)
    assert compiled["arch"] == 90 and compiled["upcast"] is False  # no interpreter rounding
    signature = compiled["signature"]
    assert signature["sq_d"] == signature["sk_d"] == "constexpr"  # the unit stride, as the JIT
    assert signature["sq_l"] == "i32"


def test_every_g_and_a_decoding_step_compile_for_sm90_each_a_kernel_of_its_own(compiled):
    """Beyond the tables' g: each other g's dQ/dU kernel (g and g′; ξ = 0 runs SDPA on q + u,
    never the kernel), and the forward of one query over a padded cache, which the JIT compiles
    anew (n_q = 1 becomes a constant), as generation would launch it with rectification's
    FUSED_DECODING or OpAmp's opt-in triton path."""
    variants = compiled["variants"]
    assert [(r["method"], r["kernel"], r["variant"]) for r in variants] == [
        *[("rectify", "_backward_q", f"g={g}") for g in ("tanh", "tanh_plus_x", "sigmoid")],
        ("rectify", "_forward", "queries=1"),
        ("opamp", "_forward", "queries=1"),
    ]
    for row in variants:
        _assert_compiled(row)
    assert compiled["step"]["n_q"] == "constexpr"
    # both methods' decoding forward on the table's decode tile, not its 64-row forward tile
    assert [r["tile"] for r in variants[-2:]] == [[16, 64, 4, 2], [16, 64, 4, 2]]


def test_every_kernel_compiles_for_sm90_with_each_switch_that_changes_its_code(compiled):
    """PADDING_SPANS (the mask as key spans: HAS_MASK 2; with SKIP_PADDED_ROWS, 3) and
    SPLIT_SCORE_GRADIENTS off: Triton's
    interpreter runs code its compiler refuses (a return inside a constexpr branch ran there),
    so the suite's interpreter tests alone do not show that a switch's kernels compile."""
    rows = compiled["switches"]
    assert [(r["kernel"], r["variant"]) for r in rows] == [
        (k, v)
        for v in ("spans=True", "rounded_once=True", "spans=True, skip_padded_rows=True")
        for k in ("_forward", "_backward_kv", "_backward_q")
    ]
    for row in rows:
        _assert_compiled(row)
    # the spans' code, not the mask bytes': rectification's, then OpAmp's (no SKIP_PADDED_ROWS)
    assert compiled["spans_modes"] == [2, 2, 2, 3, 3, 3, 2, 2, 2]
    opamp = compiled["opamp_switches"][:3]
    assert [(r["kernel"], r["variant"]) for r in opamp] == [
        (k, "spans=True") for k in ("_forward", "_backward_kv", "_backward_q")
    ]
    for row in opamp:
        _assert_compiled(row)


def test_dk_dv_as_key_rows_compiles_to_hoppers_warpgroup_mmas_only(compiled):
    """KV_KEYS_AS_ROWS at 64 keys per tile, and the default since 2026-11-27 (128 keys, the
    padding as key spans): every product of the dK/dV kernel a warpgroup MMA (its tiles have the
    64 rows wgmma needs), none of Ampere's mma.sync the [queries, keys] tiles of 16 or 32 rows
    compile to (the switch off)."""
    (row,) = compiled["keys_as_rows"]
    (default,) = compiled["default_kv"]
    (queries_first,) = compiled["queries_first"]
    for r in (row, default, queries_first):
        _assert_compiled(r)
    assert (
        row["tile"] == [16, 64, 4, 2] and row["variant"] == "keys_as_rows=True, kv=(16, 64, 4, 2)"
    )
    assert default["tile"] == [16, 128, 8, 2] and "variant" not in default
    for r in (row, default):
        assert r["wgmma"] > 0 and r["mma_sync"] == 0, r
    assert queries_first["mma_sync"] > 0 and queries_first["wgmma"] == 0, queries_first


def test_opamps_dk_dv_as_key_rows_compiles_to_warpgroup_mmas_only_at_its_table_tile(compiled):
    """OpAmp's KV_KEYS_AS_ROWS (off until a card times it) at the table's dK/dV tile, 16 queries
    by 64 keys at 8 warps: every product a warpgroup MMA, spill-free; the [queries, keys] tiles
    (the switch off) compile mostly to Ampere's mma.sync."""
    keys_first, queries_first = compiled["opamp_switches"][3:]
    for r in (keys_first, queries_first):
        _assert_compiled(r)
        assert r["tile"] == [16, 64, 8, 2], r
    assert keys_first["variant"] == "keys_as_rows=True"
    assert keys_first["wgmma"] > 0 and keys_first["mma_sync"] == 0, keys_first
    assert keys_first["spill_stack_bytes"] == 0, keys_first
    assert queries_first["mma_sync"] > queries_first["wgmma"], queries_first


def test_per_score_counts_what_all_the_tiles_threads_issue_and_load_for_each_of_its_scores(
    triton_static,
):
    # 4 warps (128 threads) on a 64×32 tile: 16 scores per thread; each thread's 8 loads of 16
    # bytes are a 32-key tile of K and V at head dim 128 (16 KiB), 8 bytes per score
    row = {"tile": [64, 32, 4, 2], "loop_instructions": 768, "loop_mufu": 96,
           "loop_load_bytes": 128}  # fmt: skip
    assert triton_static.per_score(row) == {
        "loop_per_score": 48.0, "mufu_per_score": 6.0, "load_bytes_per_score": 8.0
    }  # fmt: skip
    # the same loop at 8 warps holds 8 scores per thread: each score's work done twice over
    row["tile"] = [64, 32, 8, 2]
    assert triton_static.per_score(row) == {
        "loop_per_score": 96.0, "mufu_per_score": 12.0, "load_bytes_per_score": 16.0
    }  # fmt: skip
    row["loop_load_bytes"] = None  # a loop whose loads no opcode sizes
    assert triton_static.per_score(row)["load_bytes_per_score"] is None


def test_every_special_function_compiles_to_its_instruction_with_no_subnormal_check(compiled):
    """Every exponential, reciprocal and logarithm of every kernel is one .ftz special-function
    instruction (attention/triton_tiles.exp): no compare against the subnormal range, which
    without .ftz ptxas puts around each, with two more instructions."""
    for row in compiled["rows"] + compiled["variants"] + compiled["keys_as_rows"]:
        assert row["mufu"] > 0 and row["subnormal_checks"] == 0, row
        assert 0 < row["loop_mufu"] <= row["mufu"] and row["loop_instructions"] > 0, row


TRITONS_SPECIAL = """
import argparse, json, triton_special, triton_static
triton_special.use(argparse.Namespace(smoke=False, tritons_special=True, libdevice_log=False))
tiles = {"forward": (64, 32, 4, 2), "kv": (16, 32, 4, 2), "q": (32, 16, 4, 2),
         "decode": (16, 64, 4, 2)}
rows = [r for m in ("rectify", "opamp") for r in triton_static.static_rows(m, 256, True, tiles)]
print(json.dumps({"rows": rows}))
"""


def test_the_benchmarks_tritons_special_puts_the_old_functions_back_in_every_kernel(compiled):
    """``--tritons-special`` (benchmarks/triton_special.py), the A/B a GPU session times: compiled
    with it, every kernel has the subnormal checks of Triton's own tl.exp and division again, and
    more instructions than with the .ftz functions."""
    before = compiled["special_rows"]
    assert [(r["method"], r["kernel"]) for r in before] == [
        (r["method"], r["kernel"]) for r in compiled["rows"]
    ]
    for old, new in zip(before, compiled["rows"], strict=True):
        _assert_compiled(old)
        assert old["subnormal_checks"] > 0 and old["instructions"] > new["instructions"], old
