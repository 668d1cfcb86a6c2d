"""Evaluating one model on one benchmark split: generation, scores, predictions.

A benchmark's ``decoding:`` (config) says how its authors decoded: greedy (absent, or temperature
0), one pass; or sampled, one pass per seed with the torch RNG seeded before each, each example's
scores averaged over the passes. Its ``published_rule:`` names the rule of its published column
(``official.RULES``), scored on the same predictions beside the standard metric.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from tqdm import tqdm

from zoomattn.evaluation.metrics import METRICS, summarize
from zoomattn.evaluation.official import RULES
from zoomattn.modeling.chat import stop_ids
from zoomattn.training.batching import encode_prompt, left_pad

# Sampling keeps transformers' default top-k (50, in the OpAmp authors' transformers 4.46 as in
# ours), pinned here so that a checkpoint's generation_config cannot change it.
TOP_K = 50


def resolve_decoding(decoding: dict | None, max_new_tokens: int) -> dict:
    """Every field of the decoding a run uses: the benchmark's ``decoding:`` over greedy decoding
    at the preset's ``max_new_tokens``."""
    d = decoding or {}
    return {
        "temperature": float(d.get("temperature", 0.0)),
        "top_p": float(d.get("top_p", 1.0)),
        "seeds": [int(s) for s in d.get("seeds", [])],
        "max_new_tokens": int(d.get("max_new_tokens", max_new_tokens)),
    }


@torch.no_grad()
def generate_answers(
    model,
    tok,
    records: list[dict],
    batch_size: int,
    max_new_tokens: int,
    desc: str = "generate",
    sample: dict | None = None,
) -> list[str]:
    """Each record's reply: greedy, or sampled with ``sample`` ({temperature, top_p}) from the
    torch RNG's current state (the replies then depend on the batch size too)."""
    how = {"do_sample": False} if sample is None else {"do_sample": True, "top_k": TOP_K, **sample}
    answers = []
    for i in tqdm(range(0, len(records), batch_size), desc=desc, mininterval=5):
        chunk = records[i : i + batch_size]
        batch = left_pad([encode_prompt(tok, r) for r in chunk], tok.pad_token_id, model.device)
        out = model.generate(
            **batch,
            max_new_tokens=max_new_tokens,
            **how,
            eos_token_id=stop_ids(tok),
            pad_token_id=tok.pad_token_id,
        )
        new = out[:, batch["input_ids"].shape[1] :]
        answers += [tok.decode(row, skip_special_tokens=True).strip() for row in new]
    return answers


def decoding_passes(
    model, tok, records: list[dict], batch_size: int, decoding: dict, desc: str
) -> list[list[str]]:
    """The replies of every generation pass: one greedy pass, or one sampled pass per seed."""
    n = decoding["max_new_tokens"]
    if decoding["temperature"] == 0:
        return [generate_answers(model, tok, records, batch_size, n, desc)]
    sample = {"temperature": decoding["temperature"], "top_p": decoding["top_p"]}
    passes = []
    for seed in decoding["seeds"]:
        torch.manual_seed(seed)
        passes.append(
            generate_answers(model, tok, records, batch_size, n, f"{desc} seed {seed}", sample)
        )
    return passes


def _mean(scores: list[float]) -> float:
    return scores[0] if len(scores) == 1 else sum(scores) / len(scores)


def _summary(rows: list[dict], key: str) -> dict:
    """The mean of ``key`` over the rows with its interval, and per subset where rows have one."""
    out = summarize([r[key] for r in rows])
    by_subset = defaultdict(list)
    for r in rows:
        if r["subset"]:
            by_subset[r["subset"]].append(r[key])
    if by_subset:
        out["subsets"] = {k: summarize(v) for k, v in sorted(by_subset.items())}
    return out


def evaluate_records(
    model,
    tok,
    records: list[dict],
    metric: str,
    batch_size: int,
    max_new_tokens: int,
    desc: str = "generate",
    *,
    decoding: dict | None = None,
    published_rule: str | None = None,
) -> tuple[dict, list[dict]]:
    """The standard metric's summary (and the published rule's, when named) and one row per
    record. Sampled decoding: a row's scores are its means over the seeds, ``prediction`` the
    first seed's reply and ``predictions`` every seed's."""
    dec = resolve_decoding(decoding, max_new_tokens)
    passes = decoding_passes(model, tok, records, batch_size, dec, desc)
    score = METRICS[metric]
    rule = RULES[published_rule].score if published_rule else None
    rows = []
    for i, rec in enumerate(records):
        preds = [p[i] for p in passes]
        row = {
            "id": rec["id"],
            "subset": rec["subset"],
            "prediction": preds[0],
            "answers": rec["answers"],
            "score": _mean([score(p, rec) for p in preds]),
        }
        if rule is not None:
            row["score_published"] = _mean([rule(p, rec) for p in preds])
        if dec["temperature"] > 0:
            row["predictions"] = preds
        rows.append(row)
    metrics = {"metric": metric, **_summary(rows, "score"), "decoding": dec}
    if rule is not None:
        metrics["published_rule"] = {"rule": published_rule, **_summary(rows, "score_published")}
    return metrics, rows
