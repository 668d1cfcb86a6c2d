"""Turning records into token tensors: answer-only labels, padding for training and generation."""

from __future__ import annotations

import torch

from zoomattn.data.tasks import Record
from zoomattn.modeling.chat import prompt_ids, target_ids

IGNORE = -100


def encode_example(tok, record: Record, answer_only: bool = True) -> dict[str, list[int]]:
    """Prompt then answer and end token (modeling/chat.py); with answer_only the loss sees the
    answer and its end token alone."""
    prompt, answer = prompt_ids(tok, record), target_ids(tok, record)
    # Labels align with input_ids; the model shifts them. Plain LM trains on every token but <bos>.
    labels = ([IGNORE] * len(prompt) if answer_only else [IGNORE] + prompt[1:]) + answer
    return {"input_ids": prompt + answer, "labels": labels}


def encode_prompt(tok, record: Record) -> list[int]:
    return prompt_ids(tok, record)


def scored_tokens(examples: list[dict[str, list[int]]]) -> int:
    """Answer tokens the loss scores in a batch (the model shifts labels: position 0 never is)."""
    return sum(sum(label != IGNORE for label in e["labels"][1:]) for e in examples)


def pad_batch(
    examples: list[dict[str, list[int]]], pad_id: int, device=None
) -> dict[str, torch.Tensor]:
    """Right-pad input_ids/labels for training (on ``device``: the model's)."""
    width = max(len(e["input_ids"]) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for i, e in enumerate(examples):
        n = len(e["input_ids"])
        ids[i, :n] = torch.tensor(e["input_ids"])
        labels[i, :n] = torch.tensor(e["labels"])
        mask[i, :n] = 1
    batch = {"input_ids": ids, "labels": labels, "attention_mask": mask}
    return {k: v.to(device) for k, v in batch.items()} if device is not None else batch


def left_pad(prompts: list[list[int]], pad_id: int, device=None) -> dict[str, torch.Tensor]:
    """Left-pad prompts so that generation continues every row from its last real token."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    batch = {"input_ids": ids, "attention_mask": mask}
    return {k: v.to(device) for k, v in batch.items()} if device is not None else batch
