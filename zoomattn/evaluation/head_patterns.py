"""Attention patterns of RAG heads (LKG-RALM §3.2, Fig. 2, App. A.2 and D).

The paper sorts every head by where the last prompt token's attention goes. With the row's first
``head_tokens`` keys as the *head*, its last ``tail_tokens`` keys as the *tail* and the rest as the
*middle* (App. D: 3 and 3), a row is, checked in this order (every threshold is strict, ">"):

- edge: head + tail mass > 0.75;
- uniform: middle mass > 0.90, more than 40% of the S keys above 1/S, and no key above 0.10;
- middle: middle mass > 0.90, and one or two keys above 0.30 ("concentrated on middle") or three
  or more keys above 0.10 ("scattered over middle");
- other: none of these.

Uniform and middle exclude each other (no key above 0.10 against at least one above it), and edge
and a middle mass above 0.90 cannot hold together for a row summing to 1, so the order matters
only for signed rows (OpAmp). Because every threshold is strict, an exactly uniform row (every
weight equal to 1/S) is *not* uniform: no key is above 1/S.

``head_patterns`` classifies every head on each example and calls a head by its most frequent
class; the heads called middle are the ones LKG-RALM's relevance-guided fusion acts on.
"""

from __future__ import annotations

import torch
from tqdm import tqdm

from zoomattn.evaluation.attention_share import last_rows
from zoomattn.training.batching import encode_prompt

CLASSES = ("edge", "uniform", "middle", "other")
HEAD_TOKENS = 3
TAIL_TOKENS = 3
EDGE_MASS = 0.75  # head + tail mass above which a row is edge-focused
MIDDLE_MASS = 0.90  # middle mass above which a row may be uniform or middle-focused
UNIFORM_SPREAD = 0.40  # uniform: more than this share of the keys above 1/S ...
UNIFORM_MAX_KEY = 0.10  # ... and no key above this
PEAK_KEY = 0.30  # middle, concentrated: one to PEAK_KEYS keys above this
PEAK_KEYS = 2
SCATTER_KEY = 0.10  # middle, scattered: SCATTER_KEYS or more keys above this
SCATTER_KEYS = 3
THRESHOLDS = {
    "edge_mass": EDGE_MASS,
    "middle_mass": MIDDLE_MASS,
    "uniform_spread": UNIFORM_SPREAD,
    "uniform_max_key": UNIFORM_MAX_KEY,
    "peak_key": PEAK_KEY,
    "peak_keys": PEAK_KEYS,
    "scatter_key": SCATTER_KEY,
    "scatter_keys": SCATTER_KEYS,
}


def _check_length(n_keys: int, head_tokens: int, tail_tokens: int, what: str) -> None:
    if n_keys < head_tokens + tail_tokens + 1:
        raise ValueError(
            f"{what}: {n_keys} keys, a head/middle/tail split of {head_tokens}/*/{tail_tokens} "
            f"needs at least {head_tokens + tail_tokens + 1}"
        )


def classify_row(weights, head_tokens: int = HEAD_TOKENS, tail_tokens: int = TAIL_TOKENS) -> str:
    """The class of one attention row ``[S]``: App. D read literally, one key at a time (the
    reference that ``classify_rows`` is tested against)."""
    w = [float(x) for x in weights]
    _check_length(len(w), head_tokens, tail_tokens, "attention row")
    middle = w[head_tokens : len(w) - tail_tokens]
    if sum(w[:head_tokens]) + sum(w[len(w) - tail_tokens :]) > EDGE_MASS:
        return "edge"
    if sum(middle) > MIDDLE_MASS:
        above_mean = sum(1 for x in w if x > 1 / len(w))
        if above_mean > UNIFORM_SPREAD * len(w) and max(w) <= UNIFORM_MAX_KEY:
            return "uniform"
        peaks = sum(1 for x in w if x > PEAK_KEY)
        if 1 <= peaks <= PEAK_KEYS or sum(1 for x in w if x > SCATTER_KEY) >= SCATTER_KEYS:
            return "middle"
    return "other"


def region_mass(
    rows: torch.Tensor, head_tokens: int = HEAD_TOKENS, tail_tokens: int = TAIL_TOKENS
) -> torch.Tensor:
    """Each row's (head, middle, tail) mass, in float64: ``[..., 3]``."""
    rows = rows.to(torch.float64)
    s = rows.shape[-1]
    return torch.stack(
        [
            rows[..., :head_tokens].sum(-1),
            rows[..., head_tokens : s - tail_tokens].sum(-1),
            rows[..., s - tail_tokens :].sum(-1),
        ],
        dim=-1,
    )


def classify_rows(
    rows: torch.Tensor, head_tokens: int = HEAD_TOKENS, tail_tokens: int = TAIL_TOKENS
) -> torch.Tensor:
    """The class index (into ``CLASSES``) of every row of ``rows [..., S]``, computed in float64:
    a ``LongTensor [...]``."""
    s = rows.shape[-1]
    _check_length(s, head_tokens, tail_tokens, "attention rows")
    rows = rows.to(torch.float64)
    head, middle, tail = region_mass(rows, head_tokens, tail_tokens).unbind(-1)
    focused = middle > MIDDLE_MASS
    uniform = (
        focused
        & ((rows > 1 / s).sum(-1).to(torch.float64) > UNIFORM_SPREAD * s)  # as Python compares
        & (rows.amax(-1) <= UNIFORM_MAX_KEY)
    )
    peaks = (rows > PEAK_KEY).sum(-1)
    middle_focused = focused & (
        ((peaks >= 1) & (peaks <= PEAK_KEYS)) | ((rows > SCATTER_KEY).sum(-1) >= SCATTER_KEYS)
    )
    out = torch.full(head.shape, CLASSES.index("other"), dtype=torch.long)
    out = torch.where(middle_focused, CLASSES.index("middle"), out)  # later lines take precedence
    out = torch.where(uniform, CLASSES.index("uniform"), out)
    return torch.where(head + tail > EDGE_MASS, CLASSES.index("edge"), out)


def head_patterns(model, tok, records: list[dict], examples: int) -> dict:
    """Per-head class shares over the first ``examples`` records, each head's majority class and
    the pattern distribution (Fig. 2), as JSON."""
    records = records[:examples]
    if not records:
        raise ValueError("head patterns need at least one record")
    counts = mass = None
    for rec in tqdm(records, desc="head patterns", mininterval=5):
        ids = encode_prompt(tok, rec)
        _check_length(len(ids), HEAD_TOKENS, TAIL_TOKENS, f"record {rec['id']}")
        rows = last_rows(model, ids)
        one_hot = torch.nn.functional.one_hot(classify_rows(rows), len(CLASSES))
        counts = one_hot if counts is None else counts + one_hot  # [L, H, classes]
        region = region_mass(rows).sum((0, 1))
        mass = region if mass is None else mass + region
    n = len(records)
    n_layers, n_heads, _ = counts.shape
    head_class = counts.argmax(-1)  # the first maximum: ties go to the earlier class
    by_class = torch.bincount(head_class.ravel(), minlength=len(CLASSES)).to(torch.float64)
    example_counts = counts.sum((0, 1)).to(torch.float64)
    mean_mass = mass / (n * n_layers * n_heads)
    middle = CLASSES.index("middle")
    return {
        "examples": n,
        "layers": n_layers,
        "heads": n_heads,
        "head_tokens": HEAD_TOKENS,
        "tail_tokens": TAIL_TOKENS,
        "thresholds": dict(THRESHOLDS),
        "classes": list(CLASSES),
        "class_share": (counts.to(torch.float64) / n).tolist(),
        "head_class": [[CLASSES[c] for c in layer] for layer in head_class.tolist()],
        "distribution": dict(zip(CLASSES, (by_class / head_class.numel()).tolist(), strict=True)),
        "example_distribution": dict(
            zip(CLASSES, (example_counts / example_counts.sum()).tolist(), strict=True)
        ),
        "mean_mass": dict(zip(("head", "middle", "tail"), mean_mass.tolist(), strict=True)),
        "middle_heads": (head_class == middle).nonzero().tolist(),
    }
