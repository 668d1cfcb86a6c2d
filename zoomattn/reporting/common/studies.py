"""The studies in the order every report lists them, and the colour each is drawn in."""

from __future__ import annotations

STUDY_ORDER = ("base", "opamp", "rectification", "mudaf", "lkg", "leaderboard")
STUDY_COLOURS = {"base": "grey", "opamp": "C0", "rectification": "C1", "mudaf": "C2"}
STUDY_COLOURS |= {"lkg": "C3", "leaderboard": "C4"}
OTHER_COLOUR = "C5"  # a study this list does not know


def study_rank(study: str) -> int:
    """A study's place in ``STUDY_ORDER``; unknown studies after every known one."""
    return STUDY_ORDER.index(study) if study in STUDY_ORDER else len(STUDY_ORDER)


def study_colour(study: str) -> str:
    return STUDY_COLOURS.get(study, OTHER_COLOUR)
