"""Loading, validating and hashing the workflow configuration.

``load_config`` validates config.yaml against ``workflow/schemas/config.schema.yaml`` (closed
objects, so a typo'd key fails), merges the chosen preset over the grid, checks what a schema
cannot (zoomattn/config_checks.py), and returns the effective config. Every error names the
offending key.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import jsonschema
import yaml

from zoomattn.cluster import with_defaults
from zoomattn.config_checks import ConfigError, check_config, check_shape

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


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
    """Validated, preset-merged effective config (the input dict is not modified). A preset with
    ``protocols`` has the overlay its ``protocol`` names merged into it first; the effective config
    keeps the name as ``protocol``."""
    check_shape(raw)
    validate_schema(raw, schema_path)
    preset = raw["preset"]
    if preset not in raw["presets"]:
        raise ConfigError(f"config.preset: no preset named {preset!r} under config.presets")
    over = with_protocol(raw, preset, schema_path)
    cfg = {k: copy.deepcopy(v) for k, v in raw.items() if k != "presets"}
    # a preset's study block replaces the grid's block of that study whole; its other keys
    # replace the grid's keys of the same name
    cfg["studies"].update(over.pop("studies", {}))
    cfg.update(over)
    check_config(cfg, f"config.presets.{preset}")
    cfg["out"] = str(Path(cfg["results"]) / preset)
    return with_defaults(cfg)


def with_protocol(raw: dict, preset: str, schema_path: Path = SCHEMA) -> dict:
    """A copy of the preset with its chosen protocol's overlay merged in (``merge_configs``). Every
    overlay is validated as part of its preset, so a typo in the one not chosen fails too."""
    block = copy.deepcopy(raw["presets"][preset])
    where = f"config.presets.{preset}"
    name, overlays = block.pop("protocol", None), block.pop("protocols", None)
    if overlays is None:
        if name is not None:
            raise ConfigError(
                f"{where}.protocol: {name!r} chosen, but {where}.protocols is not set"
            )
        return block
    if name not in overlays:
        raise ConfigError(
            f"{where}.protocol: {'no protocol chosen' if name is None else repr(name)}; "
            f"choose one of {where}.protocols: {', '.join(sorted(overlays))}"
        )
    merged = {}
    for each, overlay in overlays.items():
        merged[each] = merge_configs(block, overlay)
        trial = {**raw, "presets": {**raw["presets"], preset: merged[each]}}
        try:
            validate_schema(trial, schema_path)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (with {where}.protocols.{each} merged in)") from None
    return {**merged[name], "protocol": name}


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


# Re-exported for callers of the old home; zoomattn/code_hash.py derives each job's code.
from zoomattn.code_hash import code_hash  # noqa: E402, F401
