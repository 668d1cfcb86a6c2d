"""Conversational RAG and faithfulness benchmarks of OpAmp (docs/papers.md §1, Table 8 and Table 5).

- ``chatrag`` (chat_faith_chatrag.py): ChatRAG-Bench coqa / quac / qrecc, noise-augmented.
- ``faitheval_unanswerable`` / ``faitheval_inconsistent`` / ``faitheval_counterfactual``
  (chat_faith_faitheval.py): FaithEval, one hub repo per subset; ``faitheval_correct`` is its
  scoring rule, for the metric code.
"""

from __future__ import annotations

from zoomattn.data.sources import chat_faith_chatrag, chat_faith_faitheval
from zoomattn.data.sources.chat_faith_chatrag import build_chatrag, chatqa_instruction
from zoomattn.data.sources.chat_faith_faitheval import (
    build_faitheval,
    faitheval_correct,
    faitheval_instruction,
)

BUILDERS = {**chat_faith_chatrag.BUILDERS, **chat_faith_faitheval.BUILDERS}

__all__ = [
    "BUILDERS",
    "build_chatrag",
    "build_faitheval",
    "chatqa_instruction",
    "faitheval_correct",
    "faitheval_instruction",
]
