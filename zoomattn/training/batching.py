"""Turning records into token tensors: answer-only labels, padding for training and generation."""

from __future__ import annotations

import torch

from zoomattn.data.tasks import Record, render_prompt

IGNORE = -100


def encode_example(tok, record: Record, answer_only: bool = True) -> dict[str, list[int]]:
    """<bos> prompt answer <eos>; with answer_only the loss sees the answer and <eos> alone."""
    prompt = [tok.bos_token_id] + tok(render_prompt(record), add_special_tokens=False)["input_ids"]
    answer = tok(" " + record["answers"][0], add_special_tokens=False)["input_ids"]
    answer = answer + [tok.eos_token_id]
    # Labels align with input_ids; the model shifts them. Plain LM trains on every token but <bos>.
    labels = ([IGNORE] * len(prompt) if answer_only else [IGNORE] + prompt[1:]) + answer
    return {"input_ids": prompt + answer, "labels": labels}


def encode_prompt(tok, record: Record) -> list[int]:
    return [tok.bos_token_id] + tok(render_prompt(record), add_special_tokens=False)["input_ids"]


def pad_batch(examples: list[dict[str, list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad input_ids/labels for training."""
    width = max(len(e["input_ids"]) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for i, e in enumerate(examples):
        n = len(e["input_ids"])
        ids[i, :n] = torch.tensor(e["input_ids"])
        labels[i, :n] = torch.tensor(e["labels"])
        mask[i, :n] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def left_pad(prompts: list[list[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Left-pad prompts so that generation continues every row from its last real token."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    return {"input_ids": ids, "attention_mask": mask}
