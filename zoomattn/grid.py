"""The grid of every study: which models train on which data, and where each is evaluated.

A study is one paper's part of the workflow. ``opamp`` (the main paper) is the top-level
``methods``/``benchmarks``/``attention`` of the config. The other studies are config blocks of
their own (``rectification``: GRID.md §2, ``mudaf``: §3, ``lkg``: §4), each with its training data
(golden documents plus hard distractors), cells, benchmarks and optionally its own base model.

Model ids name directories under ``models/`` and ``eval/``: an OpAmp cell is ``<run>_s<seed>``; a
cell of another study is ``<study>/<run>-<placement>_s<seed>`` when the study has a query-placement
axis (rectification), else ``<study>/<run>_s<seed>``. The base a study starts from is ``base``, or
``base-<study>`` when the study names its own base model. Eval splits are ``r<noise ratio>``
(OpAmp) or the query placement (``vanilla`` for a study without that axis); LKG-RALM's robustness
sets add ``n<k>`` (k retrieved passages) and ``irr<share>`` (that share of them irrelevant).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zoomattn.methods import cells

RECT = "rectification"
MUDAF = "mudaf"
LKG = "lkg"
LEADERBOARD = "leaderboard"  # the cross-method comparison (GRID.md §5): a study of its own
STUDIES = (RECT, MUDAF, LKG, LEADERBOARD)  # the config blocks beside the OpAmp grid, report order


@dataclass(frozen=True)
class Model:
    id: str
    study: str
    base: str  # id of the base model it starts from (itself for a base)
    method: str | None = None  # None: a base model
    values: dict = field(default_factory=dict)
    run: str | None = None  # the grid cell's name
    seed: int | None = None
    placement: str | None = None  # a study's query placement of train and test data
    entry: str | None = None  # the study's ``methods:`` entry the cell comes from
    finetune: dict = field(default_factory=dict)  # the entry's own fine-tuning settings (lr)

    @property
    def train_data(self) -> str:
        """Directory of the training set under ``data/``."""
        return "train" if self.study == "opamp" else f"train-{self.study}/{self.placement}"


def study_cfg(cfg: dict, study: str) -> dict | None:
    return cfg.get(study) or None


def rect_cfg(cfg: dict) -> dict | None:
    return study_cfg(cfg, RECT)


def studies(cfg: dict) -> list[str]:
    """The side studies this config runs."""
    return [s for s in STUDIES if study_cfg(cfg, s)]


def placements(block: dict) -> list[str]:
    return block.get("placements", ["vanilla"])


def study_base(cfg: dict, study: str) -> str:
    return f"base-{study}" if "base_model" in (study_cfg(cfg, study) or {}) else "base"


def rect_base(cfg: dict) -> str:
    return study_base(cfg, RECT)


def base_models(cfg: dict) -> dict[str, dict]:
    """Base id -> its ``base_model`` config."""
    out = {"base": cfg["base_model"]}
    for study in studies(cfg):
        if study_base(cfg, study) != "base":
            out[study_base(cfg, study)] = cfg[study]["base_model"]
    return out


def total_heads(cfg: dict) -> int | None:
    """Query heads of a base the workflow pretrains (None for a hub model: known once loaded)."""
    m = cfg["base_model"]
    return m["layers"] * m["heads"] if m.get("source") == "pretrain" else None


def study_entries(cfg: dict, study: str) -> dict[str, tuple[dict, list[str], dict]]:
    """Entry -> (its method values, its placements: its own ``placements`` or the study's, its
    ``finetune`` settings over the study's: a full fine-tune's smaller lr in the leaderboard).

    MuDAF head counts above the model's head count are clipped to it, and a count that clipping
    repeats is dropped: the grid trains each distinct selection once (``clipped_heads``)."""
    block = cfg[study]
    out = {}
    for entry, values in block["methods"].items():
        values = dict(values or {})
        entry_placements = values.pop("placements", placements(block))
        entry_finetune = values.pop("finetune", {})
        total = total_heads(cfg) if study == MUDAF else None
        if total and isinstance(values.get("heads"), list):
            values["heads"] = list(dict.fromkeys(min(n, total) for n in values["heads"]))
        elif total and isinstance(values.get("heads"), int):
            values["heads"] = min(values["heads"], total)
        out[entry] = (values, entry_placements, entry_finetune)
    return out


def clipped_heads(cfg: dict) -> dict[int, int]:
    """MuDAF head counts of the config above the model's head count -> the count trained."""
    block, total = study_cfg(cfg, MUDAF), total_heads(cfg)
    if not block or not total:
        return {}
    asked = []
    for values in block["methods"].values():
        heads = (values or {}).get("heads", [])
        asked += heads if isinstance(heads, list) else [heads]
    return {n: total for n in asked if n > total}


def study_seeds(cfg: dict, study: str) -> list[int]:
    """A study's fine-tuning seeds: its own ``seeds`` (the leaderboard's), else the grid's."""
    return (study_cfg(cfg, study) or {}).get("seeds") or cfg["seeds"]


def trained_models(cfg: dict) -> dict[str, Model]:
    out = {}
    for run, (method, values) in cells(cfg["methods"]).items():
        for seed in cfg["seeds"]:
            m = Model(f"{run}_s{seed}", "opamp", "base", method, values, run, seed)
            out[m.id] = m
    for study in studies(cfg):
        axis = "placements" in cfg[study]
        for entry, (values, entry_placements, ft) in study_entries(cfg, study).items():
            for run, (method, cell_values) in cells({entry: values}).items():
                for placement in entry_placements:
                    for seed in study_seeds(cfg, study):
                        name = f"{run}-{placement}" if axis else run
                        mid = f"{study}/{name}_s{seed}"
                        base = study_base(cfg, study)
                        out[mid] = Model(
                            mid, study, base, method, cell_values, run, seed, placement, entry, ft
                        )
    return out


def benchmarks(cfg: dict, study: str) -> dict[str, dict]:
    return cfg["benchmarks"] if study == "opamp" else cfg[study]["benchmarks"]


def opamp_splits(cfg: dict) -> list[tuple[str, str]]:
    return [(b, f"r{r:g}") for b, s in cfg["benchmarks"].items() for r in s["noise_ratios"]]


def study_splits(cfg: dict, study: str) -> list[tuple[str, str]]:
    """(benchmark, placement) eval sets of a side study; the leaderboard's are (benchmark,
    ``r<noise ratio>``): its common suite at every ratio of its noise axis."""
    block = cfg[study]
    if study == LEADERBOARD:
        return [(b, f"r{r:g}") for b in block["benchmarks"] for r in block["noise_ratios"]]
    return [(b, p) for b in block["benchmarks"] for p in placements(block)]


def robustness_splits(cfg: dict) -> list[tuple[str, str]]:
    """LKG-RALM's robustness sets (Fig. 6): ``n<k>``, k retrieved passages with the golden ones
    among them, and ``irr<share>``, that share of ``irrelevant.passages`` passages irrelevant."""
    rob = (study_cfg(cfg, LKG) or {}).get("robustness")
    if not rob:
        return []
    splits = [f"n{k}" for k in rob.get("passages", [])]
    splits += [f"irr{s:g}" for s in (rob.get("irrelevant") or {}).get("shares", [])]
    return [(rob["benchmark"], s) for s in splits]


def robustness_set(cfg: dict, split: str) -> dict:
    """The data settings of a robustness split: passages, and the irrelevant share."""
    if split.startswith("irr"):
        passages = cfg[LKG]["robustness"]["irrelevant"]["passages"]
        return {"passages": passages, "irrelevant": float(split[3:])}
    return {"passages": int(split[1:]), "irrelevant": 0.0}


def evaluations(cfg: dict) -> list[tuple[str, str, str]]:
    """Every (model id, benchmark, split) the grid evaluates."""
    out = [("base", b, s) for b, s in opamp_splits(cfg)]
    for study in studies(cfg):
        out += [(study_base(cfg, study), b, p) for b, p in study_splits(cfg, study)]
    robust_entries = ((study_cfg(cfg, LKG) or {}).get("robustness") or {}).get("models", [])
    for m in trained_models(cfg).values():
        if m.study == "opamp":
            out += [(m.id, b, s) for b, s in opamp_splits(cfg)]
        elif m.study == LEADERBOARD:
            out += [(m.id, b, s) for b, s in study_splits(cfg, LEADERBOARD)]
        else:
            out += [(m.id, b, m.placement) for b in cfg[m.study]["benchmarks"]]
        if m.study == LKG and m.entry in robust_entries:
            out += [(m.id, b, s) for b, s in robustness_splits(cfg)]
    return out


def study_of_benchmark(cfg: dict, benchmark: str) -> str:
    for study in studies(cfg):
        if benchmark in cfg[study]["benchmarks"]:
            return study
    return "opamp"


def cross_report_spec(cfg: dict) -> dict:
    """What the cross-method report reads of the config: the leaderboard's cells and settings,
    and every study's cells and blocks (the fidelity table, the diagnostics)."""
    block = study_cfg(cfg, LEADERBOARD) or {}
    trained = trained_models(cfg)
    cells = {
        m.id: {
            "study": m.study,
            "run": m.run,
            "entry": m.entry,
            "method": m.method,
            "values": m.values,
            "seed": m.seed,
            "placement": m.placement,
        }
        for m in trained.values()
    }
    return {
        "preset": cfg["preset"],
        "seeds": study_seeds(cfg, LEADERBOARD),
        "grid_seeds": cfg["seeds"],
        "leaderboard": {
            "cells": {k: v for k, v in cells.items() if v["study"] == LEADERBOARD},
            "benchmarks": block.get("benchmarks", {}),
            "noise_ratios": block.get("noise_ratios", []),
            "baseline": block.get("baseline"),
        },
        "benchmarks": cfg["benchmarks"],
        "studies": {s: cfg[s] for s in studies(cfg) if s != LEADERBOARD},
        "cells": cells,
        "bases": {s: study_base(cfg, s) for s in ["opamp", *studies(cfg)]},
    }


def cross_report_inputs(cfg: dict, out: str) -> dict[str, list[str]]:
    """The files the cross-method report reads, under the preset's output directory ``out``:
    every evaluation of the grid, and every model's golden share and answer gap (the attention
    job), retrieval-head scores and head patterns (when their studies run)."""
    models = [*base_models(cfg), *trained_models(cfg)]
    return {
        "evals": [f"{out}/eval/{m}/{b}/{s}.json" for m, b, s in evaluations(cfg)],
        "attention": [f"{out}/attention/{m}.json" for m in models],
        "heads": [f"{out}/analysis/retrieval_heads/{m}.json" for m in models]
        if study_cfg(cfg, MUDAF)
        else [],
        "patterns": [f"{out}/analysis/head_patterns/{m}.json" for m in models]
        if study_cfg(cfg, LKG)
        else [],
    }
