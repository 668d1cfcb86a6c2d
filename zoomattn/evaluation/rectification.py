"""The rectification paper's score margin (docs/papers.md §2; its answer-token attention gap, Fig.
3, lives with the golden share in ``attention_share``).

Score margin (Fig. 5): per layer, head and example, the p90 − p10 spread of
the last prompt token's pre-softmax scores over the keys it sees; ``xi: auto`` is half the median
margin (the paper: margins ≈ 6 for Llama, so ξ = 3 covers (−3, 3)).
"""

from __future__ import annotations

import numpy as np
import torch
from tqdm import tqdm

from zoomattn.attention.interface import recording_last_scores


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
