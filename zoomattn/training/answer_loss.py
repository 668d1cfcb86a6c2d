"""The answer loss: mean cross-entropy over the answer tokens, accumulated over micro-batches. It is
the default training step (``AnswerLoss``, for a method without an objective of its own) and the
part of every method's step that trains on the answer."""

from __future__ import annotations

from zoomattn.methods.protocol import StepBatch, micro_batch_starts
from zoomattn.training.batching import pad_batch, scored_tokens


def backward_batch(
    model,
    examples: list[dict],
    pad_id: int,
    micro_batch_size: int,
    scale: float = 1.0,
    rank: int = 0,
    world_size: int = 1,
) -> float:
    """Gradient of ``scale`` × the batch's mean answer-token loss, accumulated over micro-batches.

    Each micro-batch contributes its token-loss sum divided by the whole batch's count of scored
    tokens, so the accumulated gradient is the full batch's, whatever the split. With several
    processes, this one runs its micro-batches only (``micro_batch_starts``) and its gradient is
    its share of the batch's. Returns this process's part of the loss (unscaled).
    """
    if world_size == 1 and micro_batch_size >= len(examples):
        # one pass: the model's own mean loss, bit-identical to training without accumulation
        loss = model(**pad_batch(examples, pad_id, model.device)).loss
        (loss if scale == 1.0 else loss * scale).backward()
        return loss.item()
    n_scored = scored_tokens(examples)
    total = 0.0
    for i in micro_batch_starts(len(examples), micro_batch_size, rank, world_size):
        batch = pad_batch(examples[i : i + micro_batch_size], pad_id, model.device)
        loss = model(**batch, num_items_in_batch=n_scored).loss
        (loss if scale == 1.0 else loss * scale).backward()
        total += loss.item()
    return total


def backward_step_batch(model, batch: StepBatch, scale: float = 1.0) -> float:
    """``backward_batch`` of a step's batch on this process; returns the whole batch's loss."""
    part = backward_batch(
        model,
        batch.examples,
        batch.pad_id,
        batch.micro_batch_size,
        scale,
        batch.rank,
        batch.world_size,
    )
    return batch.sum_over_ranks([part])[0]


class AnswerLoss:
    """The default objective: the answer loss alone."""

    def step(self, model, tok, batch: StepBatch) -> dict[str, float]:
        qa = backward_step_batch(model, batch)
        return {"train_loss": qa, "qa_loss": qa}
