"""Where a run's outputs live, under ``out`` (``results/<preset>``), and which of them a job reads.

Paths take a model id, benchmark or split name, or a wildcard in braces (``"{model}"``), so the
same function names a rule's output pattern and the files its readers ask for.
"""

from __future__ import annotations

from zoomattn.grid import Grid
from zoomattn.splits import Split
from zoomattn.studies import KINDS, Study


class Layout:
    def __init__(self, out: str, grid: Grid):
        self.out = out
        self.grid = grid

    # ---- data and models ---------------------------------------------------------------------
    @property
    def world(self) -> str:
        return f"{self.out}/data/world"

    def data_dir(self, name: str) -> str:
        """A training set's directory (``train``, ``train-<study>/<placement>``)."""
        return f"{self.out}/data/{name}"

    def split_dir(self, benchmark: str, split: Split | str) -> str:
        return f"{self.out}/data/eval/{benchmark}/{split}"

    def analysis_split_dir(self, study: Study, analysis: str) -> str:
        """The eval set an analysis of a study runs on."""
        return self.split_dir(*study.analysis_set(analysis))

    def model_dir(self, model: str) -> str:
        return f"{self.out}/models/{model}"

    def log(self, name: str) -> str:
        return f"{self.out}/logs/{name}.log"

    # ---- evaluations and analyses ------------------------------------------------------------
    def eval_file(self, model: str, benchmark: str, split: str) -> str:
        return f"{self.out}/eval/{model}/{benchmark}/{split}.json"

    def attention_file(self, model: str) -> str:
        return f"{self.out}/attention/{model}.json"

    def margin_file(self, base: str) -> str:
        return f"{self.out}/analysis/score_margin/{base}.json"

    def heads_file(self, model: str) -> str:
        return f"{self.out}/analysis/retrieval_heads/{model}.json"

    def masking_file(self, model: str) -> str:
        return f"{self.out}/analysis/head_masking/{model}.json"

    def selection_file(self, model: str) -> str:
        return f"{self.out}/analysis/selected_heads/{model}.json"

    def patterns_file(self, model: str) -> str:
        return f"{self.out}/analysis/head_patterns/{model}.json"

    def report_dir(self, study: str) -> str:
        return f"{self.out}/report/{study}"

    # ---- what jobs read ----------------------------------------------------------------------
    def finetune_inputs(self, model: str) -> dict[str, str]:
        """A fine-tune's training set and base, and what its method needs of their analyses."""
        m = self.grid.models[model]
        inputs = {"data": self.data_dir(m.train_data), "base": self.model_dir(m.base)}
        if m.values.get("xi") == "auto":  # rectify: ξ from the base model's score margin
            inputs["margin"] = self.margin_file(m.base)
        if m.method == "mudaf" and m.values.get("heads", 0) > 0:  # the heads its loss trains
            inputs["heads"] = self.selection_file(m.id)
        if m.method == "lkg":  # the fusion runs on the base's middle-focused heads
            inputs["patterns"] = self.patterns_file(m.base)
        return inputs

    @property
    def all_models(self) -> list[str]:
        return [*self.grid.bases, *self.grid.models]

    def masked_models(self) -> list[str]:
        """The models of MuDAF's head-masking experiment: its base (``masking.models: base``),
        or every model of the grid but those of a cross-method study (``all``)."""
        study = self.grid.analysis("head_masking")
        if study is None:
            return []
        if study.block["masking"].get("models", "all") == "base":
            return [study.base]
        models = self.grid.models
        return [
            m
            for m in self.all_models
            if m not in models or not self.grid.studies[models[m].study].kind.cross
        ]

    def report_inputs(self, study: Study) -> dict[str, list[str]]:
        """The files a study's report reads, by kind (``Kind.report``): its evaluations (every
        evaluation of the grid for a cross-method study), the golden attention share of its
        models (of every model), its base's training metrics, its base's score margin, every
        model's retrieval-head scores, the head-masking results, its cells' selected heads,
        every model's head patterns, and its models' training metrics."""
        return {kind: self._files(kind, study) for kind in study.kind.report}

    def cross_inputs(self) -> dict[str, list[str]]:
        """The cross-method report's inputs, whether or not the leaderboard is in the grid."""
        study = self.grid.studies.get("leaderboard")
        return {kind: self._files(kind, study, cross=True) for kind in KINDS["leaderboard"].report}

    def _files(self, kind: str, study: Study | None, cross: bool = False) -> list[str]:
        grid, cross = self.grid, cross or study.kind.cross
        every = self.all_models
        if kind == "evals":
            evals = grid.evaluations
            return [self.eval_file(*e) for e in evals if cross or e[1] in study.benchmarks]
        if kind == "predictions":  # the per-example scores beside each evaluation
            evals = self._files("evals", study, cross)
            return [f.removesuffix(".json") + ".predictions.jsonl" for f in evals]
        if kind == "attention":
            return [
                self.attention_file(m) for m in (every if cross else [study.base, *study.models])
            ]
        if kind == "heads":
            return [self.heads_file(m) for m in every] if grid.analysis("retrieval_heads") else []
        if kind == "patterns":
            return [self.patterns_file(m) for m in every] if grid.analysis("head_patterns") else []
        if kind == "masking":
            return [self.masking_file(m) for m in self.masked_models()]
        if kind == "margin":
            return [self.margin_file(study.base)]
        if kind == "base_metrics":
            return [f"{self.model_dir(study.base)}/metrics.json"]
        if kind == "train_metrics":
            return [f"{self.model_dir(m)}/metrics.json" for m in study.models]
        if kind == "selections":
            cells = study.models.values()
            return [self.selection_file(m.id) for m in cells if m.values.get("heads", 0) > 0]
        raise ValueError(f"no report input of kind {kind!r}")
