"""The cross-method part of the smoke run: the leaderboard, its report, regeneration from the
metric files, ``snakemake --report``, the MLflow cell tags and one entry's rerun scope."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.workflow.scratch import (
    mlflow_runs,
    planned_jobs,
)

pytestmark = pytest.mark.slow


def test_leaderboard_trains_every_entry_per_seed_and_reports_tables_claims_and_diagnostics(workdir):
    out = workdir / "results/smoke"
    report = out / "report/leaderboard"
    for name in ("leaderboard", "fidelity", "claims", "diagnostics"):
        for ext in ("md", "csv", "html"):
            assert (report / f"{name}.{ext}").stat().st_size > 0, f"{name}.{ext}"
    for name in ("leaderboard", "diag_golden_share", "diag_answer_gap", "diag_head_patterns"):
        assert (report / f"{name}.png").stat().st_size > 0, name
    smoke = yaml.safe_load((workdir / "config.yaml").read_text())["presets"]["smoke"]
    cfg = smoke["studies"]["leaderboard"]
    long = {(r["entry"], r["column"]): r for r in _csv(report / "leaderboard_long.csv")}
    for entry in cfg["methods"]:
        for r in cfg["noise_ratios"]:
            assert long[(entry, f"single_noisy r={r:g}")]["seeds"] == "2"
            for seed in cfg["seeds"]:
                metrics = json.loads(
                    (out / f"eval/leaderboard/{entry}_s{seed}/single_noisy/r{r:g}.json").read_text()
                )
                assert metrics["noise_ratio"] == r and metrics["answer_gap_examples"] == 8
    data = [json.loads(x) for x in (out / "data/eval/single_noisy/r0.9/records.jsonl").open()]
    assert {len(d["documents"]) for d in data} == {10}  # 1 golden + round(1/0.1) - 1 distractors
    provenance = json.loads((report / "provenance.json").read_text())
    assert provenance["preset"] == "smoke" and provenance["seeds"] == [0, 1]
    sft = json.loads((out / "models/leaderboard/sft_s1/method.json").read_text())
    assert sft["config"]["heads"] == 0
    for model in ("base", "leaderboard/lkg_s1", "mudaf/mudaf-heads2_s0", "lkg/lkg_s0"):
        share = json.loads((out / f"attention/{model}.json").read_text())  # every model's
        assert share["n_documents"] == 10 and share["answer_gap_examples"] > 0, model
    assert (report / "diag_answer_gap_every_model.png").stat().st_size > 0


def _csv(path: Path) -> list[dict]:
    import csv

    return list(csv.DictReader(path.open()))


def test_tables_regenerate_from_the_metric_files_without_any_model(workdir, tmp_path):
    out = workdir / "results/smoke"
    models = out / "models"
    hidden = tmp_path / "models-away"
    override = tmp_path / "smoke.yaml"
    override.write_text("preset: smoke\n")
    models.rename(hidden)  # nothing may load a model or retrain
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "zoomattn",
                "regenerate",
                "--config",
                "config.yaml",
                str(override),
                "--out",
                str(tmp_path / "again"),
            ],
            cwd=workdir,
            env=_env(workdir),
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        hidden.rename(models)
    assert done.returncode == 0, done.stderr
    for name in (
        "leaderboard.csv",
        "leaderboard_long.csv",
        "fidelity.csv",
        "claims.csv",
        "diagnostics.csv",
    ):
        assert (tmp_path / "again" / name).read_text() == (
            out / "report/leaderboard" / name
        ).read_text(), name


def _env(workdir: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(workdir), "OMP_NUM_THREADS": "1"}


def test_snakemake_report_holds_every_reports_figures_and_tables_with_captions(
    workdir, report_html
):
    text = report_html.read_text()
    for name in (
        "leaderboard.png",
        "claims.html",
        "fidelity.html",
        "diag_head_patterns.png",
        "table3_cmrr.png",
        "table4_comparison.html",
        "table2_ablations.html",
    ):
        assert name in text, name
    commit = json.loads((workdir / "results/smoke/report/leaderboard/provenance.json").read_text())
    assert "preset <strong>smoke</strong>" in text and commit["commit"] in text
    assert "(the leaderboard" in text and "0, 1" in text


def test_mlflow_tags_filter_one_cell_over_its_seeds(workdir):
    runs, _ = mlflow_runs(workdir)
    cell = [r for r in runs if r.data.tags.get("zoomattn.cell") == "leaderboard/lkg"]
    stages = {(r.data.tags["zoomattn.stage"], r.data.tags["zoomattn.seed"]) for r in cell}
    assert {("finetune", "0"), ("finetune", "1"), ("evaluate", "0"), ("evaluate", "1")} <= stages
    assert all(
        r.data.tags["zoomattn.study"] == "leaderboard"
        for r in cell
        if r.data.tags["zoomattn.stage"] in ("finetune", "evaluate")
    )


def test_changing_one_leaderboard_entry_reruns_only_its_jobs_and_the_reports(workdir, tmp_path):
    override = tmp_path / "board.yaml"
    raw = yaml.safe_load((workdir / "config.yaml").read_text())
    raw["presets"]["smoke"]["studies"]["leaderboard"]["methods"]["rectify"]["xi"] = 5
    override.write_text(yaml.safe_dump(raw, sort_keys=False))  # the one change, in order
    jobs = planned_jobs(workdir, "--configfile", str(override))
    assert sorted({r for r, _ in jobs}) == sorted(
        [
            "all",
            "evaluate",
            "finetune",
            "attention",
            "head_patterns",
            "retrieval_heads",
            "report[lkg]",
            "report[mudaf]",
            "report[leaderboard]",
        ]
    )
    touched = {w.get("trained") or w.get("model") for r, w in jobs if w}
    assert touched == {"leaderboard/rectify_s0", "leaderboard/rectify_s1"}
