"""Loading, validating and hashing the workflow configuration.

``load_config`` validates config.yaml against ``workflow/schemas/config.schema.yaml`` (closed
objects, so a typo'd key fails), merges the chosen preset over the grid, checks what a schema
cannot, and returns the effective config. Every error names the offending key.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import jsonschema
import yaml

from zoomattn.cluster import with_defaults
from zoomattn.grid import LEADERBOARD, LKG, MUDAF, RECT, STUDIES, placements, study_entries
from zoomattn.methods import METHODS, cells, method_of

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
PACKAGE = Path(__file__).resolve().parent
GRID_KEYS = ("seeds", "methods", "benchmarks")


class ConfigError(ValueError):
    pass


def _key_path(path) -> str:
    out = "config"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def validate_schema(raw: dict, schema_path: Path = SCHEMA) -> None:
    validator = jsonschema.Draft202012Validator(yaml.safe_load(schema_path.read_text()))
    errors = sorted(
        validator.iter_errors(raw),
        key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))),
    )
    if errors:
        err = jsonschema.exceptions.best_match(errors)
        message = f"{_key_path(err.absolute_path)}: {err.message}"
        if _typed_value_given_as_string(validator, raw, err):
            message += f" ({COMMAND_LINE_STRINGS})"
        raise ConfigError(message)


COMMAND_LINE_STRINGS = (
    "values given with --config on the command line arrive as strings when nested; "
    "put them in a YAML file and pass --configfile FILE"
)


def _typed_value_given_as_string(validator, raw: dict, err) -> bool:
    """Whether the offending value is a string ('2', '0.5', 'true') whose typed reading would
    satisfy the schema there: what Snakemake's ``--config key={a: [2]}`` hands the Snakefile."""
    path = list(err.absolute_path)
    if not path or not isinstance(err.instance, str):
        return False
    for typed in _typed_readings(err.instance):
        fixed = copy.deepcopy(raw)
        node = fixed
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = typed
        if not any(
            list(e.absolute_path)[: len(path)] == path for e in validator.iter_errors(fixed)
        ):
            return True
    return False


def _typed_readings(text: str) -> list:
    readings = []
    try:
        readings.append(yaml.safe_load(text))
    except yaml.YAMLError:
        pass
    try:
        readings.append(float(text))  # YAML 1.1 reads 1e-4 (no dot) as a string
    except ValueError:
        pass
    return [r for r in readings if not isinstance(r, str)]


def load_config(raw: dict, schema_path: Path = SCHEMA) -> dict:
    """Validated, preset-merged effective config (the input dict is not modified)."""
    validate_schema(raw, schema_path)
    preset = raw["preset"]
    if preset not in raw["presets"]:
        raise ConfigError(f"config.preset: no preset named {preset!r} under config.presets")
    cfg = {k: copy.deepcopy(v) for k, v in raw.items() if k != "presets"}
    cfg.update(copy.deepcopy(raw["presets"][preset]))  # a preset's grid keys replace the default's
    if cfg["attention"]["benchmark"] not in cfg["benchmarks"]:
        raise ConfigError(
            f"config.attention.benchmark: {cfg['attention']['benchmark']!r} is not a "
            f"configured benchmark ({', '.join(cfg['benchmarks'])})"
        )
    _check_scale(cfg, f"config.presets.{preset}")
    _check_methods(cfg["methods"], "config.methods")
    for study in STUDIES:
        if cfg.get(study):
            _check_study(cfg, study)
    cfg["out"] = str(Path(cfg["results"]) / preset)
    return with_defaults(cfg)


def _check_methods(methods: dict, where: str) -> None:
    for name, values in methods.items():
        method = method_of(name, values)
        if method not in METHODS:
            raise ConfigError(f"{where}.{name}: no method {method!r} (known: {', '.join(METHODS)})")
        try:
            for _, cell_values in cells({name: values}).values():
                METHODS[method].make_config(cell_values)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}.{name}: {exc}") from exc


def _check_study(cfg: dict, study: str) -> None:
    """A side study's benchmarks have names of their own and match the scale of the base model."""
    block = cfg[study]
    where = f"config.{study}"
    entries = study_entries(cfg, study)
    _check_methods({e: values for e, (values, *_) in entries.items()}, f"{where}.methods")
    for entry, (_, entry_placements, _) in entries.items():
        if not set(entry_placements) <= set(placements(block)):
            raise ConfigError(
                f"{where}.methods.{entry}.placements: {entry_placements} is not a subset of the "
                f"study's placements {placements(block)}"
            )
    taken = dict.fromkeys(cfg["benchmarks"], "an OpAmp benchmark")
    for other in STUDIES[: STUDIES.index(study)]:
        taken.update(dict.fromkeys((cfg.get(other) or {}).get("benchmarks", {}), f"a {other} one"))
    for name, spec in block["benchmarks"].items():
        if name in taken:
            raise ConfigError(
                f"{where}.benchmarks.{name}: the name is already {taken[name]}; "
                "each benchmark name names one eval set"
            )
        if ("source" in spec) == is_synthetic(cfg):
            need = "a hub or local base model" if "source" in spec else "base_model.source pretrain"
            raise ConfigError(f"{where}.benchmarks.{name}: this kind of benchmark needs {need}")
    if ("n_train" in block["train"]) != is_synthetic(cfg):
        raise ConfigError(
            f"{where}.train: a pretrained-here base trains on n_train/mix (the synthetic world), "
            "a hub base on dataset builders"
        )
    if is_synthetic(cfg) and "distractors" not in block and study != LEADERBOARD:
        raise ConfigError(
            f"{where}.distractors: the synthetic world's sets need a number of hard distractors"
        )
    if "base_model" in block and is_synthetic(cfg):
        raise ConfigError(f"{where}.base_model: only hub or local base models differ per study")
    if not is_synthetic(cfg):
        named = [(f"benchmarks.{b}.source", s["source"]) for b, s in block["benchmarks"].items()]
        named += [(f"train.{b}", b) for b in block["train"]]
        _check_builders([(f"{study}.{key}", name) for key, name in named])
    for key in ("retrieval_heads", "head_patterns", "robustness"):  # masking uses retrieval_heads'
        benchmark = (block.get(key) or {}).get("benchmark")
        if benchmark is not None and benchmark not in block["benchmarks"]:
            raise ConfigError(
                f"{where}.{key}.benchmark: {benchmark!r} is not one of the study's "
                f"benchmarks ({', '.join(block['benchmarks'])})"
            )
    if study == LKG and block.get("robustness"):
        _check_robustness(cfg, block, entries, where)
    if study == LEADERBOARD:
        _check_leaderboard(cfg, entries, where)


def _check_leaderboard(cfg: dict, entries: dict, where: str) -> None:
    """A leaderboard entry reuses the analyses of its method's own study: MuDAF's heads come from
    the MuDAF study's retrieval-head scores of the base, LKG-RALM's fused heads from the LKG-RALM
    study's head patterns, ξ auto from the rectification study's score margin."""
    if cfg[LEADERBOARD]["baseline"] not in entries:
        raise ConfigError(
            f"{where}.baseline: {cfg[LEADERBOARD]['baseline']!r} is not an entry of "
            f"{where}.methods ({', '.join(entries)})"
        )
    needs = {"mudaf": MUDAF, "lkg": LKG}
    for entry, (values, _, finetune) in entries.items():
        if set(finetune) - {"lr"}:
            raise ConfigError(
                f"{where}.methods.{entry}.finetune: only lr may differ per entry; the budget "
                f"({', '.join(sorted(set(finetune) - {'lr'}))}) is the study's, one for all"
            )
        runs = cells({entry: values})
        if len(runs) > 1:
            raise ConfigError(
                f"{where}.methods.{entry}: a leaderboard entry is one setting, not a sweep "
                f"({len(runs)} cells)"
            )
        for run, (method, cell_values) in runs.items():
            study = needs.get(method)
            if method == "mudaf" and not cell_values.get("heads"):
                study = None  # Vanilla SFT: no heads to select
            if cell_values.get("xi") == "auto":
                study = RECT
            if study and not cfg.get(study):
                raise ConfigError(
                    f"{where}.methods.{entry}: {run} needs the {study} study in the grid "
                    f"(config.{study} is null)"
                )


def _check_robustness(cfg: dict, block: dict, entries: dict, where: str) -> None:
    rob = block["robustness"]
    unknown = [m for m in rob["models"] if m not in entries]
    if unknown:
        raise ConfigError(
            f"{where}.robustness.models: {unknown[0]!r} is not an entry of {where}.methods "
            f"({', '.join(entries)})"
        )
    spec = block["benchmarks"][rob["benchmark"]]
    if not is_synthetic(cfg) and not spec["source"].startswith("lkg_"):
        raise ConfigError(
            f"{where}.robustness.benchmark: {rob['benchmark']!r} reads {spec['source']!r}; the "
            "passage-count and irrelevant-share sets need an lkg_* builder (retrieved passages)"
        )
    if not rob.get("passages") and not (rob.get("irrelevant") or {}).get("shares"):
        raise ConfigError(f"{where}.robustness: give passages, irrelevant.shares or both")


def _check_builders(named: list[tuple[str, str]]) -> None:
    """Each (config key, builder name) names a registered dataset builder."""
    from zoomattn.data.sources import BUILDERS

    for key, name in named:
        if name not in BUILDERS:
            raise ConfigError(
                f"config.{key}: no dataset builder {name!r} (known: {', '.join(sorted(BUILDERS))})"
            )


ARCHITECTURE_KEYS = ("hidden", "layers", "heads", "kv_heads", "intermediate", "max_positions")


def is_synthetic(cfg: dict) -> bool:
    """The tiny/smoke scale: a world, a tokenizer and a base model the workflow makes itself."""
    return cfg["base_model"]["source"] == "pretrain"


def _check_scale(cfg: dict, where: str) -> None:
    """A pretrained-here base reads the synthetic world; a hub base reads real datasets."""
    m = cfg["base_model"]
    if is_synthetic(cfg):
        missing = [k for k in ARCHITECTURE_KEYS if k not in m]
        if missing:
            raise ConfigError(f"{where}.base_model: source pretrain needs {', '.join(missing)}")
        if "pretrain" not in cfg:
            raise ConfigError(f"{where}: base_model.source is pretrain but there is no pretrain:")
        if "train" in cfg["data"]:
            raise ConfigError(f"{where}.data.train: real datasets need a hub or local base model")
        real = [b for b, spec in cfg["benchmarks"].items() if "source" in spec]
        if real:
            raise ConfigError(
                f"config.benchmarks.{real[0]}: a real dataset needs a hub or local base model "
                "(base_model.source is pretrain)"
            )
    else:
        if "train" not in cfg["data"]:
            raise ConfigError(f"{where}.data: a hub base model trains on real datasets: data.train")
        synthetic = [b for b, spec in cfg["benchmarks"].items() if "family" in spec]
        if synthetic:
            raise ConfigError(
                f"config.benchmarks.{synthetic[0]}: a synthetic family needs base_model.source "
                "pretrain (the world's tokenizer)"
            )
        named = [(f"benchmarks.{b}.source", s["source"]) for b, s in cfg["benchmarks"].items()]
        named += [(f"{where[len('config.') :]}.data.train.{b}", b) for b in cfg["data"]["train"]]
        _check_builders(named)
    if {"heads", "kv_heads", "hidden"} <= set(m) and (
        m["heads"] % m["kv_heads"] or m["hidden"] % m["heads"]
    ):
        raise ConfigError(
            f"{where}.base_model: heads must divide hidden and kv_heads must divide heads"
        )


def read_yaml(path: str | Path) -> dict:
    """A config file's mapping; a missing file or a YAML error is a ConfigError naming the file
    (and the line and column: Snakemake's own message names neither)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}, {_yaml_problem(exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the top level must be a mapping of config keys, not a list or value"
        )
    return data


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """'line L, column C: what is wrong (while parsing X that started at line L', column C')'."""
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return f"not valid YAML: {exc}"
    out = f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    context, start = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and start is not None and (start.line, start.column) != (mark.line, mark.column):
        out += f" ({context} that started at line {start.line + 1}, column {start.column + 1})"
    elif context:
        out += f" ({context})"
    return out


def merge_configs(base: dict, over: dict) -> dict:
    """Snakemake's --configfile semantics: nested keys of ``over`` replace those of ``base``."""
    out = dict(base)
    for key, value in over.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merge_configs(out[key], value) if both else value
    return out


def read_configs(paths: list[str | Path], preset: str | None = None) -> dict:
    """The raw config of a run: the first file (config.yaml), each later one over it as
    ``snakemake --configfile`` merges them, then ``preset`` as ``--config preset=NAME`` sets it."""
    raw: dict = {}
    for path in paths:
        raw = merge_configs(raw, read_yaml(path))
    if preset is not None:
        raw["preset"] = preset
    return raw


def read_config(path: str | Path) -> dict:
    return load_config(read_yaml(path))


def stable_hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def config_hash(cfg: dict) -> str:
    return stable_hash(cfg)


# Source files whose change must rerun a stage: everything a stage imports from the package.
# Method modules are added per cell, so editing one method reruns only that method's jobs.
CODE_GROUPS = {
    "data": ["io.py", "data/*.py", "stages/data.py"],
    "sources": ["io.py", "data/*.py", "data/sources/*.py", "stages/data.py"],
    "base": ["io.py", "modeling/hub.py", "modeling/chat.py"],
    "pretrain": [
        "io.py",
        "data/*.py",
        "training/batching.py",
        "training/checkpoint.py",
        "modeling/loading.py",
        "modeling/pretrain.py",
        "placement.py",
        "stages/common.py",
        "stages/models.py",
    ],
    "finetune": [
        "io.py",
        "data/*.py",
        "training/*.py",
        "modeling/*.py",
        "attention/*.py",
        "methods/*.py",
        "placement.py",
        "stages/common.py",
        "stages/models.py",
    ],
    "evaluate": [
        "io.py",
        "data/*.py",
        "training/batching.py",
        "modeling/loading.py",
        "modeling/hub.py",
        "modeling/chat.py",
        "modeling/boundary.py",
        "attention/*.py",
        "methods/*.py",
        "placement.py",
        "evaluation/*.py",
        "stages/common.py",
        "stages/analysis.py",
    ],
    "select": ["io.py", "methods/*.py", "stages/models.py"],
    "report": ["io.py", "reporting/*.py", "stages/reports.py"],
}


def code_hash(group: str, method: str | None = None) -> str:
    files = sorted({f for pattern in CODE_GROUPS[group] for f in PACKAGE.glob(pattern)})
    if method is not None:
        files += sorted(METHODS[method].folder.glob("*.py"))
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(PACKAGE).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]
