"""MDQA retrieval heads (MuDAF §3.1, Fig. 3/4, App. A.2): which heads attend to golden passages.

Passage mass: for one prompt, the attention of the last prompt token summed over each passage's
tokens, per layer and head (``[layers, heads, passages]``; one row per head, never the matrix).
For OpAmp-like methods the recorded row is signed, so a mass can be negative.

Per question q with golden set G (``record["golden"]``, duplicates ignored) and a head's masses m:

- attended set A = {p : m_p > threshold} (strictly greater: a mass equal to it is not attended);
- precision = |A∩G| / |A| (0 when A is empty), recall = |A∩G| / |G|, F1 their harmonic mean with
  F1 = 0 when both are 0;
- EM = 1 when the top-|G| passages by mass equal G (threshold unused; a stable descending sort, so
  tied masses rank the lower passage index first), else 0.

A head's F1 and EM retrieval scores are the means over questions; its retrieval score R is the mean
F1. A question without a golden passage has no defined recall: ``retrieval_scores`` raises a
ValueError naming its index, and ``head_scores`` rejects such a record by id before any forward
pass.

Masking experiment (Fig. 4): the task score with the top-k heads by R masked (their outputs zeroed
before o_proj), against ``draws`` sets of k heads drawn uniformly without replacement. The draws
for a given k depend only on (seed, k) and the model's shape, never on R or on the other ks, so runs
with different models or k lists mask the same random heads.
"""

from __future__ import annotations

import numpy as np
from tqdm import tqdm

from zoomattn.attention.interface import attention_modules, masking_heads
from zoomattn.evaluation.attention_share import passage_attention
from zoomattn.evaluation.generate import evaluate_records


def retrieval_scores(
    masses: list[np.ndarray], goldens: list[list[int]], threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """Mean F1 and EM retrieval scores ``([L, H], [L, H])`` over questions (App. A.2).

    ``masses[q]`` is question q's ``[L, H, P_q]`` passage mass (P may differ between questions),
    ``goldens[q]`` its golden passage indices."""
    if len(masses) != len(goldens):
        raise ValueError(f"{len(masses)} mass arrays but {len(goldens)} golden sets")
    if not masses:
        raise ValueError("retrieval scores need at least one question")
    f1_sum = em_sum = 0.0
    for q, (mass, golden) in enumerate(zip(masses, goldens, strict=True)):
        mass = np.asarray(mass, dtype=float)
        if mass.ndim != 3 or mass.shape[:2] != np.shape(masses[0])[:2]:
            raise ValueError(f"question {q}: mass shape {mass.shape}, want [L, H, passages]")
        gold = sorted({int(g) for g in golden})
        if not gold:
            raise ValueError(f"question {q} has no golden passage")
        n = mass.shape[-1]
        if gold[0] < 0 or gold[-1] >= n:
            raise ValueError(f"question {q}: golden passages {gold} outside 0..{n - 1}")
        is_gold = np.zeros(n, dtype=bool)
        is_gold[gold] = True
        attended = mass > threshold
        hits = (attended & is_gold).sum(-1)
        precision = hits / np.maximum(attended.sum(-1), 1)  # 0 when nothing is attended
        recall = hits / len(gold)
        denom = np.where(hits > 0, precision + recall, 1.0)  # hits == 0 <=> both are 0
        f1_sum = f1_sum + np.where(hits > 0, 2 * precision * recall / denom, 0.0)
        top = np.argsort(-mass, axis=-1, kind="stable")[..., : len(gold)]
        em_sum = em_sum + is_gold[top].all(-1)
    return f1_sum / len(masses), em_sum / len(masses)


def ranked_heads(f1, k: int | None = None) -> list[tuple[int, int]]:
    """``(layer, head)`` pairs by F1 descending, ties in (layer, head) order; the top k if given."""
    f1 = np.asarray(f1, dtype=float)
    order = np.argsort(-f1.ravel(), kind="stable")[:k]
    return [divmod(int(i), f1.shape[1]) for i in order]


def head_scores(model, tok, records: list[dict], threshold: float) -> dict:
    """Every head's F1/EM retrieval score on ``records`` and their ranking by F1 (Fig. 3)."""
    if not records:
        raise ValueError("head scores need at least one record")
    for rec in records:
        if not rec["golden"]:
            raise ValueError(f"{rec['id']}: a retrieval score needs at least one golden passage")
    masses = [
        passage_attention(model, tok, rec)
        for rec in tqdm(records, desc="retrieval heads", mininterval=5)
    ]
    f1, em = retrieval_scores(masses, [rec["golden"] for rec in records], threshold)
    ranking = [
        {
            "layer": layer,
            "head": head,
            "f1": float(f1[layer, head]),
            "em": float(em[layer, head]),
            "rank": rank,
        }
        for rank, (layer, head) in enumerate(ranked_heads(f1), start=1)
    ]
    return {
        "threshold": float(threshold),
        "n_examples": len(records),
        "layers": int(f1.shape[0]),
        "heads": int(f1.shape[1]),
        "f1": f1.tolist(),
        "em": em.tolist(),
        "ranking": ranking,
        "mean_f1": float(f1.mean()),
        "max_f1": float(f1.max()),
    }


def random_heads(n_layers: int, n_heads: int, k: int, draws: int, seed: int) -> list[list]:
    """``draws`` sets of k distinct ``(layer, head)`` pairs, uniform; a function of its arguments
    only (the generator is seeded with (seed, k))."""
    rng = np.random.default_rng([seed, k])
    return [
        [divmod(int(i), n_heads) for i in sorted(rng.choice(n_layers * n_heads, k, replace=False))]
        for _ in range(draws)
    ]


def masking_experiment(
    model,
    tok,
    records: list[dict],
    metric: str,
    f1,
    ks: list[int],
    draws: int,
    seed: int,
    batch_size: int,
    max_new_tokens: int,
) -> dict:
    """Fig. 4: the score with the top-k heads by F1 masked and with k random heads masked."""
    f1 = np.asarray(f1, dtype=float)
    shape = (len(attention_modules(model)), model.config.num_attention_heads)
    if f1.shape != shape:
        raise ValueError(f"f1 has shape {f1.shape}, the model has (layers, heads) {shape}")
    if any(int(k) < 0 for k in ks) or draws < 0:
        raise ValueError(f"ks {ks} and draws {draws} must be non-negative")
    n = f1.size

    def score(heads: list[tuple[int, int]], desc: str) -> float:
        with masking_heads(model, heads):
            metrics, _ = evaluate_records(
                model, tok, records, metric, batch_size, max_new_tokens, desc=desc
            )
        return metrics["score"]

    out = {
        "metric": metric,
        "n_examples": len(records),
        "seed": seed,
        "draws": draws,
        "baseline": score([], "no heads masked"),
        "k": [],
    }
    for k in dict.fromkeys(min(int(k), n) for k in ks):  # clipped, duplicates dropped, in order
        top = ranked_heads(f1, k)
        drawn = random_heads(*shape, k, draws, seed)
        random = [score(h, f"{k} random heads masked ({d + 1})") for d, h in enumerate(drawn)]
        out["k"].append(
            {
                "k": k,
                "top": score(top, f"top {k} heads masked"),
                "top_heads": [list(h) for h in top],
                "random": random,
                "random_mean": float(np.mean(random)) if random else None,
                "random_heads": [[list(h) for h in heads] for heads in drawn],
            }
        )
    return out
