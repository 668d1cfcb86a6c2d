"""The method protocol: what a method declares and implements to plug into the workflow.

A method is one folder under ``zoomattn/methods/`` (as peft's tuners): ``config.py`` holds its
typed config (a frozen dataclass, importable without torch: the workflow parses configs fast),
``model.py`` the modules ``build`` hangs on a model, ``kernel.py`` the attention math the method
owns, and ``objective.py`` its training step where it has one. Its ``__init__.py`` subclasses
``Method``, implementing every hook, and registers it (``registry.register``); the registry finds
the folder by itself, so a new method is one new folder.

The typed config is made once per job from the spec's values (``make_config``) and handed to the
hooks. Only ``resolve`` sees the values as written: it turns them into the values the model is
built and saved with (``method.json``), from which that config is made.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class ResolveContext:
    """What the workflow measured on the base before fine-tuning, for the methods that fill their
    config in from it; each method reads what it needs, None where it was not measured."""

    tokenizer: Any = None  # the base's: LKG-RALM adds its boundary tokens and records their ids
    xi_auto: float | None = None  # rectification's ξ for ``xi: auto`` (the base's score margin)
    selected_heads: list | None = None  # MuDAF's target heads, drawn from retrieval scores
    middle_heads: list | None = None  # the base's middle-focused heads (head patterns)


def micro_batch_starts(n: int, micro_batch_size: int, rank: int = 0, world_size: int = 1) -> range:
    """Where this process's micro-batches start among ``n`` items: micro-batch i runs on process
    i mod ``world_size`` (one process: every micro-batch)."""
    return range(rank * micro_batch_size, n, micro_batch_size * world_size)


def _unchanged(values: list[float]) -> list[float]:
    return values


@dataclass(frozen=True)
class StepBatch:
    """One optimiser step's batch, as an objective receives it.

    Under data parallelism (``training/distributed.py``) every process holds the whole batch, so
    the counts an objective normalises by (answer tokens, contrastive rows) are the whole
    batch's with no communication, but runs forward and backward only on its own micro-batches
    (``micro_batches``); fine-tuning sums the gradients over the processes. An objective returns
    the whole batch's metrics: it adds up its partial sums with ``sum_over_ranks``.
    """

    records: list[dict]  # the records, documents and golden passages included
    examples: list[dict]  # their encoded training examples, in the same order
    pad_id: int
    micro_batch_size: int  # examples per forward; the gradient is the whole batch's
    seed: int  # the cell's seed: with ``step``, what an objective may draw from
    step: int
    rank: int = 0  # this process among the data-parallel ones
    world_size: int = 1
    sum_over_ranks: Callable[[list[float]], list[float]] = _unchanged  # each value's sum

    def micro_batches(self, n: int | None = None) -> range:
        """Start indices of this process's micro-batches among ``n`` items (default: the
        batch's examples)."""
        n = len(self.examples) if n is None else n
        return micro_batch_starts(n, self.micro_batch_size, self.rank, self.world_size)

    @property
    def one_pass(self) -> bool:
        """The whole batch in one forward on one process (no accumulation, no sharing)."""
        return self.world_size == 1 and self.micro_batch_size >= len(self.examples)


@runtime_checkable
class Objective(Protocol):
    """One training step of a method, the only step API fine-tuning calls."""

    def step(self, model, tok, batch: StepBatch) -> dict[str, float]:
        """Accumulate the gradient of the batch's whole loss (backward done, over micro-batches)
        and return the step's metrics, ``train_loss`` and ``qa_loss`` among them."""
        ...


class Method(ABC):
    """A registered method: its declarations, the hooks it implements, and the shared helpers."""

    name: ClassVar[str]  # the registry name, which is also the folder's
    config_cls: ClassVar[type]  # the typed config (a dataclass)
    sweep: ClassVar[tuple[str, ...]] = ()  # config keys whose list of values is a grid axis
    lora_exclude: ClassVar[tuple[str, ...]] = ()  # shared LoRA target modules the method replaces

    @abstractmethod
    def build(self, model, cfg) -> None:
        """Hang the method's modules on ``model`` (``self_attn.zoom`` of the layers it changes,
        see ``zoomattn.attention.interface``); nothing for a method that changes no attention."""

    @abstractmethod
    def objective(self, cfg) -> Objective | None:
        """The method's training step, or None: the answer loss alone."""

    @abstractmethod
    def prepare_tokenizer(self, tok, cfg) -> bool:
        """Add the tokens the method renders prompts with; True when it did (fine-tuning then
        saves that tokenizer with the model)."""

    @abstractmethod
    def resolve(self, values: dict, lora: dict, context: ResolveContext) -> dict:
        """The values a model is built and saved with, from the spec's values as written (a
        method may fill in shared LoRA settings or what the workflow measured on the base)."""

    @abstractmethod
    def tuning(self, cfg) -> str:
        """``lora`` (the 4-bit base + the shared LoRA) or ``full`` (every parameter of the
        unquantised base)."""

    @property
    def folder(self) -> Path:
        return HERE / self.name

    def make_config(self, values: dict):
        """The typed config of the values; an unknown key is an error naming it."""
        names = {f.name for f in dataclasses.fields(self.config_cls)}
        unknown = set(values) - names
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")
        values = {k: math.inf if v == "inf" else v for k, v in values.items()}
        return self.config_cls(**values)

    def attach(self, model, cfg) -> None:
        """``build``, then move the method's modules to the base's device, in the stated dtype."""
        from zoomattn.placement import place_method_modules

        self.build(model, cfg)
        place_method_modules(model)

    def lora_targets(self, targets) -> list[str]:
        return [t for t in targets if t not in self.lora_exclude]
