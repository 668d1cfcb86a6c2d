"""An eval set's layout as a value, and its name: the only code that writes or reads split names.

A split names its set's directory (``data/eval/<benchmark>/<split>``) and its evaluation file
(``eval/<model>/<benchmark>/<split>.json``):

- ``vanilla`` / ``reverse``: the question after (vanilla) or before (reverse) the documents;
- ``r<noise ratio>`` (``r0``, ``r0.8``): that share of the documents noise (OpAmp, the leaderboard);
- ``n<k>`` (``n3``): k retrieved passages, the golden ones among them (LKG-RALM's Fig. 6a);
- ``irr<share>`` (``irr0.25``): that share of the passages irrelevant (LKG-RALM's Fig. 6b); how
  many passages there are is the study's setting, not part of the name.

Every split but a placement lays its documents out as ``vanilla``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from zoomattn.data.records import PLACEMENTS  # the question after / before the documents

# (name prefix, field, type, the regex of its value): r<noise ratio>, n<passages>, irr<share>
_FORMS = (
    ("r", "noise_ratio", float, r"[0-9.]+"),
    ("n", "passages", int, r"\d+"),
    ("irr", "irrelevant", float, r"[0-9.]+"),
)


@dataclass(frozen=True)
class Split:
    placement: str = "vanilla"
    noise_ratio: float | None = None
    passages: int | None = None  # an ``n<k>`` set's k, or the passages of an ``irr`` set
    irrelevant: float | None = None  # an ``irr<share>`` set's share of irrelevant passages

    def __post_init__(self):
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement {self.placement!r} is not one of {', '.join(PLACEMENTS)}")
        passage_set = self.passages is not None or self.irrelevant is not None
        layouts = (self.noise_ratio is not None) + passage_set
        if layouts > 1 or (layouts and self.placement != "vanilla"):
            raise ValueError(f"a split is a placement, a noise ratio or a passage set: {self!r}")
        for name, value in (
            ("noise ratio", self.noise_ratio),
            ("irrelevant share", self.irrelevant),
        ):
            written = None if value is None else f"{value:g}"  # as the split's name writes it
            if written is not None and ("e" in written or float(written) != value):
                raise ValueError(f"{name} {value} does not survive a split's name ({written})")

    def __str__(self) -> str:
        if self.noise_ratio is not None:
            return f"r{float(self.noise_ratio):g}"
        if self.irrelevant is not None:
            return f"irr{float(self.irrelevant):g}"
        if self.passages is not None:
            return f"n{self.passages}"
        return self.placement

    @classmethod
    def parse(cls, name: str) -> Split:
        """The split a name stands for, spelt exactly as ``str`` spells it (``r0.80`` is not a
        name: ``r0.8`` is). An ``irr`` name leaves ``passages`` unset: the study sets it."""
        if name in PLACEMENTS:
            return cls(placement=name)
        for prefix, field, kind, value in _FORMS:
            match = re.fullmatch(re.escape(prefix) + f"({value})", name)
            if match:
                try:
                    split = cls(**{field: kind(match.group(1))})
                except ValueError:
                    break
                if str(split) == name:
                    return split
                break
        raise ValueError(
            f"{name!r} is not a split name ({', '.join(PLACEMENTS)}, r<noise ratio>, n<passages> "
            "or irr<share>)"
        )

    def data_fields(self) -> dict:
        """What the split sets in a data job's spec: the placement, and the noise ratio or the
        passage count and irrelevant share (an ``n<k>`` set has none irrelevant)."""
        out = {"placement": self.placement}
        if self.noise_ratio is not None:
            out["noise_ratio"] = float(self.noise_ratio)
        if self.irrelevant is not None and self.passages is None:
            raise ValueError(f"split {self}: how many passages is the study's setting, not given")
        if self.passages is not None:
            out.update(passages=self.passages, irrelevant=float(self.irrelevant or 0.0))
        return out


# Snakemake's wildcard constraint of a split: every name ``Split.parse`` may accept
PATTERN = "|".join([*PLACEMENTS, *(re.escape(prefix) + value for prefix, _, _, value in _FORMS)])
