"""One function per workflow stage: the single call a Snakemake rule makes.

Each takes the job's ``spec`` (exactly the config values the job depends on: the rule passes it as
a param, so changing any of them reruns the job) and its paths, runs inside an MLflow child run,
and writes its outputs atomically.

``STAGES`` is the one table of them: the command a rule runs (``python -m zoomattn STAGE``) and
the function it calls. The code hash of a job (zoomattn/code_hash.py) and the warm worker's
preload (zoomattn/worker.py) are derived from it. A stage's function is imported when first used
(``stages.evaluate`` or ``function("evaluate")``), so importing this package costs nothing.
"""

from __future__ import annotations

import importlib

STAGES = {
    "world": "zoomattn.stages.data:world",
    "train-data": "zoomattn.stages.data:train_data",
    "eval-data": "zoomattn.stages.data:eval_data",
    "pretrain": "zoomattn.stages.models:pretrain",
    "base-model": "zoomattn.stages.models:base_model",
    "finetune": "zoomattn.stages.models:finetune",
    "select-heads": "zoomattn.stages.models:select_heads",
    "evaluate": "zoomattn.stages.analysis:evaluate",
    "attention": "zoomattn.stages.analysis:attention",
    "score-margin": "zoomattn.stages.analysis:score_margin",
    "retrieval-heads": "zoomattn.stages.analysis:retrieval_heads",
    "head-masking": "zoomattn.stages.analysis:head_masking",
    "head-patterns": "zoomattn.stages.analysis:head_patterns",
    "report": "zoomattn.stages.reports:report",
}
# what a user runs besides (``python -m zoomattn regenerate``): no rule calls it
COMMANDS = {"regenerate": "zoomattn.stages.reports:regenerate"}


def _load(target: str):
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


def function(stage: str):
    """The function behind a stage (``"eval-data"``) or a user command (``"regenerate"``)."""
    return _load({**STAGES, **COMMANDS}[stage])


def __getattr__(name: str):  # ``stages.eval_data``: the stage's function, imported on first use
    for target in (*STAGES.values(), *COMMANDS.values()):
        if target.endswith(f":{name}"):
            return _load(target)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["COMMANDS", "STAGES", "function"]
