"""LKG-RALM's boundary tokens (paper §4.2): ``[d] passage [e_i]`` and ``[q] question [e_q]``.

The markers are added to the tokenizer as special tokens (never split, skipped when decoding). A
model's embedding matrix is never resized for them: the LKG method looks up its own trainable
boundary embeddings at the marker positions (``methods/lkg/model.py``), so a tokenizer whose new
ids lie past the embedding rows (our tiny base: vocab = len(tokenizer)) works as a hub one does.
Whether a tokenizer holds the markers decides how every prompt is rendered (``chat.prompt_text``):
an LKG model's saved tokenizer has them, every other model's has not.
"""

from __future__ import annotations

BOUNDARY_TOKENS = ("[d]", "[e_i]", "[q]", "[e_q]")


def _ids(tok) -> list[int | None]:
    added = tok.get_added_vocab()  # the markers are added tokens; the full vocab is slow to build
    return [added.get(t) for t in BOUNDARY_TOKENS]


def has_boundary_tokens(tok) -> bool:
    return all(i is not None for i in _ids(tok))


def add_boundary_tokens(tok) -> list[int]:
    """Add the four markers as extra special tokens where missing (in place; adding twice changes
    nothing) and return their ids in ``BOUNDARY_TOKENS`` order."""
    missing = [t for t, i in zip(BOUNDARY_TOKENS, _ids(tok), strict=True) if i is None]
    if missing:
        tok.add_special_tokens(
            {"extra_special_tokens": missing}, replace_extra_special_tokens=False
        )
    ids = _ids(tok)
    if any(i is None for i in ids) or len(set(ids)) != len(ids):
        raise RuntimeError(f"tokenizer {tok.name_or_path!r}: boundary tokens not added ({ids})")
    return ids


def mark_record(record: dict) -> dict:
    """A copy with each document as ``[d] doc [e_i]`` and the current question as
    ``[q] question [e_q]``; a conversation's earlier questions are left as they are."""
    d, e_i, q, e_q = BOUNDARY_TOKENS
    return {
        **record,
        "documents": [f"{d} {doc} {e_i}" for doc in record["documents"]],
        "question": f"{q} {record['question']} {e_q}",
    }
