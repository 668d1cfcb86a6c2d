"""One function per workflow stage: the single call a Snakemake rule makes.

Each takes the job's ``spec`` (exactly the config values the job depends on: the rule passes it as
a param, so changing any of them reruns the job) and its paths, runs inside an MLflow child run,
and writes its outputs atomically.
"""

from zoomattn.stages.analysis import (
    attention,
    evaluate,
    head_masking,
    head_patterns,
    retrieval_heads,
    score_margin,
)
from zoomattn.stages.data import eval_data, train_data, world
from zoomattn.stages.models import base_model, finetune, pretrain, select_heads
from zoomattn.stages.reports import regenerate, report

__all__ = [
    "attention",
    "base_model",
    "eval_data",
    "evaluate",
    "finetune",
    "head_masking",
    "head_patterns",
    "pretrain",
    "regenerate",
    "report",
    "retrieval_heads",
    "score_margin",
    "select_heads",
    "train_data",
    "world",
]
