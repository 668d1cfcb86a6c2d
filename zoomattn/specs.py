"""Every job's spec: exactly the config values the job depends on, plus the hash of its code.

A spec is its job's ``spec`` param (the Snakefile passes it as JSON), so Snakemake reruns a job
when, and only when, one of them changes. ``Specs(cfg)`` builds them from the effective config
(zoomattn/config.py) and its grid (zoomattn/grid.py); each method is named after its rule.
"""

from __future__ import annotations

from zoomattn.attention import kernels
from zoomattn.config import code_hash
from zoomattn.config_checks import is_synthetic
from zoomattn.grid import Grid
from zoomattn.placement import plan
from zoomattn.splits import Split
from zoomattn.studies import Study

CELL_KEYS = ("run", "method", "values", "seed")  # what a study's report knows of each cell
SCORING_KEYS = ("published_rule", "decoding")  # how a benchmark is scored, not what it holds


def _data_view(benchmark: dict) -> dict:
    """A benchmark's spec as its data job reads it: how it is scored changes no example."""
    return {k: v for k, v in benchmark.items() if k not in SCORING_KEYS}


class Specs:
    def __init__(self, cfg: dict, grid: Grid | None = None):
        self.cfg = cfg
        self.grid = grid or Grid(cfg)
        self.preset = cfg["preset"]
        self.synthetic = is_synthetic(cfg)

    def _device(self, kind: str) -> dict:
        """Where a model job of this resource kind runs, in which dtype (zoomattn/placement.py)."""
        return plan(self.cfg, kind).as_spec()

    def _kernels(self) -> dict:
        """The preset's ``attention_kernels`` where it is not the default (``reference``): a spec
        names it only then, so the specs of presets that leave it are what they were before it."""
        setting = self.cfg.get("attention_kernels", kernels.REFERENCE)
        return {} if kernels.is_reference(setting) else {"attention_kernels": setting}

    def _model_job(self, stage: str, model: str | None = None) -> dict:
        """What every evaluation-kind job of a model shares (a base: no method code), and the hash
        of its stage's code."""
        method = self.grid.method(model) if model else None
        return {
            "preset": self.preset,
            "quantization": self._quantization(model),
            "evaluation_base": self.cfg["evaluation"].get("base", "quantized"),
            "device": self._device("evaluate"),
            **self._kernels(),
            "code": code_hash(stage, method),
        }

    def _quantization(self, model: str | None) -> dict:
        """The base's quantization a model was trained on (its study's or entry's ``finetune`` may
        override the preset's), so it is loaded for evaluation as it was trained; a base model:
        the preset's."""
        m = self.grid.models.get(model) if model else None
        if m is None:
            return self.cfg["finetune"]["quantization"]
        study = self.grid.studies[m.study]
        return {**study.finetune, **m.finetune}["quantization"]

    # ---- data ---------------------------------------------------------------------------------
    def world(self) -> dict:
        d = self.cfg["data"]
        return {
            "preset": self.preset,
            "world_seed": self.cfg["world_seed"],
            "code": code_hash("world"),
            "data": {"n_entities": d["n_entities"], "n_famous": d["n_famous"]},
        }

    def _data(self, n_eval: int) -> dict:
        """What a data job of the grid's scale reads: the world (synthetic) or the builders (the
        job's own code hash is set by ``train_data``/``eval_data``)."""
        if self.synthetic:
            world = self.world()
            return {**world, "data": {**world["data"], "n_eval": n_eval}}
        return {
            "preset": self.preset,
            "world_seed": self.cfg["world_seed"],
            "data": {"n_eval": n_eval},
        }

    def train_data(self, train_set: str) -> dict:
        """The shared training set (the preset's ``data``), or a study's at one placement."""
        return {**self._train_data(train_set), "code": code_hash("train-data")}

    def eval_data(self, benchmark: str, split: str) -> dict:
        """An eval set: a shared benchmark at a noise ratio, or a study's set (golden documents
        plus hard distractors) at a placement, noise ratio or passage setting."""
        return {**self._eval_data(benchmark, split), "code": code_hash("eval-data")}

    def _train_data(self, train_set: str) -> dict:
        study, placement = self.grid.train_sets[train_set]
        if not study.kind.shared_data:
            return {
                **self._study_data(study, Split(placement=placement)),
                "train": study.train_block(self.grid.dataset_of(train_set)),
            }
        if not self.synthetic:
            spec = self._data(self.cfg["data"]["n_eval"])
            return {**spec, "data": {"train": self.cfg["data"]["train"]}}
        benchmarks = {name: _data_view(b) for name, b in study.benchmarks.items()}
        return {**self.world(), "data": self.cfg["data"], "benchmarks": benchmarks}

    def _eval_data(self, benchmark: str, split: str) -> dict:
        study = self.grid.study_of_benchmark(benchmark)
        s = study.split(benchmark, split)
        if not study.kind.shared_data:
            spec = self._study_data(study, s)
            return {**spec, "benchmark": benchmark, "spec": _data_view(study.benchmarks[benchmark])}
        return {
            **self._data(self.cfg["data"]["n_eval"]),
            "benchmark": benchmark,
            "noise_ratio": float(s.noise_ratio),
            "benchmarks": {benchmark: _data_view(study.benchmarks[benchmark])},
        }

    def _study_data(self, study: Study, split: Split) -> dict:
        """A study's set: the examples do not depend on the placement, only their layout does."""
        n_eval = study.block.get("n_eval", self.cfg["data"]["n_eval"])  # the leaderboard's own
        spec = {**self._data(n_eval), "study": study.name, **split.data_fields()}
        if "distractors" in study.block:
            spec["distractors"] = study.block["distractors"]
        return spec

    # ---- models -------------------------------------------------------------------------------
    def pretrain(self) -> dict:
        return {
            "preset": self.preset,
            "base_model": self.cfg["base_model"],
            "pretrain": self.cfg["pretrain"],
            "device": self._device("pretrain"),
            "code": code_hash("pretrain"),
        }

    def base_model(self, base: str) -> dict:
        return {
            "preset": self.preset,
            "base_model": self.grid.bases[base],
            "code": code_hash("base-model"),
        }

    def finetune(self, model: str) -> dict:
        m = self.grid.models[model]
        study = self.grid.studies[m.study]
        spec = {
            "preset": self.preset,
            "run": model,
            "seed": m.seed,
            "method": m.method,
            "method_config": m.values,
            "finetune": {**study.finetune, **m.finetune},
            "device": self._device("finetune"),
            **self._kernels(),
            "code": code_hash("finetune", m.method),
        }
        if not study.kind.shared_data:
            spec.update(study=m.study, placement=m.placement, base=m.base)
        if m.dataset:  # per_dataset: the one training set it learns
            spec["dataset"] = m.dataset
        return spec

    def select_heads(self, model: str) -> dict:
        m = self.grid.models[model]
        return {
            "preset": self.preset,
            "model": model,
            "seed": m.seed,
            "method_config": m.values,
            "code": code_hash("select-heads", m.method),
        }

    # ---- evaluations and analyses -------------------------------------------------------------
    def evaluate(self, model: str, benchmark: str, split: str) -> dict:
        study = self.grid.study_of_benchmark(benchmark)
        s = study.split(benchmark, split)
        spec = {
            **self._model_job("evaluate", model),
            "model": model,
            "benchmark": benchmark,
            "metric": study.benchmarks[benchmark]["metric"],
            "split": split,
            "evaluation": self.cfg["evaluation"],
        }
        if s.noise_ratio is not None:
            spec["noise_ratio"] = float(s.noise_ratio)
        if not study.kind.shared_data:
            spec.update(study=study.name, placement=s.placement)
        if "answer_gap_examples" in study.block:
            spec["answer_gap_examples"] = study.block["answer_gap_examples"]
        bench = study.benchmarks[benchmark]
        spec.update({k: bench[k] for k in SCORING_KEYS if k in bench})  # only where set
        return spec

    def attention(self, model: str) -> dict:
        att = self.grid.analysis("attention").block["attention"]
        return {
            **self._model_job("attention", model),
            "model": model,
            "benchmark": att["benchmark"],
            "noise_ratio": att["noise_ratio"],
            "answer_gap_examples": att.get("answer_gap_examples"),
            "attention_examples": self.cfg["evaluation"]["attention_examples"],
        }

    def score_margin(self, base: str) -> dict:
        study = self.grid.analysis("score_margin")
        benchmark, split = study.analysis_set("score_margin")
        return {
            **self._model_job("score-margin"),
            "model": base,
            "benchmark": benchmark,
            "placement": split.placement,
            "examples": study.block["margin_examples"],
        }

    def retrieval_heads(self, model: str) -> dict:
        block = self.grid.analysis("retrieval_heads").block
        return {
            **self._model_job("retrieval-heads", model),
            "model": model,
            "retrieval_heads": block["retrieval_heads"],
        }

    def head_masking(self, model: str) -> dict:
        study = self.grid.analysis("head_masking")
        benchmark, _ = study.analysis_set("head_masking")
        return {
            **self._model_job("head-masking", model),
            "model": model,
            "benchmark": benchmark,
            "metric": study.benchmarks[benchmark]["metric"],
            "masking": study.block["masking"],
            "evaluation": self.cfg["evaluation"],
        }

    def head_patterns(self, model: str) -> dict:
        block = self.grid.analysis("head_patterns").block
        return {
            **self._model_job("head-patterns", model),
            "model": model,
            "head_patterns": block["head_patterns"],
        }

    # ---- reports ------------------------------------------------------------------------------
    def report(self, name: str) -> dict:
        """A study's report spec: what its report reads of the config (its cells, block, base
        and seeds), and the report code's hash."""
        study = self.grid.studies[name]
        build = REPORTS.get(name, Specs._study_report)
        return {
            "preset": self.preset,
            **build(self, study),
            "code": code_hash("report", report=name),
        }

    def _study_report(self, study: Study, keys=CELL_KEYS) -> dict:
        cells = {mid: {k: getattr(m, k) for k in keys} for mid, m in study.models.items()}
        return {study.name: study.block, "cells": cells, "base": study.base, "seeds": study.seeds}

    def _opamp_report(self, study: Study) -> dict:
        return {
            "benchmarks": study.benchmarks,
            "cells": {
                mid: {k: getattr(m, k) for k in CELL_KEYS} for mid, m in study.models.items()
            },
            "seeds": study.seeds,
            "attention": study.block["attention"],
        }

    def _rectification_report(self, study: Study) -> dict:
        keys = (*CELL_KEYS, "placement")
        if study.datasets.scheme == "per_dataset":  # and each cell's one training set
            keys += ("dataset",)
        return self._study_report(study, keys)

    def _lkg_report(self, study: Study) -> dict:
        return self._study_report(study, (*CELL_KEYS, "entry"))  # Fig. 6's models, by entry

    def _mudaf_report(self, study: Study) -> dict:
        studies = {mid: m.study for mid, m in self.grid.models.items()}
        bases = {s.name: s.base for s in self.grid}  # each study's base: the across-methods table
        extra = {"studies": studies, "bases": bases, "clipped_heads": study.clipped_heads()}
        return {**self._study_report(study), **extra}

    def cross_report(self, study: Study | None = None) -> dict:
        """What the cross-method report reads of the config: the leaderboard's cells and
        settings, and every study's cells and blocks (the fidelity table, the diagnostics)."""
        grid = self.grid
        keys = ("study", "run", "entry", "method", "values", "seed", "placement")
        cells = {mid: {k: getattr(m, k) for k in keys} for mid, m in grid.models.items()}
        for mid, m in grid.models.items():
            if m.dataset:  # per_dataset: the benchmarks it answers for (the claims)
                cells[mid]["dataset"] = m.dataset
        study = study or grid.studies.get("leaderboard")
        board = study.block if study else {}
        return {
            "preset": self.preset,
            "seeds": grid.seeds("leaderboard"),
            "grid_seeds": self.cfg["seeds"],
            "leaderboard": {
                "cells": {k: v for k, v in cells.items() if v["study"] == "leaderboard"},
                "benchmarks": board.get("benchmarks", {}),
                "noise_ratios": board.get("noise_ratios", []),
                "baseline": board.get("baseline"),
            },
            "benchmarks": grid.shared.benchmarks,
            "studies": {s.name: s.block for s in grid if not (s.kind.shared_data or s.kind.cross)},
            "cells": cells,
            "bases": {s.name: s.base for s in grid},
        }


REPORTS = {  # a study -> its report spec's builder (the default: ``Specs._study_report``)
    "opamp": Specs._opamp_report,
    "rectification": Specs._rectification_report,
    "mudaf": Specs._mudaf_report,
    "lkg": Specs._lkg_report,
    "leaderboard": Specs.cross_report,
}
