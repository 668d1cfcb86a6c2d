"""MuDAF's training step: (1 − α)·L_qa + α·L_cl, L_cl the contrastive loss on the selected heads
(``loss.py``), each term's gradient accumulated over micro-batches."""

from __future__ import annotations

from zoomattn.data.tasks import Record
from zoomattn.methods.mudaf.loss import contrastive_examples, contrastive_loss_sum
from zoomattn.methods.protocol import StepBatch
from zoomattn.training.answer_loss import backward_batch


class ContrastiveObjective:
    """MuDAF's objective: the answer loss scaled by ``qa_weight`` = 1 − α, plus α·L_cl."""

    def __init__(self, selected, alpha: float, tau: float, negatives: int):
        if not selected:
            raise ValueError("selected: the contrastive objective needs at least one head")
        self.selected = [[int(layer), int(h)] for layer, h in selected]
        self.alpha, self.tau, self.negatives = alpha, tau, negatives
        self.qa_weight = 1.0 - alpha

    def step(self, model, tok, batch: StepBatch) -> dict[str, float]:
        qa = backward_batch(
            model, batch.examples, batch.pad_id, batch.micro_batch_size, self.qa_weight
        )
        term, metrics = self.backward(
            model, tok, batch.records, batch.seed, batch.step, batch.micro_batch_size
        )
        return {"train_loss": self.qa_weight * qa + term, "qa_loss": qa, **metrics}

    def backward(
        self, model, tok, records: list[Record], seed: int, step: int, micro_batch_size: int
    ) -> tuple[float, dict[str, float]]:
        """Accumulate the gradient of α·L_cl (L_cl: mean over the records that have a positive
        and a negative) over micro-batches of records; return (α·L_cl, {"cl_loss": L_cl})."""
        examples = contrastive_examples(tok, records, self.negatives, seed, step)
        n = sum(e is not None for e in examples)
        if n == 0:
            return 0.0, {"cl_loss": 0.0}
        total = 0.0
        for i in range(0, len(examples), micro_batch_size):
            chunk = [e for e in examples[i : i + micro_batch_size] if e is not None]
            if not chunk:
                continue
            loss = contrastive_loss_sum(model, chunk, self.selected, self.tau, tok.pad_token_id)
            (loss * (self.alpha / n)).backward()
            total += loss.item()
        return self.alpha * total / n, {"cl_loss": total / n}
