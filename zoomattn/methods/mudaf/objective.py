"""MuDAF's training step: (1 − α)·L_qa + α·L_cl, L_cl the contrastive loss on the selected heads
(``loss.py``), each term's gradient accumulated over micro-batches."""

from __future__ import annotations

from zoomattn.data.tasks import Record
from zoomattn.methods.mudaf.loss import contrastive_examples, contrastive_loss_sum
from zoomattn.methods.protocol import StepBatch, micro_batch_starts
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
            model,
            batch.examples,
            batch.pad_id,
            batch.micro_batch_size,
            self.qa_weight,
            batch.rank,
            batch.world_size,
        )
        term, metrics = self.backward(
            model,
            tok,
            batch.records,
            batch.seed,
            batch.step,
            batch.micro_batch_size,
            batch.rank,
            batch.world_size,
        )
        qa, term, cl = batch.sum_over_ranks([qa, term, metrics["cl_loss"]])
        return {"train_loss": self.qa_weight * qa + term, "qa_loss": qa, "cl_loss": cl}

    def backward(
        self,
        model,
        tok,
        records: list[Record],
        seed: int,
        step: int,
        micro_batch_size: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> tuple[float, dict[str, float]]:
        """Accumulate the gradient of α·L_cl (L_cl: mean over the records that have a positive
        and a negative) over micro-batches of records, this process's only among
        ``world_size``; return its part of (α·L_cl, {"cl_loss": L_cl}). Every process draws
        the whole batch's contrastive examples, so the mean is over the whole batch's."""
        examples = contrastive_examples(tok, records, self.negatives, seed, step)
        n = sum(e is not None for e in examples)
        if n == 0:
            return 0.0, {"cl_loss": 0.0}
        total = 0.0
        for i in micro_batch_starts(len(examples), micro_batch_size, rank, world_size):
            chunk = [e for e in examples[i : i + micro_batch_size] if e is not None]
            if not chunk:
                continue
            loss = contrastive_loss_sum(model, chunk, self.selected, self.tau, tok.pad_token_id)
            (loss * (self.alpha / n)).backward()
            total += loss.item()
        return self.alpha * total / n, {"cl_loss": total / n}
