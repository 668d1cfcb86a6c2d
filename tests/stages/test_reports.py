import json
import sys
import types

import mlflow
import pytest

from zoomattn.reporting.common.inputs import KINDS
from zoomattn.stages.reports import load_inputs, report, report_package

STUDIES = ("opamp", "rectification", "mudaf", "lkg", "leaderboard")


@pytest.mark.parametrize("study", STUDIES)
def test_each_study_report_is_found_by_its_name_and_reads_known_kinds(study):
    package = report_package(study)
    assert package.__name__ == f"zoomattn.reporting.{study}"
    assert callable(package.build_report)
    assert "evals" in package.KINDS and set(package.KINDS) <= set(KINDS)


@pytest.mark.parametrize(
    "study,said",
    [("opamp_big", "zoomattn/reporting/opamp_big/ is missing"), ("common", "no study's report")],
)
def test_a_study_without_a_report_folder_is_named(study, said):
    with pytest.raises(ValueError, match=said):
        report_package(study)


def test_training_metrics_without_a_model_key_take_it_from_their_path(tmp_path):
    path = tmp_path / "models" / "lkg" / "lkg_s0" / "metrics.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"steps": 6}))
    loaded = load_inputs({"train_metrics": [path]})
    assert loaded == {"train_metrics": [{"steps": 6, "model": "lkg/lkg_s0"}]}


def test_predictions_load_as_their_rows_and_other_kinds_as_json(tmp_path):
    (tmp_path / "r0.8.json").write_text(json.dumps({"model": "m", "score": 0.5}))
    (tmp_path / "r0.8.predictions.jsonl").write_text('{"id": "a", "score": 1.0}\n\n{"id": "b"}\n')
    loaded = load_inputs(
        {"evals": [tmp_path / "r0.8.json"], "predictions": [tmp_path / "r0.8.predictions.jsonl"]}
    )
    assert loaded["evals"] == [{"model": "m", "score": 0.5}]
    assert loaded["predictions"] == [[{"id": "a", "score": 1.0}, {"id": "b"}]]


@pytest.fixture
def toy_study(monkeypatch):
    """A fifth study's report package, as a new folder zoomattn/reporting/toy/ would be."""
    toy = types.ModuleType("zoomattn.reporting.toy")
    toy.KINDS = ("evals", "heads")
    toy.calls = []

    def build_report(spec, inputs, out):
        toy.calls.append(inputs)
        (out / "scores.csv").write_text("model,score\nm,0.5\n")

    toy.build_report = build_report
    monkeypatch.setitem(sys.modules, "zoomattn.reporting.toy", toy)
    return toy


def test_a_new_study_report_needs_only_its_package(toy_study, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    evals = tmp_path / "e.json"
    evals.write_text(json.dumps({"model": "m", "score": 0.5}))
    out, results = tmp_path / "report/toy", tmp_path / "results"
    report("toy", {"preset": "smoke", "seeds": [0]}, {"evals": [evals], "heads": []}, out, results)
    assert toy_study.calls == [{"evals": [{"model": "m", "score": 0.5}], "heads": []}]
    assert (out / "scores.html").exists()  # the shared finishing: each csv as html too
    assert json.loads((out / "provenance.json").read_text())["preset"] == "smoke"
    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert run.info.run_name == "report:toy" and run.data.tags["zoomattn.stage"] == "report"


def test_a_kind_the_study_reads_and_is_not_handed_is_refused_before_it_runs(toy_study, tmp_path):
    with pytest.raises(ValueError, match="reporting/toy/ reads heads, which the workflow does not"):
        report("toy", {"preset": "smoke"}, {"evals": []}, tmp_path / "o", tmp_path / "r")
    assert toy_study.calls == [] and not (tmp_path / "r").exists()


def test_an_input_kind_the_study_does_not_read_is_refused_before_it_runs(toy_study, tmp_path):
    with pytest.raises(ValueError, match="the toy report reads evals, heads; .* patterns"):
        report("toy", {"preset": "smoke"}, {"patterns": []}, tmp_path / "o", tmp_path / "r")
    assert toy_study.calls == [] and not (tmp_path / "r").exists()
