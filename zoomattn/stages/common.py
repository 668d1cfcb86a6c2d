"""Helpers the stages share."""

from __future__ import annotations

from pathlib import Path


def load_model(spec: dict, model_dir: Path, base_dir: Path, threads: int):
    import torch

    from zoomattn.modeling.loading import load_for_eval, load_tokenizer

    torch.manual_seed(0)
    torch.set_num_threads(threads)
    return load_for_eval(model_dir, base_dir, spec["quantization"]), load_tokenizer(base_dir)


def clear_checkpoints(ckpt: Path) -> None:
    from zoomattn.training.checkpoint import Checkpointer

    Checkpointer(ckpt, 0).clear()
