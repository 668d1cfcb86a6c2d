"""The cross-method report: the leaderboard, the fidelity table with the papers' claims, and the
attention diagnostics of every model, from the metric files alone (no model is loaded).

``build_report`` is what the leaderboard's ``report`` job runs and what
``python -m zoomattn regenerate`` runs on an existing results directory.
"""

from __future__ import annotations

import json
from pathlib import Path

from zoomattn.reporting import opamp
from zoomattn.reporting.leaderboard.diagnostics import build_diagnostics
from zoomattn.reporting.leaderboard.fidelity import write_fidelity
from zoomattn.reporting.leaderboard.slices import OPAMP, base_of, cells_of
from zoomattn.reporting.leaderboard.table import entry_label, write_leaderboard
from zoomattn.tracking import git_commit

KINDS = ("evals", "predictions", "attention", "heads", "patterns")
LEADERBOARD = "leaderboard"


def model_labels(spec: dict) -> dict[str, dict]:
    """Every model of the grid -> its study, display label and seed (the diagnostics' rows), each
    labelled from its cell: the leaderboard's by its entry, OpAmp's as its report's rows."""
    out = {
        base: {"study": "base", "label": base, "seed": None} for base in set(spec["bases"].values())
    }
    opamp_rows = opamp.rows(cells_of(spec, OPAMP), base_of(spec, OPAMP))
    opamp_label = opamp.label_of(opamp_rows)
    for model, cell in spec["cells"].items():
        if cell["study"] == LEADERBOARD:
            label = entry_label(cell["method"], cell["values"])
        elif cell["study"] == OPAMP:
            label = opamp_label[model]
        else:
            label = cell["run"] + (
                f" {cell['placement']}" if cell["placement"] != "vanilla" else ""
            )
        out[model] = {"study": cell["study"], "label": label, "seed": cell["seed"]}
    return out


def _predictions(evals: list[dict], predictions: list[list[dict]]) -> tuple[dict, dict]:
    """(model, benchmark, split) -> {example id: score}, each eval's predictions beside it: the
    standard scores, and the published rule's (``score_published``) of the evals that scored one."""
    if len(predictions) != len(evals):
        raise ValueError(
            f"the leaderboard report needs the predictions of each of its {len(evals)} "
            f"evaluations, in their order; got {len(predictions)} prediction files"
        )
    standard, by_rule = {}, {}
    for e, rows in zip(evals, predictions, strict=True):
        key = (e["model"], e["benchmark"], e["split"])
        standard[key] = {r["id"]: float(r["score"]) for r in rows}
        if e.get("published_rule") is None:
            continue
        lacking = [r["id"] for r in rows if "score_published" not in r]
        if lacking:
            raise ValueError(
                f"predictions of {e['model']} on {e['benchmark']}/{e['split']}: the evaluation "
                f"scored a published rule but {len(lacking)} rows lack score_published "
                f"(first: {lacking[0]})"
            )
        by_rule[key] = {r["id"]: float(r["score_published"]) for r in rows}
    return standard, by_rule


def build_report(spec: dict, inputs: dict[str, list], out: Path) -> None:
    # the job's spec arrives as sorted JSON: regenerate's gets the same key order, so same files
    spec = json.loads(json.dumps(spec, sort_keys=True))
    evals = inputs["evals"]
    predictions, by_rule = _predictions(evals, inputs["predictions"])
    board = spec["leaderboard"]
    if board["cells"]:
        ours = {k: v for k, v in predictions.items() if k[0] in board["cells"]}
        table = write_leaderboard(board, ours, out)
    else:
        table = None
    write_fidelity(spec, evals, predictions, out, by_rule)
    build_diagnostics(
        model_labels(spec), inputs["attention"], evals, inputs["heads"], inputs["patterns"], out
    )
    lines = [
        f"# Cross-method report (preset {spec['preset']}, commit {git_commit()})",
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
