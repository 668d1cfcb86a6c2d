"""Each study's slice of the cross-method report's spec, as the fidelity table and the claims read
it: its cells, its base, its config block, and the spec its own report would read."""

from __future__ import annotations

OPAMP = "opamp"
PAPERS = {OPAMP: "OpAmp", "rectification": "Rectification", "mudaf": "MuDAF", "lkg": "LKG-RALM"}


def cells_of(spec: dict, study: str) -> dict[str, dict]:
    return {m: c for m, c in (spec.get("cells") or {}).items() if c.get("study") == study}


def base_of(spec: dict, study: str) -> str:
    return (spec.get("bases") or {}).get(study, "base")


def block_of(spec: dict, study: str) -> dict | None:
    return ((spec.get("studies") or {}).get(study)) or None


def study_spec(spec: dict, study: str) -> dict:
    """The spec a study's own report reads: its block, its cells, its base."""
    out = {"preset": spec.get("preset"), study: block_of(spec, study), "base": base_of(spec, study)}
    out |= {"cells": cells_of(spec, study), "clipped_heads": spec.get("clipped_heads") or {}}
    return out


def evals_of(evals: list[dict], spec: dict, study: str, benchmarks: dict) -> list[dict]:
    models = {base_of(spec, study), *cells_of(spec, study)}
    return [e for e in evals if e["model"] in models and e["benchmark"] in benchmarks]


def number(v) -> float | None:
    """A config value as a float (K, ξ), None where it is not a number (``auto``)."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return None
