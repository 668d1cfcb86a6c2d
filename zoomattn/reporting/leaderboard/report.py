"""The cross-method report: the leaderboard, the fidelity table with the papers' claims, and the
attention diagnostics of every model, from the metric files alone (no model is loaded).

``build_cross_report`` is what the ``leaderboard_report`` job runs and what
``python -m zoomattn regenerate`` runs on an existing results directory.
"""

from __future__ import annotations

import json
from pathlib import Path

from zoomattn.io import read_json
from zoomattn.reporting.leaderboard.diagnostics import build_diagnostics
from zoomattn.reporting.leaderboard.fidelity import write_fidelity
from zoomattn.reporting.leaderboard.table import entry_label, write_leaderboard
from zoomattn.reporting.opamp import model_label

LEADERBOARD = "leaderboard"


def read_predictions(metrics_file: Path) -> dict[str, float]:
    """Example id -> score, from the ``.predictions.jsonl`` beside an eval metric file."""
    path = Path(metrics_file).with_suffix(".predictions.jsonl")
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {r["id"]: float(r["score"]) for r in rows}


def model_labels(spec: dict) -> dict[str, dict]:
    """Every model of the grid -> its study, display label and seed (the diagnostics' rows)."""
    out = {
        base: {"study": "base", "label": base, "seed": None} for base in set(spec["bases"].values())
    }
    for model, cell in spec["cells"].items():
        if cell["study"] == LEADERBOARD:
            label = entry_label(cell["method"], cell["values"])
        elif cell["study"] == "opamp":
            label = model_label(model)
        else:
            label = cell["run"] + (
                f" {cell['placement']}" if cell["placement"] != "vanilla" else ""
            )
        out[model] = {"study": cell["study"], "label": label, "seed": cell["seed"]}
    return out


def _present(paths: list[Path]) -> list[dict]:
    return [read_json(p) for p in paths if Path(p).exists()]


def build_cross_report(
    spec: dict,
    eval_files: list[Path],
    attention_files: list[Path],
    heads_files: list[Path],
    patterns_files: list[Path],
    out: Path,
    commit: str,
) -> None:
    # the job's spec arrives as sorted JSON: regenerate's gets the same key order, so same files
    spec = json.loads(json.dumps(spec, sort_keys=True))
    evals = [read_json(p) for p in eval_files]
    predictions = {
        (e["model"], e["benchmark"], e["split"]): read_predictions(p)
        for e, p in zip(evals, eval_files, strict=True)
    }
    board = spec["leaderboard"]
    if board["cells"]:
        ours = {k: v for k, v in predictions.items() if k[0] in board["cells"]}
        table = write_leaderboard(board, ours, out)
    else:
        table = None
    write_fidelity(spec, evals, predictions, out)
    build_diagnostics(
        model_labels(spec),
        _present(attention_files),
        evals,
        _present(heads_files),
        _present(patterns_files),
        out,
    )
    lines = [
        f"# Cross-method report (preset {spec['preset']}, commit {commit})",
        "",
        f"Leaderboard seeds {spec['seeds']}; the ablation studies' seeds {spec['grid_seeds']}.",
        "Intervals: 95% bootstrap over seeds and examples; ↑/↓: the paired difference from the "
        f"baseline ({board.get('baseline')}) excludes 0; **bold**: not significantly below the "
        "column's best.",
        "",
    ]
    if table is not None:
        lines += ["## Leaderboard", "", table.to_markdown(index=False), ""]
    lines += ["Files: leaderboard.*, fidelity.*, claims.*, diagnostics.*, diag_*.png", ""]
    (out / "README.md").write_text("\n".join(lines))
