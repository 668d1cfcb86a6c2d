"""The answer loss: mean cross-entropy over the answer tokens, accumulated over micro-batches. It is
the default training step (``AnswerLoss``, for a method without an objective of its own) and the
part of every method's step that trains on the answer."""

from __future__ import annotations

from zoomattn.methods.protocol import StepBatch
from zoomattn.training.batching import pad_batch, scored_tokens


def backward_batch(
    model, examples: list[dict], pad_id: int, micro_batch_size: int, scale: float = 1.0
) -> float:
    """Gradient of ``scale`` × the batch's mean answer-token loss, accumulated over micro-batches.

    Each micro-batch contributes its token-loss sum divided by the whole batch's count of scored
    tokens, so the accumulated gradient is the full batch's, whatever the split. Returns the loss
    (unscaled).
    """
    if micro_batch_size >= len(examples):
        # one pass: the model's own mean loss, bit-identical to training without accumulation
        loss = model(**pad_batch(examples, pad_id, model.device)).loss
        (loss if scale == 1.0 else loss * scale).backward()
        return loss.item()
    n_scored = scored_tokens(examples)
    total = 0.0
    for i in range(0, len(examples), micro_batch_size):
        batch = pad_batch(examples[i : i + micro_batch_size], pad_id, model.device)
        loss = model(**batch, num_items_in_batch=n_scored).loss
        (loss if scale == 1.0 else loss * scale).backward()
        total += loss.item()
    return total


class AnswerLoss:
    """The default objective: the answer loss alone."""

    def step(self, model, tok, batch: StepBatch) -> dict[str, float]:
        qa = backward_batch(model, batch.examples, batch.pad_id, batch.micro_batch_size)
        return {"train_loss": qa, "qa_loss": qa}
