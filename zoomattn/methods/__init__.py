"""Method registry, one folder per method (as peft's tuners): ``config.py`` holds the typed config
(importable without torch, so the workflow parses fast) and ``model.py`` an ``attach(model, cfg)``
that hangs the method's attention module under ``self_attn.zoom`` of the layers it changes (see
``zoomattn.attention.interface``), and optionally an ``objective(cfg)``: a training term added to
the answer loss (MuDAF's contrastive loss), or one replacing the answer-loss step altogether
(``backward_batch``: LKG-RALM, whose estimator losses come from the answer's own forward), and a
``prepare_tokenizer(tok, cfg)`` adding the tokens its prompts use. The LoRA layers every method
shares come from ``zoomattn.modeling.loading``; a method may take some target modules over
(``lora_exclude``), or train every parameter of the unquantised base instead (a config with
``tuning: full``).

``cells()`` expands a ``methods:`` block into grid cells: an entry is named after its method, or
names it with ``method:``; a list under one of the method's sweep keys is a grid axis (several
lists: their product), and each value adds ``-<key><value>`` to the cell's name.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

from zoomattn.methods.lkg import LkgConfig
from zoomattn.methods.mudaf import MudafConfig
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

    def _model_module(self):
        return importlib.import_module(f"zoomattn.methods.{self.name}.model")

    def attach(self, model, cfg) -> None:
        """Hang the method's modules on ``model``, on the base's device in the stated dtype."""
        from zoomattn.placement import place_method_modules

        self._model_module().attach(model, cfg)
        place_method_modules(model)

    def objective(self, values: dict):
        """The method's extra training term, or None (the answer loss alone). An objective has
        ``qa_weight`` (the answer loss's factor) and ``backward(model, tok, records, seed, step,
        micro_batch_size) -> (weighted term, metrics)``: see ``training/finetune.py``."""
        make = getattr(self._model_module(), "objective", None)
        return None if make is None else make(self.make_config(values))

    def prepare_tokenizer(self, tok, values: dict) -> bool:
        """Let the method add tokens it renders prompts with (LKG-RALM's boundary markers);
        True when it did, so fine-tuning saves that tokenizer with the model."""
        prepare = getattr(self._model_module(), "prepare_tokenizer", None)
        if prepare is None:
            return False
        prepare(tok, self.make_config(values))
        return True

    def tuning(self, values: dict) -> str:
        """``lora`` (4-bit base + the shared LoRA) unless the config asks for ``full``."""
        return getattr(self.make_config(values), "tuning", "lora")

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
        if not hasattr(cfg, "resolved"):
            return dict(values)
        accepted = inspect.signature(cfg.resolved).parameters  # each method takes its own context
        return cfg.resolved(lora, **{k: v for k, v in context.items() if k in accepted})

    def lora_targets(self, targets) -> list[str]:
        return [t for t in targets if t not in self.lora_exclude]


METHODS: dict[str, Method] = {
    "qlora": Method("qlora", QLoRAConfig),
    "opamp": Method("opamp", OpAmpConfig, ("K",)),
    "rectify": Method("rectify", RectifyConfig, ("xi", "g"), ("q_proj",)),
    "mudaf": Method("mudaf", MudafConfig, ("heads", "selection")),
    "lkg": Method("lkg", LkgConfig, ("beta",)),
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
