"""What a report reads: ``inputs`` maps a kind of metric file to the loaded JSON of its files.

Every study package's ``build_report(spec, inputs, out)`` takes this mapping and names the kinds
it reads in its ``KINDS``; the report stage (``zoomattn/stages/reports.py``) loads the files.
"""

from __future__ import annotations

KINDS = {
    "evals": "evaluation metric files (eval/<model>/<benchmark>/<split>.json)",
    "predictions": "the per-example scores beside each of the evals, in the same order (.jsonl)",
    "attention": "golden attention share and answer-token gap per model (attention/<model>.json)",
    "base_metrics": "the base model's metrics.json (one file)",
    "margin": "the base model's pre-softmax score margins (one file)",
    "heads": "retrieval-head scores per model (analysis/retrieval_heads/<model>.json)",
    "masking": "head-masking results per model (analysis/head_masking/<model>.json)",
    "selections": "MuDAF's selected target heads per cell",
    "patterns": "head attention patterns per model (analysis/head_patterns/<model>.json)",
    "train_metrics": "fine-tunes' metrics.json, each with its model id",
}


def only(inputs: dict[str, list], kind: str) -> dict:
    """The one file of a kind that has exactly one (the base's metrics, its margin)."""
    files = inputs.get(kind, [])
    if len(files) != 1:
        raise ValueError(f"the report reads one {kind} file, got {len(files)}")
    return files[0]
