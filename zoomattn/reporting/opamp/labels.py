"""The OpAmp report's rows, named from the cells of its spec (model id -> {"run", "method",
"values", "seed"}): a model is labelled by its cell's method and values, never by its id.

Rows come in the paper's order: the base model, QLoRA, any other method (by its run name), then
OpAmp by K. A label already taken (two entries with the same K) gets its run name appended.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

BASE = "base (no fine-tune)"
QLORA = "QLoRA"
KIND_ORDER = ("base", "qlora", "other", "opamp")


@dataclass(frozen=True)
class Row:
    label: str
    kind: str  # "base", "qlora", "opamp" or "other" (a method this report has no name for)
    models: tuple[str, ...]  # its model ids, one per seed
    k: float | None = None  # OpAmp's K (inf: the differential limit)


def k_value(k) -> float:
    """K as configured (10, 2.5, "inf" or inf) as a number."""
    return math.inf if k == "inf" else float(k)


def k_label(k) -> str:
    """The paper's row name of a configured K: K=10, K=2.5, K=∞."""
    if math.isinf(k_value(k)):
        return "K=∞"
    return f"K={k:g}" if isinstance(k, float) else f"K={k}"


def _named(run: str, cell: dict) -> tuple[str, str, float | None]:
    """(kind, label, K) of a run from its cell."""
    if cell["method"] == "qlora":
        return "qlora", QLORA, None
    if cell["method"] == "opamp":
        k = (cell.get("values") or {}).get("K")
        if k is None:
            raise ValueError(f"OpAmp report: the cell of run {run!r} has no K")
        return "opamp", k_label(k), k_value(k)
    return "other", run, None


def rows(cells: dict[str, dict], base: str = "base") -> list[Row]:
    """The base's row, then one row per run of ``cells`` in the paper's order."""
    models: dict[str, list[str]] = {}
    first: dict[str, dict] = {}
    for model, cell in cells.items():
        models.setdefault(cell["run"], []).append(model)
        first.setdefault(cell["run"], cell)
    named = sorted(
        ((*_named(run, cell), run) for run, cell in first.items()),
        key=lambda n: (KIND_ORDER.index(n[0]), -math.inf if n[2] is None else n[2], n[3]),
    )
    out, taken = [Row(BASE, "base", (base,))], {BASE}
    for kind, label, k, run in named:
        label = label if label not in taken else f"{label} ({run})"
        taken.add(label)
        out.append(Row(label, kind, tuple(models[run]), k))
    return out


def label_of(rows: list[Row]) -> dict[str, str]:
    """Model id -> its row's label."""
    return {model: r.label for r in rows for model in r.models}
