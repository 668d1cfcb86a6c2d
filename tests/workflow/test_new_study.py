"""A newcomer adds a fifth study with one config block, one method folder and one report folder,
and touches no other file: the workflow finds the method (zoomattn/methods/registry.py), builds the
study from its block (zoomattn/studies.py), plans its data, fine-tunes, evaluations and report with
the rules every study shares, and runs the report package it finds by the study's name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import yaml

from tests.workflow.scratch import SMOKE, planned_jobs, snakemake

TOY_CONFIG = '''
from dataclasses import dataclass


@dataclass(frozen=True)
class ToyConfig:
    """The shared LoRA; ``level`` is a sweep axis that changes nothing but the cell's name."""

    level: int = 0
'''

TOY_METHOD = '''
from zoomattn.methods.protocol import Method, ResolveContext
from zoomattn.methods.registry import register
from zoomattn.methods.toy.config import ToyConfig


@register
class Toy(Method):
    name = "toy"
    config_cls = ToyConfig
    sweep = ("level",)

    def build(self, model, cfg):
        """Nothing beyond the shared LoRA layers."""

    def objective(self, cfg):
        return None

    def prepare_tokenizer(self, tok, cfg):
        return False

    def resolve(self, values, lora, context: ResolveContext):
        return dict(values)

    def tuning(self, cfg):
        return "lora"
'''

TOY_REPORT = '''
import pandas as pd

KINDS = ("evals",)


def build_report(spec, inputs, out):
    """One table: every evaluation of the study's models and base, labelled from the spec."""
    runs = {model: cell["run"] for model, cell in spec["cells"].items()}
    rows = [
        {"model": runs.get(e["model"], e["model"]), "benchmark": e["benchmark"]}
        | {"score": e["score"]}
        for e in inputs["evals"]
    ]
    pd.DataFrame(rows).sort_values(["model", "benchmark"]).to_csv(out / "scores.csv", index=False)
'''

TOY_BLOCK = {
    "distractors": 2,
    "methods": {"toy": {"level": [1, 2]}},
    "benchmarks": {"toy_like": {"family": "single", "metric": "em"}},
    "train": {"n_train": 48, "mix": {"single": 1.0}},
    "finetune": {"steps": 4},
}


def add_toy_study(wd: Path) -> Path:
    """The three additions, and nothing else: a method folder, a report folder, a config block
    (given as an override file, as a user would)."""
    method = wd / "zoomattn/methods/toy"
    method.mkdir()
    (method / "config.py").write_text(TOY_CONFIG)
    (method / "__init__.py").write_text(TOY_METHOD)
    report = wd / "zoomattn/reporting/toy"
    report.mkdir()
    (report / "__init__.py").write_text(TOY_REPORT)
    raw = yaml.safe_load((wd / "config.yaml").read_text())
    raw["presets"]["smoke"]["studies"]["toy"] = TOY_BLOCK
    override = wd / "toy.yaml"
    override.write_text(yaml.safe_dump(raw, sort_keys=False))  # the one change, in order
    return override


def test_a_fifth_study_is_one_config_block_one_method_folder_and_one_report_folder(
    workdir, tmp_path
):
    wd = tmp_path / "wf"
    shutil.copytree(workdir, wd, symlinks=True, ignore=shutil.ignore_patterns(".snakemake"))
    override = add_toy_study(wd)

    jobs = planned_jobs(wd, "--configfile", str(override))
    trained = {w["trained"] for rule, w in jobs if rule == "finetune"}
    assert trained == {"toy/toy-level1_s0", "toy/toy-level2_s0"}
    assert "report[toy]" in {rule for rule, _ in jobs}

    snakemake(wd, "results/smoke/report/toy", "-j", "2", *SMOKE, "--configfile", str(override))
    scores = pd.read_csv(wd / "results/smoke/report/toy/scores.csv")
    assert sorted(set(scores["model"])) == ["base", "toy-level1", "toy-level2"]
    assert set(scores["benchmark"]) == {"toy_like"}
    method = json.loads((wd / "results/smoke/models/toy/toy-level2_s0/method.json").read_text())
    assert method == {"method": "toy", "config": {"level": 2}}
    assert (wd / "results/smoke/report/toy/provenance.json").is_file()
