"""The grid of every study: which models train on which data, and where each is evaluated.

A study is one paper's part of the workflow. ``opamp`` (the main paper) is the top-level
``methods``/``benchmarks``/``attention`` of the config; ``rectification`` (GRID.md §2) is the
config's ``rectification:`` block, with its own training data, query placements and benchmarks.
Model ids name directories under ``models/`` and ``eval/``: an OpAmp cell is ``<run>_s<seed>``, a
rectification cell ``rectification/<run>-<placement>_s<seed>``; the base a study starts from is
``base`` (or ``base-rectification`` when the study names its own base model).
Eval splits are ``r<noise ratio>`` (OpAmp) or the placement (rectification).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zoomattn.methods import cells

RECT = "rectification"


@dataclass(frozen=True)
class Model:
    id: str
    study: str
    base: str  # id of the base model it starts from (itself for a base)
    method: str | None = None  # None: a base model
    values: dict = field(default_factory=dict)
    run: str | None = None  # the grid cell's name
    seed: int | None = None
    placement: str | None = None  # rectification: the query placement of train and test data

    @property
    def train_data(self) -> str:
        """Directory of the training set under ``data/``."""
        return "train" if self.study == "opamp" else f"train-{RECT}/{self.placement}"


def rect_cfg(cfg: dict) -> dict | None:
    return cfg.get(RECT) or None


def rect_base(cfg: dict) -> str:
    return f"base-{RECT}" if "base_model" in (rect_cfg(cfg) or {}) else "base"


def base_models(cfg: dict) -> dict[str, dict]:
    """Base id -> its ``base_model`` config."""
    out = {"base": cfg["base_model"]}
    if rect_base(cfg) != "base":
        out[rect_base(cfg)] = cfg[RECT]["base_model"]
    return out


def trained_models(cfg: dict) -> dict[str, Model]:
    out = {}
    for run, (method, values) in cells(cfg["methods"]).items():
        for seed in cfg["seeds"]:
            m = Model(f"{run}_s{seed}", "opamp", "base", method, values, run, seed)
            out[m.id] = m
    rect = rect_cfg(cfg)
    for entry, (values, placements) in (rect_entries(rect) if rect else {}).items():
        for run, (method, cell_values) in cells({entry: values}).items():
            for placement in placements:
                for seed in cfg["seeds"]:
                    mid = f"{RECT}/{run}-{placement}_s{seed}"
                    base = rect_base(cfg)
                    out[mid] = Model(mid, RECT, base, method, cell_values, run, seed, placement)
    return out


def rect_entries(rect: dict) -> dict[str, tuple[dict, list[str]]]:
    """Entry -> (its method values, its placements: its own ``placements`` or the study's)."""
    out = {}
    for entry, values in rect["methods"].items():
        values = dict(values or {})
        out[entry] = (values, values.pop("placements", rect["placements"]))
    return out


def benchmarks(cfg: dict, study: str) -> dict[str, dict]:
    return cfg["benchmarks"] if study == "opamp" else rect_cfg(cfg)["benchmarks"]


def opamp_splits(cfg: dict) -> list[tuple[str, str]]:
    return [(b, f"r{r:g}") for b, s in cfg["benchmarks"].items() for r in s["noise_ratios"]]


def evaluations(cfg: dict) -> list[tuple[str, str, str]]:
    """Every (model id, benchmark, split) the grid evaluates."""
    out = [("base", b, s) for b, s in opamp_splits(cfg)]
    rect = rect_cfg(cfg)
    if rect:
        out += [(rect_base(cfg), b, p) for b in rect["benchmarks"] for p in rect["placements"]]
    for m in trained_models(cfg).values():
        if m.study == "opamp":
            out += [(m.id, b, s) for b, s in opamp_splits(cfg)]
        else:
            out += [(m.id, b, m.placement) for b in rect["benchmarks"]]
    return out


def study_of_benchmark(cfg: dict, benchmark: str) -> str:
    return "opamp" if benchmark in cfg["benchmarks"] else RECT
