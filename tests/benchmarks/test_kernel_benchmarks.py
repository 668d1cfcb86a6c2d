"""The fused kernels' GPU benchmarks (benchmarks/rectified_triton.py, opamp_triton.py,
opamp_stacked.py, plain_padding.py and the tile_sweep.py they share) run end to end in their
``--smoke`` mode: on a tiny shape on the CPU (the Triton kernels in Triton's interpreter), a check
of the scripts a GPU session runs, not a measurement."""

import importlib
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from tests import bare_image
from zoomattn.config import ROOT

OPAMP_MODES = [
    [],
    ["--padding-spans", "--kv-keys-as-rows", "--padding-side", "right", "--tritons-special"],
]
# each switch both ways and each flag once, in seven runs of ~3 s
RECTIFICATION_MODES = [
    ([], "fused_time_vs_sdpa"), (["--decode", "2"], "fused_decode_vs_blockwise"),
    (["--profile"], "forward_fused_vs_sdpa"),
    (["--libdevice-log", "--no-padding-spans", "--no-kv-keys-as-rows"], "fused_time_vs_sdpa"),
    (["--no-padding-spans", "--padding-side", "right"], "fused_time_vs_sdpa"),
    (["--padding-spans", "--padding-side", "right", "--tritons-special"], "fused_time_vs_sdpa"),
    (["--padding-side", "right", "--kv-keys-as-rows", "--skip-padded-rows",
      "--tiles", '{"kv": [16, 32, 1, 1]}'], "fused_time_vs_sdpa"),
]  # fmt: skip
SWEEP_LAYOUTS = {True: "--kv-keys-as-rows", False: "--no-kv-keys-as-rows"}


def _smoke_runs(sweeps: Path) -> list[tuple[str, ...]]:
    """Every run of a benchmark's --smoke mode that the tests below read (the sweeps write their
    results under ``sweeps``)."""
    return [
        *[("rectified_triton.py", "--padded", "0.25", *mode) for mode, _ in RECTIFICATION_MODES],
        *[("rectified_triton.py", "--sweep", flag, "--budget-s", "0",
           "--out", str(sweeps / f"{flag}.json")) for flag in SWEEP_LAYOUTS.values()],
        *[("opamp_triton.py", "--padded", "0.25", *mode) for mode in OPAMP_MODES],
        ("opamp_stacked.py", "--padded", "0.25"),
        ("opamp_stacked.py", "--profile", "--padded", "0.25"),
        ("plain_padding.py",),
    ]  # fmt: skip


def _run(command: tuple[str, ...]) -> subprocess.CompletedProcess:
    """A benchmark's --smoke run as on the GPU machine's bare image (tests/bare_image.py: a new
    import of a package only the project installs fails here, as it would fail there)."""
    script, *args = command
    cmd = [*bare_image.RUN, f"benchmarks/{script}", "--smoke", *args]
    # this checkout's zoomattn, before what the caller put first (bin/test-triton-version: a Triton)
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """``smoke(script, *args)``: that run's JSON lines; ``smoke.sweeps``: where the sweeps wrote.
    Every run of ``_smoke_runs`` starts with the module's first test that asks, two at a time
    (each takes about one core: Triton's interpreter is Python; 70 s in series), so a test waits
    for its own; one test picked with -k still starts them all."""
    sweeps = tmp_path_factory.mktemp("sweeps")
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = {command: pool.submit(_run, command) for command in _smoke_runs(sweeps)}

        def lines(script: str, *args: str) -> list[dict]:
            done = runs[(script, *args)].result()
            assert done.returncode == 0, done.stderr[-4000:]
            return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

        lines.sweeps = sweeps
        yield lines


@pytest.mark.parametrize("mode", OPAMP_MODES)
def test_opamp_benchmark_times_the_kernel_beside_the_stacked_call_and_agrees_with_it(smoke, mode):
    """In each mode, the summary naming the switches as they ran (both off unless the flags set
    them: the kernel module's defaults)."""
    row, summary = smoke("opamp_triton.py", "--padded", "0.25", *mode)
    assert row["n"] == 40 and row["triton_vs_stacked_rel_error"] < 2e-2  # bf16 outputs
    assert {"sdpa_ms", "stacked_ms", "triton_ms", "triton_time_vs_sdpa"} <= set(row)
    assert "padded=0.25" in summary["shape"] and summary["40"]["triton_time_vs_sdpa"] > 0
    assert summary["shape"].endswith("special functions interpreter's")  # OpAmp has no g
    on = "--padding-spans" in mode
    switches = "padding spans, dK/dV keys as rows" if on else "mask bytes, dK/dV queries as rows"
    assert f"({'right' if on else 'left'}), {switches}" in summary["shape"]


def test_opamp_stacked_benchmark_times_both_ways_and_counts_less_kept_with_adapters_replayed(smoke):
    row, summary = smoke("opamp_stacked.py", "--padded", "0.25")
    assert row["n"] == 40 and summary["device"].startswith("cpu")
    assert "padded=0.25" in summary["shape"]
    assert {"sdpa_ms", "stacked_ms", "stacked_replayed_ms", "stacked_time_vs_sdpa"} <= set(row)
    assert row["stacked_replayed_kept_mib"] < 0.6 * row["stacked_kept_mib"]
    assert summary["40"]["stacked_replayed_kept_vs_sdpa"] > 1


def test_opamp_stacked_profile_splits_each_steps_kernel_time_by_kind(smoke):
    """Each step's kernel time is the sum of its kinds; plain SDPA runs no matrix product, the
    stacked path its adapters' (the CPU's ops: the mechanics, not a measurement)."""
    row, summary = smoke("opamp_stacked.py", "--profile", "--padded", "0.25")
    for variant in ("sdpa", "stacked"):
        kinds = row[f"{variant}_by_kind_ms"]
        assert set(kinds) == {"attention", "matmul", "other"} and kinds["attention"] > 0
        assert sum(kinds.values()) == pytest.approx(row[f"{variant}_kernels_total_ms"], abs=5e-3)
        assert 0 < len(row[f"{variant}_kernels_ms"]) <= 15
    assert row["sdpa_by_kind_ms"]["matmul"] == 0 < row["stacked_by_kind_ms"]["matmul"]
    assert summary["40"]["stacked_total_vs_sdpa"] > 0


@pytest.mark.parametrize(
    ("name", "kind"),
    [("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128", "attention"),
     ("void cudnn::fusion::compute_dot_do_o_specialized<true, 128>(void const*", "attention"),
     ("void pytorch_flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits", "attention"),
     ("fmha_cutlassB_bf16_aligned_64x64_k128_sm80(PyTorchMemEffAttention::AttentionBackwardKernel",
      "attention"),
     ("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", "matmul"),
     ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "matmul"),
     ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl", "other"),
     ("aten::bmm", "matmul"), ("aten::copy_", "other")],
)  # fmt: skip
def test_a_kernel_is_of_the_kind_its_name_says(name, kind, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    assert importlib.import_module("opamp_stacked").kind(name) == kind


def test_plain_padding_benchmark_times_each_variant_and_records_the_paths_that_ran(smoke):
    row, summary = smoke("plain_padding.py")
    assert row["n"] == 48 and "right padding 0.25" in summary["shape"]
    variants = ("masked", "as_causal", "opamp_masked", "opamp_as_causal", "lkg_as_causal")
    assert all(row[f"{v}_time_vs_causal"] > 0 for v in variants) and row["detect_ms"] > 0
    # the CPU takes no fused path: plain SDPA's choice is recorded as the reference
    assert row["paths"]["as_causal"] == {"plain": "reference"} and row["paths"]["masked"] == {}


@pytest.mark.parametrize(("mode", "key"), RECTIFICATION_MODES)
def test_rectification_benchmark_runs_each_mode_and_summarises_its_ratios(smoke, mode, key):
    """Each mode runs, and the summary names the switches as they ran: as the flags set them,
    else as the kernel module has them."""
    from zoomattn.methods.rectify import triton_kernel

    *rows, summary = smoke("rectified_triton.py", "--padded", "0.25", *mode)
    assert [r["n"] for r in rows] == [40] and summary["40"][key] > 0
    if "--profile" not in mode:  # bf16, on the rows the kernel computes
        assert rows[0]["fused_vs_blockwise_rel_error"] < 2e-2
    assert "g=max" in summary["shape"] and "special functions interpreter's" in summary["shape"]
    side = "right" if "right" in mode else "left"
    assert f"{side} padding 0.25" in summary["shape"]

    def on(flag, default):
        return flag in mode or (default and f"--no-{flag[2:]}" not in mode)

    spans = on("--padding-spans", triton_kernel.PADDING_SPANS)
    assert ("padding spans" in summary["shape"]) == spans
    keys_as_rows = on("--kv-keys-as-rows", triton_kernel.KV_KEYS_AS_ROWS)
    assert ("dK/dV keys as rows" in summary["shape"]) == keys_as_rows
    skip = spans and on("--skip-padded-rows", triton_kernel.SKIP_PADDED_ROWS)
    assert ("padded rows skipped" in summary["shape"]) == skip


@pytest.mark.parametrize("keys_as_rows", [True, False])
def test_a_sweep_out_of_time_keeps_the_table_and_lists_every_candidate_of_its_layout_untried(
    smoke, keys_as_rows
):
    """dK/dV's candidates are the 64- and 128-key tiles of its keys-first layout with
    KV_KEYS_AS_ROWS, the [queries, keys] ones without; the forward's and dQ/dU's are swept too.
    With no time left (a budget of 0 s) none is tried and the table stays the best."""
    flag = SWEEP_LAYOUTS[keys_as_rows]
    out = smoke.sweeps / f"{flag}.json"
    smoke("rectified_triton.py", "--sweep", flag, "--budget-s", "0", "--out", str(out))
    result = json.loads(out.read_text())
    assert result["best"] == result["table"] and result["best_vs_table_rel_error"] == 0.0
    assert {r["status"] for r in result["tried"]} == {"not tried: out of time"}
    kv = [[16, 64, 4, 1], [16, 64, 4, 2]] if keys_as_rows else [[16, 32, 4, 1], [16, 32, 4, 2]]
    assert [(r["kernel"], r["tile"]) for r in result["tried"]] == [
        ("forward", [64, 32, 4, 2]), ("forward", [64, 32, 4, 3]),
        *[("kv", tile) for tile in kv],
        ("q", [32, 16, 4, 1]), ("q", [32, 16, 4, 2]),
    ]  # fmt: skip
    assert ("kv_queries_as_rows_ms" in result) == keys_as_rows


@pytest.fixture
def tile_sweep(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module("tile_sweep")


def test_the_memory_trace_names_the_blocks_live_at_the_allocators_peak(tile_sweep):
    allocator_trace = importlib.import_module("allocator_trace")  # tile_sweep's, on its path

    def event(action, addr, mib=0, where="x.py"):
        ours = str(ROOT / "zoomattn" / where)
        frames = [{"filename": "/site/torch/nn/f.py", "line": 1, "name": "inner"},
                  {"filename": ours, "line": 7, "name": "ours"}]  # fmt: skip
        return {"action": action, "addr": addr, "size": mib * 2**20, "frames": frames}

    trace = [
        event("free_requested", 99),  # allocated before the trace: not ours to count
        event("alloc", 1, 64, "a.py"),
        event("alloc", 2, 16, "b.py"),
        event("free_requested", 1),
        event("free_completed", 1),
        event("alloc", 3, 32, "c.py"),
        event("alloc", 4, 40, "d.py"),  # the peak: 2, 3 and 4 live (88 MiB)
        event("free_requested", 4),
        event("alloc", 5, 8, "e.py"),
    ]
    peak, blocks = allocator_trace.live_at_peak(trace, top=2)
    assert peak == 88
    assert [b["mib"] for b in blocks] == [40, 32]
    assert blocks[0]["where"] == "d.py:7 ours"
    engine = [{**event("alloc", 6, 100), "frames": []}]  # allocated by autograd's C++ engine
    assert allocator_trace.live_at_peak(engine)[1][0]["where"].startswith("no Python frame")


def test_a_switch_set_for_one_call_is_put_back_as_it_was_even_after_an_error(tile_sweep):
    from zoomattn.methods.rectify import triton_kernel

    before = triton_kernel.KV_KEYS_AS_ROWS
    seen = tile_sweep.with_switch(
        triton_kernel, "KV_KEYS_AS_ROWS", not before, lambda: triton_kernel.KV_KEYS_AS_ROWS
    )
    assert seen is (not before) and triton_kernel.KV_KEYS_AS_ROWS is before

    def fails():
        raise KeyError("inside")

    with pytest.raises(KeyError):
        tile_sweep.with_switch(triton_kernel, "KV_KEYS_AS_ROWS", not before, fails)
    assert triton_kernel.KV_KEYS_AS_ROWS is before


def test_a_sweep_that_loses_the_device_records_every_row_and_the_error(tile_sweep, monkeypatch):
    """A candidate that breaks the device (on CUDA an illegal address breaks the context for the
    rest of the process) ends the sweep: the rows before it are kept, the rest are marked not
    tried, and the record keeps them with the error instead of crashing on the baselines."""
    table = {"forward": (64, 32, 4, 2), "kv": (16, 64, 8, 2)}
    candidates = {"forward": [(64, 32, 4, 2), (128, 64, 8, 2), (128, 32, 8, 2)],
                  "kv": [(16, 128, 8, 2)]}  # fmt: skip
    broken = []

    def run(tiles, backward):
        if broken:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if tiles["forward"] == (128, 64, 8, 2):
            broken.append(tiles)
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return torch.zeros(2)

    monkeypatch.setattr(tile_sweep, "device_lost", lambda device: bool(broken))
    tried, best = tile_sweep.try_tiles(table, run, 60, "cpu", candidates=candidates)
    assert [row["status"][:14] for row in tried] == [
        "ok", "RuntimeError: ", "not tried: the", "not tried: the"
    ]  # fmt: skip
    assert "after forward [128, 64, 8, 2]" in tried[2]["status"]
    assert best == table  # the one timed candidate is the table's own tile
    record = tile_sweep.sweep_result(table, best, tried, run, {"sdpa": lambda: run(table, True)},
                                     1, "cpu", "B=1")  # fmt: skip
    assert record["tried"] == tried and "illegal memory access" in record["error"]
    assert "sdpa_ms" not in record and record["best"] == {k: list(t) for k, t in table.items()}


def test_a_device_that_runs_work_is_not_lost_and_one_that_cannot_is(tile_sweep):
    assert tile_sweep.device_lost("cpu") is False
    assert tile_sweep.device_lost("meta") is True  # no values to read back, as a broken context


def test_a_variant_whose_warm_up_fails_is_left_out_with_its_error_and_the_others_timed(
    tile_sweep, monkeypatch
):
    """One process times SDPA and several variants: a variant the card refuses costs only its own
    row; the baseline's failure, or one that leaves the device unusable, is raised."""
    ran = []

    def step(variant):
        ran.append(variant)
        if variant.startswith("broken"):
            raise RuntimeError(f"{variant}: out of resources")

    row = tile_sweep.timed_variants(step, ["sdpa", "broken", "fused"], 2, "cpu")
    assert row["broken_error"] == "RuntimeError: broken: out of resources"
    assert {"sdpa_ms", "fused_ms", "fused_time_vs_sdpa"} <= set(row)
    assert not {"broken_ms", "broken_time_vs_sdpa"} & set(row)
    assert ran.count("broken") == 1 and ran.count("fused") == 3  # warm-up, then 2 rounds
    with pytest.raises(RuntimeError, match="broken_sdpa"):
        tile_sweep.timed_variants(step, ["broken_sdpa", "fused"], 2, "cpu")
    monkeypatch.setattr(tile_sweep, "device_lost", lambda device: True)
    with pytest.raises(RuntimeError, match="broken: out of resources"):
        tile_sweep.timed_variants(step, ["sdpa", "broken", "fused"], 2, "cpu")
