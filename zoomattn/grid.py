"""The grid: every study a config enables, and what they share (bases, models, evaluations).

``Grid(cfg)`` builds one ``Study`` (zoomattn/studies.py) per block under ``studies:`` that is not
null, in report order. The bases are ``base`` (the preset's ``base_model``) and each study's own
base; every model of every study is evaluated on its study's splits (zoomattn/splits.py).

``split_names`` gives a study block's eval sets as (benchmark, split name) pairs (the claims of
the cross-method report read them).
"""

from __future__ import annotations

from functools import cached_property

from zoomattn.studies import KINDS, Model, Study, block_splits


class Grid:
    def __init__(self, cfg: dict):
        self.cfg = cfg
        blocks = cfg["studies"]
        order = [*(n for n in KINDS if n in blocks), *(n for n in blocks if n not in KINDS)]
        self.studies = {name: Study.from_config(cfg, name) for name in order if blocks[name]}

    def __iter__(self):
        return iter(self.studies.values())

    @property
    def shared(self) -> Study:
        """The study on the shared data (OpAmp): its benchmarks are the shared eval sets."""
        return next(s for s in self if s.kind.shared_data)

    @cached_property
    def bases(self) -> dict[str, dict]:
        """Base id -> its ``base_model`` config (``base`` first)."""
        out = {"base": self.cfg["base_model"]}
        out.update({s.base: s.base_model for s in self if s.base != "base"})
        return out

    @cached_property
    def models(self) -> dict[str, Model]:
        """Model id -> every fine-tuned model of every study."""
        return {mid: m for s in self for mid, m in s.models.items()}

    @cached_property
    def evaluations(self) -> list[tuple[str, str, str]]:
        """Every (model id, benchmark, split) the grid evaluates: the bases first."""
        out = [e for s in self for e in s.base_evaluations()]
        for m in self.models.values():
            out += self.studies[m.study].evaluations(m)
        return out

    @cached_property
    def train_sets(self) -> dict[str, tuple[Study, str | None]]:
        """Training set directory under ``data/`` -> (its study, its query placement)."""
        return {m.train_data: (self.studies[m.study], m.placement) for m in self.models.values()}

    def dataset_of(self, train_set: str) -> str | None:
        """The one training set a per_dataset data directory holds (None: a pooled or shared
        set)."""
        return next(m.dataset for m in self.models.values() if m.train_data == train_set)

    def study_of_benchmark(self, benchmark: str) -> Study:
        for s in self:
            if benchmark in s.benchmarks:
                return s
        raise KeyError(f"no study of the grid has a benchmark {benchmark!r}")

    def analysis(self, name: str) -> Study | None:
        """The study whose block configures an analysis (``studies.ANALYSES``), if any."""
        return next((s for s in self if name in s.analyses), None)

    def seeds(self, name: str) -> list[int]:
        """A study's fine-tuning seeds (the grid's when it is not in the grid)."""
        study = self.studies.get(name)
        return study.seeds if study else self.cfg["seeds"]

    def method(self, model: str) -> str | None:
        """A model's method (None for a base)."""
        return self.models[model].method if model in self.models else None

    def base_of(self, model: str) -> str:
        """The base a model starts from (a base: itself)."""
        return self.models[model].base if model in self.models else model


def split_names(block: dict) -> list[tuple[str, str]]:
    """(benchmark, split name) of every eval set of a study block (``{"benchmarks": ...}``)."""
    return [(b, str(s)) for b, splits in block_splits(block).items() for s in splits]
