"""Method registry, one folder per method (as peft's tuners): ``config.py`` holds the typed config
(importable without torch, so the workflow parses fast) and ``model.py`` an ``attach(model, cfg)``
that hangs the method's attention module under ``self_attn.zoom`` of the layers it changes (see
``zoomattn.attention.interface``). The LoRA layers every method shares come from
``zoomattn.modeling.loading``. ``cells()`` expands a method's sweep key into grid cells.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from dataclasses import dataclass
from pathlib import Path

from zoomattn.methods.opamp import OpAmpConfig
from zoomattn.methods.qlora import QLoRAConfig

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Method:
    name: str
    config_cls: type
    sweep: str | None  # the config key whose list of values is a grid axis, if any

    @property
    def folder(self) -> Path:
        return HERE / self.name

    def attach(self, model, cfg) -> None:
        importlib.import_module(f"zoomattn.methods.{self.name}.model").attach(model, cfg)

    def make_config(self, values: dict):
        names = {f.name for f in dataclasses.fields(self.config_cls)}
        unknown = set(values) - names
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")
        values = {k: math.inf if v == "inf" else v for k, v in values.items()}
        return self.config_cls(**values)


METHODS: dict[str, Method] = {
    "qlora": Method("qlora", QLoRAConfig, None),
    "opamp": Method("opamp", OpAmpConfig, "K"),
}


def _value_name(v) -> str:
    if v == "inf" or (isinstance(v, float) and math.isinf(v)):
        return "inf"
    return f"{v:g}" if isinstance(v, float) else str(v)


def cells(methods_cfg: dict) -> dict[str, tuple[str, dict]]:
    """Grid cells of the configured methods: run name -> (method name, config values)."""
    out = {}
    for name, values in methods_cfg.items():
        method = METHODS[name]
        values = dict(values or {})
        sweep = values.pop(method.sweep, None) if method.sweep else None
        if sweep is None:
            out[name] = (name, values)
            continue
        for v in sweep:
            out[f"{name}-{method.sweep}{_value_name(v)}"] = (name, {**values, method.sweep: v})
    return out
