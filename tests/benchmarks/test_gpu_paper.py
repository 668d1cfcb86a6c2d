"""benchmarks/gpu_paper.py end to end in its smoke mode (CPU, tiny shapes: a check of the script,
not a measurement), run as a user runs it: a subprocess from the repository root."""

import importlib
import json
import subprocess
import sys
from importlib import metadata

import pytest
import torch
import yaml

from zoomattn.config import ROOT, load_config
from zoomattn.grid import Grid
from zoomattn.methods import cells

SCRIPT = ROOT / "benchmarks" / "gpu_paper.py"
SMOKE_LENGTHS = [64, 128, 256]
FUNCTIONS = ("opamp", "rectified", "lkg_fusion")
VARIANTS = {"sdpa", "opamp_triton", *FUNCTIONS, *(f"{f}_fused" for f in FUNCTIONS)}


def paper_methods() -> set[tuple[str, str]]:
    """(study, method) of every cell of the paper preset, and QLoRA in every study."""
    cfg = load_config({**yaml.safe_load((ROOT / "config.yaml").read_text()), "preset": "paper"})
    out = set()
    for study in Grid(cfg):
        if not study.kind.cross:
            entries = {e: entry.values for e, entry in study.entries.items()}
            out |= {(study.name, m) for m, _ in cells(entries).values()} | {(study.name, "qlora")}
    return out


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_paper")
    cmd = [sys.executable, str(SCRIPT), "--smoke", "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((out / "gpu_paper.json").read_text()), (out / "gpu_paper.md").read_text()


def test_smoke_measures_every_method_of_the_paper_preset_against_qlora(smoke):
    data, md = smoke
    rows = {(r["study"], r["method"]): r for r in data["steps"]}
    assert set(rows) == paper_methods()
    assert {m for _, m in rows} == {"qlora", "opamp", "rectify", "mudaf", "lkg"}
    for (study, method), r in rows.items():
        assert r["status"] == "ok", (study, method)
        base = rows[(study, "qlora")]
        assert r["step_vs_qlora"] == pytest.approx(r["step_s"] / base["step_s"])
        assert r["peak_vs_qlora"] == pytest.approx(r["peak_gib"] / base["peak_gib"])
        assert r["eval_vs_qlora"] == pytest.approx(
            r["eval_tokens_per_s"] / base["eval_tokens_per_s"]
        )
        assert r["tokens_per_step"] == r["micro_batch_size"] * 128  # --smoke: 128 tokens
        assert r["cell"] in md
        if method == "qlora":
            assert r["step_vs_qlora"] == r["tokens_per_s_vs_qlora"] == r["peak_vs_qlora"] == 1.0
    assert rows[("opamp", "opamp")]["cell"] == "opamp-K10"
    assert rows[("mudaf", "mudaf")]["values"]["tuning"] == "lora"
    assert "tuning: lora" in md


def test_smoke_times_each_attention_against_sdpa_at_every_length(smoke):
    data, _ = smoke
    rows = {(r["tokens"], r["variant"]): r for r in data["attention"]}
    assert set(rows) == {(n, v) for n in SMOKE_LENGTHS for v in VARIANTS}
    for (n, variant), r in rows.items():
        if variant == "opamp_triton":  # CUDA only: not run, and not replaced by the reference
            assert r["status"].startswith("skipped") and "seconds" not in r
            continue
        assert r["status"] == "ok" and r["seconds"] > 0
        assert r["time_vs_sdpa"] == pytest.approx(r["seconds"] / rows[(n, "sdpa")]["seconds"])
        assert r["attention_kernels"] == ("fused" if variant.endswith("_fused") else "reference")


def test_smoke_labels_the_fused_setting_on_the_cpu_with_the_path_that_ran(smoke):
    """On the CPU ``fused`` runs the reference paths: the row says so (OpAmp dispatches through
    kernels.choose; a function without a dispatch point yet is labelled undispatched)."""
    data, md = smoke
    rows = {(r["tokens"], r["variant"]): r for r in data["attention"]}
    assert rows[(64, "opamp_fused")]["path"] == rows[(64, "opamp")]["path"] == "reference"
    assert all(
        r["path"].startswith("reference")
        for v, r in rows.items()
        if v[1] not in ("sdpa", "opamp_triton")
    )
    assert rows[(64, "opamp_triton")]["path"] == "triton (not run)"
    assert "| 64 | opamp |" in md and "opamp_fused" not in md


def test_smoke_names_the_device_versions_and_goals(smoke):
    data, md = smoke
    meta = data["meta"]
    assert meta["smoke"] and meta["device"].startswith("CPU") and meta["device"] in md
    assert meta["torch"] == torch.__version__ and meta["commit"] and meta["layers_used"] == [2]
    assert meta["triton"] == metadata.version("triton") and f"triton {meta['triton']}" in md
    assert [g["goal"].split()[0] for g in data["goals"]] == [
        "every",
        "OpAmp",
        "OpAmp",  # the opt-in Triton kernel
        "Rectified",
        "LKG-RALM",
    ]
    assert all(isinstance(g["met"], bool) for g in data["goals"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the check is for machines without CUDA")
def test_without_cuda_and_without_smoke_it_stops_with_a_message():
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1
    assert "no CUDA device visible" in done.stderr and "Traceback" not in done.stderr


def test_attention_only_measures_the_attention_functions_and_no_model(tmp_path, monkeypatch):
    """In this process, one length, one repeat, OpAmp alone (the smoke run above has them all)."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    gpu_paper = importlib.import_module("gpu_paper")
    monkeypatch.setattr(gpu_paper, "VARIANTS", ("sdpa", "opamp"))
    argv = ["gpu_paper.py", "--smoke", "--attention-only", "--lengths", "64", "--repeats", "1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(tmp_path)])
    gpu_paper.main()
    data = json.loads((tmp_path / "gpu_paper.json").read_text())
    assert data["steps"] == [] and data["meta"]["attention_only"]
    assert {r["variant"] for r in data["attention"]} == {"sdpa", "opamp", "opamp_fused"}
    goals = [g["goal"].split()[0] for g in data["goals"]]
    assert goals == ["OpAmp", "OpAmp", "Rectified", "LKG-RALM"]  # OpAmp's Triton kernel second
    assert data["goals"][1]["measured"] == data["goals"][2]["measured"] == "not measured"
    assert "--attention-only: no training step" in (tmp_path / "gpu_paper.md").read_text()


def test_each_attention_goal_is_checked_at_the_length_it_is_stated_at(monkeypatch):
    """LKG-RALM's goal is stated at 4096 tokens, the others at --goal-tokens (8192): a run that
    measured 4096 checks LKG-RALM there; one that did not checks it at --goal-tokens, saying so."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    report = importlib.import_module("gpu_paper_report")

    def row(tokens, variant, time):
        return {"tokens": tokens, "variant": variant, "time_vs_sdpa": time, "memory_vs_sdpa": 1.0}

    attention = [row(n, "lkg_fusion_fused", time) for n, time in ((4096, 1.2), (8192, 3.0))]
    attention += [row(n, "rectified_fused", 2.0) for n in (4096, 8192)]
    checked = {g["goal"].split()[0]: g for g in report.goals([], attention, 8192)}
    assert checked["LKG-RALM"]["goal"].endswith("at 4096 tokens") and checked["LKG-RALM"]["met"]
    assert checked["Rectified"]["goal"].endswith("at 8192 tokens")
    unstated = report.goals([], [r for r in attention if r["tokens"] == 8192], 8192)
    lkg = next(g for g in unstated if g["goal"].startswith("LKG-RALM"))
    assert lkg["goal"].endswith("at 8192 tokens") and not lkg["met"]
