"""The method registry, and the grid cells of a ``methods:`` block.

Every package under ``zoomattn/methods/`` is a method folder: ``discover`` imports each one, and
its ``__init__.py`` registers its ``Method`` (``@register``). ``cells()`` expands a ``methods:``
block into grid cells: an entry is named after its method, or names it with ``method:``; a list
under one of the method's sweep keys is a grid axis (several lists: their product), and each
value adds ``-<key><value>`` to the cell's name.
"""

from __future__ import annotations

import importlib
import itertools
import math

from zoomattn.methods.protocol import HERE, Method

METHODS: dict[str, Method] = {}


def register(cls: type[Method]) -> type[Method]:
    """Class decorator: add a method to the registry under its name, which must be its folder's.
    A method that leaves a hook out is refused, naming the hooks."""
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        raise TypeError(f"register: {cls!r} is not a Method subclass")
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        raise TypeError(f"method {cls.__name__}: hooks not implemented: {', '.join(missing)}")
    folder = f"{__package__}.{cls.name}"
    if cls.__module__ != folder and not cls.__module__.startswith(folder + "."):
        raise ValueError(
            f"method {cls.name!r}: registered from {cls.__module__}, outside its folder {folder}"
        )
    if cls.name in METHODS:
        raise ValueError(f"method {cls.name!r}: registered twice")
    METHODS[cls.name] = cls()
    return cls


def discover() -> None:
    """Import every method folder (a package under zoomattn/methods/), in name order."""
    for path in sorted(HERE.iterdir()):
        if (path / "__init__.py").is_file():
            importlib.import_module(f"{__package__}.{path.name}")


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
