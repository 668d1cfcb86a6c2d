"""Method registry, one folder per method (as peft's tuners): ``config.py`` holds the typed config
(importable without torch, so the workflow parses fast) and ``model.py`` an ``attach(model, cfg)``
that hangs the method's attention module under ``self_attn.zoom`` of the layers it changes (see
``zoomattn.attention.interface``). The LoRA layers every method shares come from
``zoomattn.modeling.loading``; a method may take some target modules over (``lora_exclude``).

``cells()`` expands a ``methods:`` block into grid cells: an entry is named after its method, or
names it with ``method:``; a list under one of the method's sweep keys is a grid axis (several
lists: their product), and each value adds ``-<key><value>`` to the cell's name.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

from zoomattn.methods.opamp import OpAmpConfig
from zoomattn.methods.qlora import QLoRAConfig
from zoomattn.methods.rectify import RectifyConfig

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Method:
    name: str
    config_cls: type
    sweep: tuple[str, ...] = ()  # config keys whose list of values is a grid axis
    lora_exclude: tuple[str, ...] = ()  # shared LoRA target modules the method replaces

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

    def resolve(self, values: dict, lora: dict, **context) -> dict:
        """The values a model is built and saved with (a method may fill in shared settings)."""
        cfg = self.make_config(values)
        return cfg.resolved(lora, **context) if hasattr(cfg, "resolved") else dict(values)

    def lora_targets(self, targets) -> list[str]:
        return [t for t in targets if t not in self.lora_exclude]


METHODS: dict[str, Method] = {
    "qlora": Method("qlora", QLoRAConfig),
    "opamp": Method("opamp", OpAmpConfig, ("K",)),
    "rectify": Method("rectify", RectifyConfig, ("xi", "g"), ("q_proj",)),
}


def _value_name(v) -> str:
    if v == "inf" or (isinstance(v, float) and math.isinf(v)):
        return "inf"
    return f"{v:g}" if isinstance(v, float) else str(v)


def method_of(entry: str, values: dict | None) -> str:
    """The registry name of a ``methods:`` entry (its ``method:`` key, else its own name)."""
    return (values or {}).get("method", entry)


def cells(methods_cfg: dict) -> dict[str, tuple[str, dict]]:
    """Grid cells of a ``methods:`` block: run name -> (method name, config values)."""
    out = {}
    for entry, values in methods_cfg.items():
        values = dict(values or {})
        method = METHODS[values.pop("method", entry)]
        axes = [k for k in method.sweep if isinstance(values.get(k), list)]
        for combo in itertools.product(*(values[k] for k in axes)):
            name = entry + "".join(
                f"-{k}{_value_name(v)}" for k, v in zip(axes, combo, strict=True)
            )
            out[name] = (method.name, {**values, **dict(zip(axes, combo, strict=True))})
    return out
