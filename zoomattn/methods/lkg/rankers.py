"""External lexical rankers for LKG-RALM: the K "external models" of the confidence loss and the
reranker that replaces the passage estimator in the "w/o LPR" ablation.

The paper scores passages with three dense embedders (BGE-M3, E5-mistral, GTE-Qwen2; App. A).
Our models are small and trained on a synthetic vocabulary, so the external judges are two
classical lexical rankers instead: Okapi BM25 (Robertson & Zaragoza 2009) and query likelihood
with Dirichlet smoothing (Zhai & Lafferty 2001). Both rank one question's candidate passages
against each other: the collection statistics (document frequencies, term probabilities) come
from the candidate list itself, so no corpus index is needed. Terms are any hashable tokens; the
model passes token-id lists, so no tokenizer is involved.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

T = TypeVar("T", bound=Hashable)

FLOOR = 0.01  # smallest guidance α of the w/o-LPR ablation: no passage is masked out entirely


def bm25(
    query: Sequence[T], passages: Sequence[Sequence[T]], k1: float = 1.2, b: float = 0.75
) -> list[float]:
    """Okapi BM25 of each passage: Σ over query terms (with multiplicity) of
    idf(t) · tf·(k1+1) / (tf + k1·(1 − b + b·|p|/avgdl)), idf(t) = ln(1 + (N − df + 0.5)/(df + 0.5))
    with N, df and avgdl taken over the passages. The score is never negative, so an empty
    passage's 0 is the minimum."""
    if not passages:
        return []
    n = len(passages)
    counts = [Counter(p) for p in passages]
    df = Counter(t for c in counts for t in c)
    avgdl = sum(len(p) for p in passages) / n
    idf = {t: math.log(1.0 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in set(query)}
    scores = []
    for passage, tf in zip(passages, counts, strict=True):
        if not passage:
            scores.append(0.0)
            continue
        norm = k1 * (1.0 - b + b * len(passage) / avgdl)
        scores.append(sum(idf[t] * tf[t] * (k1 + 1.0) / (tf[t] + norm) for t in query if tf[t]))
    return scores


def query_likelihood(
    query: Sequence[T], passages: Sequence[Sequence[T]], mu: float = 100.0
) -> list[float]:
    """Log-likelihood of the query under each passage's Dirichlet-smoothed language model:
    Σ over query terms (with multiplicity) of ln((tf + μ·P(t|C)) / (|p| + μ)), with C the
    concatenated passages. A term absent from C has no smoothed probability and is skipped. An
    empty passage has no language model of its own: it gets the lowest score of the others (the
    smoothed formula would otherwise rank it above every long passage without the query terms)."""
    if not passages:
        return []
    counts = [Counter(p) for p in passages]
    collection = Counter()
    for c in counts:
        collection.update(c)
    total = sum(collection.values())
    terms = [t for t in query if collection[t]]
    scores = [
        sum(math.log((tf[t] + mu * collection[t] / total) / (len(p) + mu)) for t in terms)
        for p, tf in zip(passages, counts, strict=True)
    ]
    filled = [s for s, p in zip(scores, passages, strict=True) if p]
    lowest = min(filled, default=0.0)
    return [s if p else lowest for s, p in zip(scores, passages, strict=True)]


RANKERS: dict[str, Callable[..., list[float]]] = {"bm25": bm25, "qlm": query_likelihood}


def predicted_relevant(scores: Sequence[float], n_relevant: int) -> list[bool]:
    """A ranker's relevance prediction: its top ``n_relevant`` passages; among equal scores the
    earlier passage wins (a deterministic order, as the retriever's rank order would be)."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    top = set(order[: max(n_relevant, 0)])
    return [i in top for i in range(len(scores))]


def agreement(labels: Sequence[bool], rankings: Sequence[Sequence[float]]) -> list[float]:
    """The confidence target of paper eq. 2, per passage: (1/K) Σ_k I(M_k(r_i|q) = r̄_i), the share
    of the K rankers whose prediction matches the label. A ranker predicts its top n passages
    relevant, n the number of relevant labels, so that rankers are judged on ordering alone and
    need no score threshold."""
    if not rankings:
        raise ValueError("agreement needs at least one ranking (K >= 1)")
    for k, scores in enumerate(rankings):
        if len(scores) != len(labels):
            raise ValueError(
                f"ranking {k} scores {len(scores)} passages, the labels cover {len(labels)}"
            )
    n = sum(bool(label) for label in labels)
    predictions = [predicted_relevant(scores, n) for scores in rankings]
    return [
        sum(pred[i] == bool(label) for pred in predictions) / len(rankings)
        for i, label in enumerate(labels)
    ]


def normalised(scores: Sequence[float], floor: float = FLOOR) -> list[float]:
    """The w/o-LPR guidance α: scores / max, clamped to [floor, 1], so the best passage keeps its
    full attention and none is cut off (log α stays finite). All-zero scores (no query term in any
    passage) say nothing: every α is 1, i.e. plain attention. Needs a positive maximum when any
    score is non-zero: BM25's scores, not query-likelihood's log-probabilities."""
    if not scores:
        return []
    top = max(scores)
    if top <= 0.0:
        if any(scores):
            raise ValueError(
                f"normalised needs non-negative scores with a positive maximum, got max {top}"
            )
        return [1.0] * len(scores)
    return [min(1.0, max(floor, s / top)) for s in scores]
