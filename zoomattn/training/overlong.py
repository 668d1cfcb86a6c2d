"""What fine-tuning does with a training example longer than ``finetune.max_length`` tokens
(``finetune.overlong``):

- ``drop``: the example is left out (the papers' texts state a sequence limit, not a cut);
- ``truncate``: its first ``max_length`` tokens are kept, as the OpAmp authors' training script
  does (``train_na_sn.py``: the tokenizer truncates prompt + answer on the right, the labels of
  the prompt's tokens are masked). A cut answer keeps its head; an example whose answer is cut
  whole has no token left to score and would add nothing to the loss, so it is left out;
- ``drop_negatives``: non-golden documents are removed, the last first, until the example fits,
  as MuDAF's authors shorten their over-long HotpotQA inputs; an example that does not fit with
  its golden documents alone is left out.
"""

from __future__ import annotations

import logging

from zoomattn.data.tasks import Record
from zoomattn.training.batching import IGNORE, encode_example

log = logging.getLogger(__name__)

OVERLONG = ("drop", "truncate", "drop_negatives")


def fit_examples(
    tok, records: list[Record], max_length: int | None, overlong: str = "drop"
) -> tuple[list[Record], list[dict], int]:
    """(records, encoded examples) kept in step, and how many were left out. A record shortened
    by ``drop_negatives`` is kept shortened: a method's own step (MuDAF's contrastive term) sees
    the documents the answer loss saw."""
    if overlong not in OVERLONG:
        raise ValueError(f"finetune.overlong: one of {', '.join(OVERLONG)}, got {overlong!r}")
    kept_records, kept = [], []
    for record in records:
        example = encode_example(tok, record)
        if max_length and len(example["input_ids"]) > max_length:
            record, example = _fit(tok, record, example, max_length, overlong)
        if example is not None:
            kept_records.append(record)
            kept.append(example)
    dropped = len(records) - len(kept)
    if max_length:
        log.info(
            "%d of %d examples exceed %d tokens and could not be fitted (%s): left out",
            dropped,
            len(records),
            max_length,
            overlong,
        )
    return kept_records, kept, dropped


def _fit(tok, record: Record, example: dict, max_length: int, overlong: str):
    if overlong == "truncate":
        return record, truncate(example, max_length)
    if overlong == "drop_negatives":
        return drop_negatives(tok, record, max_length)
    return record, None


def truncate(example: dict, max_length: int) -> dict | None:
    """The example's first ``max_length`` tokens, or None when no answer token is left (the model
    shifts labels: position 0 is never scored)."""
    ids, labels = example["input_ids"][:max_length], example["labels"][:max_length]
    if all(label == IGNORE for label in labels[1:]):
        return None
    return {"input_ids": ids, "labels": labels}


def drop_negatives(tok, record: Record, max_length: int) -> tuple[Record, dict | None]:
    """The record without its last non-golden documents, as few removed as make it fit."""
    while True:
        negatives = [i for i in range(len(record["documents"])) if i not in record["golden"]]
        if not negatives:
            return record, None
        record = without_document(record, negatives[-1])
        example = encode_example(tok, record)
        if len(example["input_ids"]) <= max_length:
            return record, example


def without_document(record: Record, index: int) -> Record:
    """The record with one non-golden document removed: the golden indices after it shift down,
    the noise ratio is the share of non-golden documents left."""
    docs = [d for i, d in enumerate(record["documents"]) if i != index]
    golden = [g - (g > index) for g in record["golden"]]
    noise = (len(docs) - len(golden)) / len(docs) if docs else 1.0
    return {**record, "documents": docs, "golden": golden, "noise_ratio": noise}
