"""LKG-RALM's training step (paper §4.3.2, §4.4): the answer loss plus the estimator's losses.

The estimator's r, c and α come from the same forward as the answer loss (the decoder hook's
estimator pass), so ``LkgObjective.step`` takes both from one call instead of running the answer
loss apart. Targets per passage: relevance labels from the record's
``golden`` (passage k is the k-th document) and the confidence target, the share of the K external
rankers (``rankers.py``) whose top-n prediction matches the label.
"""

from __future__ import annotations

import torch

from zoomattn.methods.lkg.config import LkgConfig
from zoomattn.methods.lkg.estimator import aux_losses
from zoomattn.methods.lkg.model import LkgState, lkg_module, passage_terms
from zoomattn.methods.lkg.rankers import RANKERS, agreement
from zoomattn.methods.protocol import StepBatch
from zoomattn.training.batching import pad_batch, scored_tokens

AUX = ("relevance", "confidence", "diversity")


def golden_top1(alpha_last: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor):
    """(rows whose largest α among valid passages is golden, rows with a valid golden passage)."""
    golden = labels.bool() & valid
    rows = golden.any(-1)
    top = alpha_last.masked_fill(~valid, float("-inf")).argmax(-1)
    hits = golden.gather(-1, top[:, None])[:, 0] & rows
    return int(hits.sum()), int(rows.sum())


class LkgObjective:
    """Answer loss + ``aux_weight``·(relevance + confidence + diversity); with ``aux_weight`` 0 the
    targets are still set and the losses reported (the LM loss alone trains the estimator)."""

    def __init__(self, cfg: LkgConfig):
        self.cfg = cfg
        self.has_aux = cfg.estimator == "layerwise" and (cfg.fusion or cfg.aux_weight > 0)
        self.has_alpha = self.has_aux or cfg.estimator == "reranker"

    def targets(self, state: LkgState, input_ids: torch.Tensor, records: list[dict]):
        """(labels, agreement, valid) ``[B, P]`` for the rows of the last forward."""
        n_slots = state.alpha.shape[-1]
        shape, device = (len(records), n_slots), state.alpha.device
        labels, agree = torch.zeros(shape, device=device), torch.zeros(shape, device=device)
        valid = torch.zeros(shape, dtype=torch.bool, device=device)
        for b, (record, ids, seg) in enumerate(
            zip(records, input_ids.tolist(), state.key_segments.tolist(), strict=True)
        ):
            n = max(max(seg) + 1, 0)
            if n != len(record["documents"]):
                raise ValueError(
                    f"record {record.get('id')!r}: {n} marked passages for "
                    f"{len(record['documents'])} documents"
                )
            if n == 0:
                continue
            golden = [k in set(record["golden"]) for k in range(n)]
            question, passages = passage_terms(ids, seg, n, state.boundary)
            rankings = [RANKERS[name](question, passages) for name in self.cfg.rankers]
            labels[b, :n] = torch.tensor(golden, dtype=torch.float32)
            agree[b, :n] = torch.tensor(agreement(golden, rankings))
            valid[b, :n] = True
        if state.passage_valid is not None:
            valid &= state.passage_valid
        return labels, agree, valid

    def step(self, model, tok, batch: StepBatch) -> dict[str, float]:
        """Accumulate the batch's gradient over micro-batches; return the step's metrics.

        The answer loss is split as ``answer_loss.backward_batch`` splits it (each micro-batch's
        token sum over the whole batch's scored tokens); each auxiliary loss is a mean over the
        micro-batch, weighted by its share of the batch's rows. With several processes this one
        runs its own micro-batches (``StepBatch.micro_batches``) and the metrics are summed over
        the processes."""
        state = lkg_module(model).state
        records, examples, micro = batch.records, batch.examples, batch.micro_batch_size
        n = len(examples)
        n_scored = scored_tokens(examples)
        qa, aux, hits, rows = 0.0, dict.fromkeys(AUX, 0.0), 0, 0
        for i in batch.micro_batches():
            chunk, recs = examples[i : i + micro], records[i : i + micro]
            inputs = pad_batch(chunk, batch.pad_id, model.device)
            extra = {} if batch.one_pass else {"num_items_in_batch": n_scored}
            loss = model(**inputs, **extra).loss
            qa += loss.item()
            if state.alpha is not None:
                labels, agree, valid = self.targets(state, inputs["input_ids"], recs)
                h, r = golden_top1(state.alpha[:, -1].detach(), labels, valid)
                hits, rows = hits + h, rows + r
                if state.r is not None:
                    terms = aux_losses(state.r, state.c, state.alpha[:, -1], labels, agree, valid)
                    share = len(chunk) / n
                    for name in AUX:
                        aux[name] += share * terms[name].item()
                    if self.cfg.aux_weight > 0:
                        loss = loss + self.cfg.aux_weight * share * sum(terms.values())
            loss.backward()
        qa, hits, rows, *parts = batch.sum_over_ranks([qa, hits, rows, *aux.values()])
        aux = dict(zip(AUX, parts, strict=True))
        metrics = {"train_loss": qa + self.cfg.aux_weight * sum(aux.values()), "qa_loss": qa}
        if self.has_alpha:
            metrics["golden_top1"] = hits / rows if rows else 0.0
        if self.has_aux:
            metrics.update(
                relevance_loss=aux["relevance"],
                confidence_loss=aux["confidence"],
                diversity=aux["diversity"],
            )
        return metrics
