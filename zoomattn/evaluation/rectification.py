"""The rectification paper's attention diagnostics (GRID.md §2).

Answer-token attention gap (Fig. 3): at the last prompt token, the attention (after softmax,
averaged over layers and heads) on the tokens of the gold answer inside the golden documents,
minus that on every other prompt token, × 1000; the mean over examples whose golden documents
contain the answer. Score margin (Fig. 5): per layer, head and example, the p90 − p10 spread of
the last prompt token's pre-softmax scores over the keys it sees; ``xi: auto`` is half the median
margin (the paper: margins ≈ 6 for Llama, so ξ = 3 covers (−3, 3)).
"""

from __future__ import annotations

import numpy as np
import torch
from tqdm import tqdm

from zoomattn.attention.interface import recording_last_row, recording_last_scores
from zoomattn.evaluation.attention_share import encoded_prompt
from zoomattn.evaluation.metrics import bootstrap_ci

GAP_SCALE = 1000.0


def answer_positions(tok, record: dict) -> tuple[list[int], list[int]]:
    """Prompt ids and the positions of gold-answer tokens inside the golden documents."""
    p = encoded_prompt(tok, record)
    spans = []
    for start, end in (p.doc_chars[i] for i in sorted(set(record["golden"]))):
        for answer in filter(None, record["answers"]):
            at = p.text.find(answer, start, end)
            while at != -1:
                spans.append((at, at + len(answer)))
                at = p.text.find(answer, at + len(answer), end)
    hits = [
        i + p.shift
        for i, (a, b) in enumerate(p.offsets)
        if b > a and any(a < e and b > s for s, e in spans)
    ]
    return p.ids, sorted(set(hits))


@torch.no_grad()
def answer_gap(model, tok, records: list[dict]) -> dict:
    gaps = []
    for rec in tqdm(records, desc="answer gap", mininterval=5):
        ids, answer = answer_positions(tok, rec)
        if not answer:
            continue  # the answer is not written in the golden documents (e.g. long-form)
        with recording_last_row(model) as layers:
            model(input_ids=torch.tensor([ids], device=model.device))
            row = torch.stack([m.last_row[0] for m in layers]).float().mean(dim=(0, 1)).cpu()
        is_answer = torch.zeros(len(ids), dtype=torch.bool)
        is_answer[answer] = True
        gaps.append(float(row[is_answer].mean() - row[~is_answer].mean()) * GAP_SCALE)
    if not gaps:
        return {"answer_gap": None, "answer_gap_examples": 0}
    low, high = bootstrap_ci(gaps)
    return {
        "answer_gap": float(np.mean(gaps)),
        "answer_gap_ci_low": low,
        "answer_gap_ci_high": high,
        "answer_gap_examples": len(gaps),
    }


@torch.no_grad()
def score_margins(model, tok, records: list[dict]) -> dict:
    """Every (example, layer, head) margin, their summary, and the ξ that covers them."""
    from zoomattn.training.batching import encode_prompt

    margins = []  # [examples, layers, heads]
    for rec in tqdm(records, desc="score margin", mininterval=5):
        ids = encode_prompt(tok, rec)
        with recording_last_scores(model) as layers:
            model(input_ids=torch.tensor([ids], device=model.device))
            scores = torch.stack([m.last_scores[0] for m in layers]).float().cpu()  # [L, H, S]
        q = torch.nanquantile(scores, torch.tensor([0.1, 0.9]), dim=-1)
        margins.append((q[1] - q[0]).numpy())
    margins = np.stack(margins)
    median = float(np.median(margins))
    return {
        "examples": len(records),
        "margins": margins.round(4).tolist(),
        "median": median,
        "p10": float(np.percentile(margins, 10)),
        "p90": float(np.percentile(margins, 90)),
        "per_layer_median": np.median(margins, axis=(0, 2)).tolist(),
        "xi_auto": round(median / 2, 3),
    }
