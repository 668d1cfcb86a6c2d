from __future__ import annotations

from dataclasses import dataclass

SELECTIONS = ("weighted", "top", "weak")
TUNINGS = ("full", "lora")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


@dataclass(frozen=True)
class MudafConfig:
    """MuDAF (docs/papers.md §3): CLM plus a contrastive loss on the attention of chosen heads.

    ``heads`` target heads (0: Vanilla-SFT, no contrastive term) are chosen by their retrieval
    score (``selection``: ``weighted`` = the paper's weighted random draw with ``temperature``,
    ``top`` = the n best, ``weak`` = random among heads scoring below ``weak_below``); the workflow
    measures the scores on the base, draws the heads and hands them to ``resolved``, which stores
    them as ``selected`` (``[layer, head]`` pairs). Loss ``alpha·L_cl + (1 − alpha)·L_qa`` with
    InfoNCE at temperature ``tau`` over one golden passage and up to ``negatives`` others.
    ``tuning``: ``full`` trains every parameter of the unquantised base (the paper); ``lora`` the
    shared 4-bit LoRA setting of the other methods.
    """

    heads: int = 8
    selection: str = "weighted"
    temperature: float = 0.05
    weak_below: float = 0.1
    alpha: float = 0.7
    tau: float = 0.05
    negatives: int = 10
    tuning: str = "full"
    selected: list | None = None

    def __post_init__(self):
        if not (_is_int(self.heads) and self.heads >= 0):
            raise ValueError(f"heads: an integer ≥ 0, got {self.heads!r}")
        if self.selection not in SELECTIONS:
            raise ValueError(
                f"selection: unknown strategy {self.selection!r} (known: {', '.join(SELECTIONS)})"
            )
        if not (_is_number(self.temperature) and self.temperature > 0):
            raise ValueError(f"temperature: a number > 0, got {self.temperature!r}")
        if not _is_number(self.weak_below):
            raise ValueError(f"weak_below: a number, got {self.weak_below!r}")
        if not (_is_number(self.alpha) and 0 <= self.alpha <= 1):
            raise ValueError(f"alpha: a number in [0, 1], got {self.alpha!r}")
        if not (_is_number(self.tau) and self.tau > 0):
            raise ValueError(f"tau: a number > 0, got {self.tau!r}")
        if not (_is_int(self.negatives) and self.negatives >= 1):
            raise ValueError(f"negatives: an integer ≥ 1, got {self.negatives!r}")
        if self.tuning not in TUNINGS:
            raise ValueError(f"tuning: {self.tuning!r} is not one of {', '.join(TUNINGS)}")
        if self.selected is not None:
            _check_selected(self.selected, self.heads)

    def resolved(self, lora: dict, selected_heads=None) -> dict:
        """The values a model is built and saved with: the chosen heads filled in (none at
        ``heads: 0``). ``selected_heads`` comes from the workflow's head selection; a config that
        already holds ``selected`` (a saved model's) keeps it."""
        if self.heads == 0:
            selected = []
        elif selected_heads is not None:
            selected = [[int(layer), int(head)] for layer, head in selected_heads]
        elif self.selected is not None:
            selected = [list(pair) for pair in self.selected]
        else:
            raise ValueError(
                f"selected: heads = {self.heads} needs the chosen heads (selected_heads, from the "
                "retrieval scores of the base model); none were given"
            )
        _check_selected(selected, self.heads)
        if self.heads and not selected:
            raise ValueError(
                f"selected: heads = {self.heads} but no head was chosen (selection "
                f"{self.selection!r}: no head qualifies)"
            )
        return {
            "heads": self.heads,
            "selection": self.selection,
            "temperature": float(self.temperature),
            "weak_below": float(self.weak_below),
            "alpha": float(self.alpha),
            "tau": float(self.tau),
            "negatives": self.negatives,
            "tuning": self.tuning,
            "selected": selected,
        }


def _check_selected(selected, heads: int) -> None:
    pairs = list(selected) if isinstance(selected, list | tuple) else None
    if pairs is None or not all(
        isinstance(p, list | tuple) and len(p) == 2 and all(_is_int(x) and x >= 0 for x in p)
        for p in pairs
    ):
        raise ValueError(
            f"selected: a list of [layer, head] pairs of integers ≥ 0, got {selected!r}"
        )
    if len({tuple(p) for p in pairs}) != len(pairs):
        raise ValueError(f"selected: a head is listed twice in {selected!r}")
    if len(pairs) > heads:
        raise ValueError(f"selected: {len(pairs)} heads for heads = {heads}")
