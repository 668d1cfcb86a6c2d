"""Real Snakemake runs of the smoke grid in a scratch copy of the workflow.

The copy carries its own ``zoomattn`` package (first on PYTHONPATH), so a test can edit a method's
source there and watch which jobs Snakemake schedules, without touching the checkout.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
import yaml

from tests.workflow.scratch import (
    ANALYSES,
    SMOKE,
    TORN_MODEL,
    mlflow_client,
    mlflow_runs,
    planned_jobs,
    snakemake,
)
from zoomattn.rate_limit import DROPPED

pytestmark = pytest.mark.slow


def test_smoke_grid_produces_every_table_figure_and_prediction(workdir):
    report = workdir / "results/smoke/report/opamp"
    for name in (
        "README.md",
        "table3_cmrr.md",
        "table3_cmrr.csv",
        "table3_cmrr.png",
        "table4_noise.md",
        "table5_faitheval.md",
        "fig5_attention.png",
        "fig6_attention_k.png",
        "scores.csv",
    ):
        assert (report / name).stat().st_size > 0, name
    cfg = yaml.safe_load((workdir / "config.yaml").read_text())["presets"]["smoke"]
    opamp = cfg["studies"]["opamp"]
    models = ["base", "qlora_s0"] + [f"opamp-K{k}_s0" for k in opamp["methods"]["opamp"]["K"]]
    for m in models:
        for b, spec in opamp["benchmarks"].items():
            for r in spec["noise_ratios"]:
                metrics = json.loads(
                    (workdir / f"results/smoke/eval/{m}/{b}/r{r:g}.json").read_text()
                )
                preds = workdir / f"results/smoke/eval/{m}/{b}/r{r:g}.predictions.jsonl"
                assert metrics["n"] == len(preds.read_text().splitlines()) == cfg["data"]["n_eval"]
                assert metrics["ci_low"] <= metrics["score"] <= metrics["ci_high"]
    assert not list((workdir / "results/smoke").rglob("*.partial"))


def test_every_job_is_one_finished_mlflow_child_run_of_the_invocation(workdir):
    runs, default = mlflow_runs(workdir)
    parents = [r for r in runs if r.data.tags.get("zoomattn.kind") == "invocation"]
    children = [r for r in runs if r.data.tags.get("zoomattn.kind") == "job"]
    first = min(parents, key=lambda r: r.info.start_time)
    mine = [r for r in children if r.data.tags.get("mlflow.parentRunId") == first.info.run_id]
    logs = (workdir / "results/smoke/logs").rglob("*.log")
    n_jobs = len([p for p in logs if p.name != "worker.log"])  # one log per job
    assert len(mine) == n_jobs
    assert {r.info.status for r in mine} == {"FINISHED"} and first.info.status == "FINISHED"
    assert default == []  # nothing misfiled into the Default experiment
    for r in mine:
        p = r.data.params
        assert p["preset"] == "smoke" and p["version.torch"].startswith("2.13.0")
        assert len(p["config_hash"]) == 16 and "git_commit" in p
    finetunes = [r for r in mine if r.data.tags["zoomattn.stage"] == "finetune"]
    assert all(r.data.metrics.get("train_loss") is not None for r in finetunes)


def test_a_noop_rerun_schedules_nothing(workdir):
    assert planned_jobs(workdir) == []


def test_changing_one_k_reruns_only_that_k_its_evaluations_and_the_report(workdir, tmp_path):
    override = tmp_path / "k.yaml"
    raw = yaml.safe_load((workdir / "config.yaml").read_text())
    raw["presets"]["smoke"]["studies"]["opamp"]["methods"]["opamp"]["K"] = [5, "inf"]
    override.write_text(yaml.safe_dump(raw, sort_keys=False))  # the one change, in order
    jobs = planned_jobs(workdir, "--configfile", str(override))
    rules = sorted({r for r, _ in jobs})
    assert rules == sorted([*ANALYSES, "attention", "report[opamp]", "retrieval_heads"])
    touched = {w.get("trained") or w.get("model") for r, w in jobs if w}
    assert touched == {"opamp-K5_s0"}


def test_editing_one_methods_source_reruns_only_that_methods_jobs(workdir):
    source = workdir / "zoomattn/methods/opamp/model.py"
    original = source.read_text()
    try:
        source.write_text(original + "\nEDITED = True\n")  # a comment would rerun nothing
        jobs = planned_jobs(workdir)
    finally:
        source.write_text(original)
    models = {w.get("model") or w["trained"] for r, w in jobs if w}
    assert models and all(m.startswith(("opamp-", "leaderboard/opamp_")) for m in models)
    assert {r for r, _ in jobs} == {*ANALYSES, "attention", "report[opamp]", "retrieval_heads"}


def test_changing_the_world_seed_reruns_everything(workdir):
    from zoomattn.config import load_config
    from zoomattn.grid import Grid

    grid = Grid(
        load_config({**yaml.safe_load((workdir / "config.yaml").read_text()), "preset": "smoke"})
    )
    jobs = planned_jobs(workdir, "world_seed=99")
    counts = {r: sum(1 for rr, _ in jobs if rr == r) for r, _ in jobs}
    board = 6 * 2  # the leaderboard: 6 entries x 2 seeds, evaluated at 2 noise ratios
    assert counts["world"] == 1 and counts["pretrain"] == 1
    assert counts["attention"] == 1 + len(grid.models)  # every model's golden share
    assert counts["finetune"] == len(grid.models) == 3 + 6 + 3 + 3 + board
    # the shared set and 5 of the studies; 3 shared eval sets, 2 + 1 + 4 of the studies and 2
    assert counts["train_data"] == 6 and counts["eval_data"] == 3 + 9
    # OpAmp 4 models x 3 splits; rectification 2 + 6; MuDAF 1 + 3; LKG 1 + 3 + 3 robustness sets
    assert (
        counts["evaluate"] == len(grid.evaluations) == 4 * 3 + 2 + 6 + 4 + 4 + 3 + 2 * (1 + board)
    )
    assert counts["score_margin"] == 1 and counts["report[rectification]"] == 1
    assert counts["retrieval_heads"] == 1 + len(grid.models)
    assert counts["head_masking"] == 1 + len(grid.models) - board  # the studies' models
    assert counts["select_heads"] == 2 + 2 and counts["report[mudaf]"] == 1
    assert counts["head_patterns"] == 1 + len(grid.models) and counts["report[lkg]"] == 1
    assert counts["report[leaderboard]"] == counts["report[opamp]"] == 1


def test_invalid_config_stops_before_any_job_naming_the_key(workdir, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("studies:\n  opamp:\n    methods:\n      opamp:\n        K: [0]\n")
    done = snakemake(workdir, "-j", "1", "--configfile", str(bad), check=False)
    assert done.returncode != 0
    assert "config.studies.opamp.methods.opamp.K[0]" in done.stdout + done.stderr
    bad.write_text(
        "presets:\n  smoke:\n    studies:\n      opamp:\n        benchmarks:\n"
        "          coqa_like: {family: single, metric: em, noise_ratios: [1.0]}\n"
    )
    done = snakemake(workdir, "-n", *SMOKE, "--configfile", str(bad), check=False)
    assert done.returncode != 0
    where = "config.presets.smoke.studies.opamp.benchmarks.coqa_like.noise_ratios[0]"
    assert where in done.stdout + done.stderr


def test_the_run_drops_snakemakes_default_job_rate_limit(workdir):
    """zoomattn/rate_limit.py: without it the scheduling loop ran 12,077 times over the smoke
    grid's 215 jobs."""
    stderr = (workdir.parent / "snakemake.stderr").read_text()
    assert f"zoomattn: {DROPPED}" in stderr


def test_the_warm_worker_ran_jobs_and_stopped_with_the_run(workdir):
    log = (workdir / "results/smoke/logs/worker.log").read_text()
    assert "job evaluate " in log and "job finetune " in log
    socket_path = re.search(r"ready in [\d.]+ s at (\S+)", log).group(1)
    assert not os.path.exists(socket_path)
    assert subprocess.run(["pgrep", "-f", socket_path], capture_output=True).returncode == 1


READER_ANALYSES = ("retrieval_heads", "head_patterns", "head_masking")  # of one model each


def test_rerunning_a_job_in_fresh_processes_gives_the_worker_made_files_byte_for_byte(
    workdir, rebuilt_after_interruption
):
    """The torn model's fine-tune and its readers, rerun without the warm worker in a copy of
    the smoke run, write the bytes the worker wrote for them."""
    rebuilt, _ = rebuilt_after_interruption
    smoke = workdir / "results/smoke"
    made = [
        *(smoke / "models" / TORN_MODEL).rglob("*"),
        *(smoke / "eval" / TORN_MODEL).rglob("*"),
        *(smoke / f"analysis/{kind}/{TORN_MODEL}.json" for kind in READER_ANALYSES),
        smoke / f"attention/{TORN_MODEL}.json",
    ]
    paths = sorted(str(p.relative_to(smoke)) for p in made if not p.is_dir())
    assert sum(p.startswith("models/") for p in paths) >= 4  # weights, config, method, metrics
    rerun = rebuilt / "results/smoke"
    assert sorted(p.name for p in (rerun / "models" / TORN_MODEL).iterdir()) == sorted(
        p.name for p in (smoke / "models" / TORN_MODEL).iterdir()
    )
    worker_made = {p: smoke / p for p in paths}
    fresh = {p: rerun / p for p in paths}
    # rerun indeed: the copy kept the worker-made files' times, and the rerun wrote them anew
    assert all(fresh[p].stat().st_mtime_ns > worker_made[p].stat().st_mtime_ns for p in paths)
    assert {p: fresh[p].read_bytes() for p in paths} == {
        p: worker_made[p].read_bytes() for p in paths
    }


def test_a_real_benchmark_on_the_synthetic_scale_stops_at_parse_naming_the_key(workdir):
    real = {"source": "chatrag", "metric": "em", "noise_ratios": [0.0]}
    bad = {"studies": {"opamp": {"benchmarks": {"x": real}}}}
    (workdir / "bad.yaml").write_text(yaml.safe_dump(bad))
    done = snakemake(workdir, "-n", "--configfile", "config.yaml", "bad.yaml", check=False)
    assert done.returncode != 0
    assert "config.studies.opamp.benchmarks.x: a real dataset needs a hub or local base model" in (
        done.stdout + done.stderr
    )


def test_rectification_part_writes_its_report_margin_and_answer_gaps(workdir):
    out = workdir / "results/smoke"
    for name in (
        "README.md",
        "table1_xi.png",
        "fig3_answer_gap.png",
        "fig4_g_variants.png",
        "fig5_margin.png",
    ):
        assert (out / "report/rectification" / name).stat().st_size > 0, name
    evals = list((out / "eval/rectification").rglob("*.json"))
    assert len(evals) == 6 and all(e.stem in ("vanilla", "reverse") for e in evals)
    for e in map(json.loads, (p.read_text() for p in evals)):
        assert e["placement"] == e["split"] and e["answer_gap_examples"] > 0
    margin = json.loads((out / "analysis/score_margin/base.json").read_text())
    auto_dir = out / "models/rectification/rectify_auto-reverse_s0"
    auto = json.loads((auto_dir / "method.json").read_text())
    assert auto["config"]["xi"] == margin["xi_auto"] > 0  # ξ chosen from the measured margin
    runs, _ = mlflow_runs(workdir)
    tuned = [r for r in runs if r.data.tags.get("zoomattn.stage") == "finetune"]
    rect = [r for r in tuned if r.data.tags["zoomattn.study"] == "rectification"]
    assert len(rect) == 6 and {r.data.tags["zoomattn.placement"] for r in rect} == {
        "vanilla",
        "reverse",
    }
    assert {r.data.tags.get("method.xi") for r in rect} == {None, "3.0", str(margin["xi_auto"])}


def test_changing_one_xi_reruns_only_that_xis_jobs_and_the_rectification_report(workdir, tmp_path):
    override = tmp_path / "xi.yaml"
    raw = yaml.safe_load((workdir / "config.yaml").read_text())
    raw["presets"]["smoke"]["studies"]["rectification"]["methods"]["rectify"]["xi"] = [5]
    override.write_text(yaml.safe_dump(raw, sort_keys=False))  # the one change, in order
    jobs = planned_jobs(workdir, "--configfile", str(override))
    assert sorted({r for r, _ in jobs}) == sorted(
        [*ANALYSES, "attention", "report[rectification]", "retrieval_heads"]
    )
    touched = {w.get("trained") or w.get("model") for r, w in jobs if w}
    assert touched == {
        "rectification/rectify-xi5-vanilla_s0",
        "rectification/rectify-xi5-reverse_s0",
    }


def test_mudaf_part_scores_every_models_heads_and_trains_the_selected_ones(workdir):
    out = workdir / "results/smoke"
    for name in ("README.md", "table2.md", "table4.md"):
        assert (out / "report/mudaf" / name).stat().st_size > 0, name
    models = ["base"] + [p.parent.name + "/" + p.name for p in (out / "models").glob("*/*_s0")]
    models += [p.name for p in (out / "models").glob("*_s0")]
    for m in models:  # every model: scores; every model of the studies: the masking experiment
        scores = json.loads((out / f"analysis/retrieval_heads/{m}.json").read_text())
        assert len(scores["f1"]) == 2 and len(scores["f1"][0]) == 4  # smoke: 2 layers x 4 heads
        masking = out / f"analysis/head_masking/{m}.json"
        if m.startswith("leaderboard/"):
            assert not masking.exists()
            continue
        assert [row["k"] for row in json.loads(masking.read_text())["k"]] == [1, 2]
    base_f1 = json.loads((out / "analysis/retrieval_heads/base.json").read_text())["f1"]
    for cell in ("mudaf-heads2_s0", "mudaf_weak_s0"):
        chosen = json.loads((out / f"analysis/selected_heads/mudaf/{cell}.json").read_text())
        saved = json.loads((out / f"models/mudaf/{cell}/method.json").read_text())
        assert saved["config"]["selected"] == chosen["selected"]
        assert chosen["scores"] == [base_f1[la][h] for la, h in chosen["selected"]]
    sft = json.loads((out / "models/mudaf/mudaf-heads0_s0/method.json").read_text())
    assert sft["config"]["heads"] == 0 and sft["config"]["selected"] == []
    runs, _ = mlflow_runs(workdir)
    tuned = [r for r in runs if r.data.tags.get("zoomattn.study") == "mudaf"]
    tuned = [r for r in tuned if r.data.tags.get("zoomattn.stage") == "finetune"]
    assert len(tuned) == 3
    for r in tuned:
        if r.data.tags["method.heads"] != "0":
            artifacts = {a.path for a in mlflow_client(workdir).list_artifacts(r.info.run_id)}
            assert "selected_heads" in artifacts
            assert r.data.metrics["cl_loss"] > 0


def test_changed_head_scores_rerun_the_selection_and_its_finetunes_only(workdir):
    scores = workdir / "results/smoke/analysis/retrieval_heads/base.json"
    before, text = scores.stat(), scores.read_text()
    scores.write_text(text + " ")  # new content: Snakemake ignores a newer mtime alone (touch)
    try:
        jobs = planned_jobs(workdir)
    finally:
        scores.write_text(text)
        os.utime(scores, ns=(before.st_atime_ns, before.st_mtime_ns))
    rules = sorted({r for r, _ in jobs})
    # the leaderboard's MuDAF entry selects its heads from the same scores (and gets a golden share)
    assert rules == sorted([*ANALYSES, "attention", "retrieval_heads", "select_heads"])
    by_rule = {r: {w.get("trained") or w.get("model") for rr, w in jobs if rr == r} for r in rules}
    study = {"mudaf/mudaf-heads2_s0", "mudaf/mudaf_weak_s0"}
    assert by_rule["finetune"] == study | {"leaderboard/mudaf_s0", "leaderboard/mudaf_s1"}
    assert by_rule["head_masking"] == study | {"base"}  # it masks by these scores


def test_lkg_part_classifies_every_models_heads_and_fuses_on_the_bases_middle_heads(workdir):
    out = workdir / "results/smoke"
    for name in (
        "README.md",
        "table2_ablations.md",
        "fig6a_passages.png",
        "fig2_head_patterns.png",
    ):
        assert (out / "report/lkg" / name).stat().st_size > 0, name
    models = ["base"] + [p.parent.name + "/" + p.name for p in (out / "models").glob("*/*_s0")]
    models += [p.name for p in (out / "models").glob("*_s0")]
    for m in models:  # every model of every study goes through the head-pattern analysis
        patterns = json.loads((out / f"analysis/head_patterns/{m}.json").read_text())
        assert len(patterns["head_class"]) == 2 and len(patterns["head_class"][0]) == 4
        assert abs(sum(patterns["distribution"].values()) - 1) < 1e-9
    middle = json.loads((out / "analysis/head_patterns/base.json").read_text())["middle_heads"]
    saved = json.loads((out / "models/lkg/lkg_s0/method.json").read_text())["config"]
    assert saved["middle_heads"] == middle and len(saved["boundary_ids"]) == 4
    assert (out / "models/lkg/lkg_s0/tokenizer_config.json").is_file()  # the markers travel
    robust = sorted(p.stem for p in (out / "eval/lkg/lkg_s0/nq_open").glob("*.json"))
    assert robust == ["irr1", "n0", "n4", "vanilla"]
    closed = json.loads((out / "eval/lkg/lkg_s0/nq_open/n0.json").read_text())
    assert closed["n"] == 24 and closed["split"] == "n0"
    runs, _ = mlflow_runs(workdir)
    tuned = [r for r in runs if r.data.tags.get("zoomattn.study") == "lkg"]
    tuned = {
        r.data.tags["zoomattn.run"]: r
        for r in tuned
        if r.data.tags.get("zoomattn.stage") == "finetune"
    }
    assert set(tuned) == {"lkg/qlora_s0", "lkg/lkg_s0", "lkg/lkg_no_lpr_s0"}
    full = tuned["lkg/lkg_s0"].data.metrics
    assert full["relevance_loss"] > 0 and full["confidence_loss"] > 0
    assert "relevance_loss" not in tuned["lkg/lkg_no_lpr_s0"].data.metrics  # no estimator to train


def test_changing_one_lkg_ablation_reruns_only_that_models_jobs_and_the_reports(workdir, tmp_path):
    override = tmp_path / "lkg.yaml"
    raw = yaml.safe_load((workdir / "config.yaml").read_text())
    raw["presets"]["smoke"]["studies"]["lkg"]["methods"]["lkg_no_lpr"]["alpha_init"] = 0.5
    override.write_text(yaml.safe_dump(raw, sort_keys=False))  # the one change, in order
    jobs = planned_jobs(workdir, "--configfile", str(override))
    assert sorted({r for r, _ in jobs}) == sorted([*ANALYSES, "attention", "retrieval_heads"])
    touched = {w.get("trained") or w.get("model") for r, w in jobs if w}
    assert touched == {"lkg/lkg_no_lpr_s0"}


def test_every_job_of_the_invocation_has_its_own_mlflow_run_name(workdir):
    runs, _ = mlflow_runs(workdir)
    parents = [r for r in runs if r.data.tags.get("zoomattn.kind") == "invocation"]
    first = min(parents, key=lambda r: r.info.start_time)
    names = [
        r.info.run_name for r in runs if r.data.tags.get("mlflow.parentRunId") == first.info.run_id
    ]
    assert names
    assert sorted({n for n in names if names.count(n) > 1}) == []
