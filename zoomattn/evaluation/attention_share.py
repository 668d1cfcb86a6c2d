"""Golden attention share (OpAmp Fig. 1/5/6): where the last prompt token's attention goes.

For each example, every layer's last-row attention (OpAmp: the signed M̄ row) is summed over each
document's tokens, averaged over heads and layers, then normalised over documents. Averaging before
normalising keeps the denominator positive even where single OpAmp heads put negative mass on a
document; a document's share can still fall outside [0, 1] in principle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from zoomattn.attention.interface import recording_last_row
from zoomattn.modeling.chat import prompt_text


@dataclass(frozen=True)
class EncodedPrompt:
    ids: list[int]  # the prompt's token ids, prefix included
    text: str  # the prompt text after the prefix ids
    doc_chars: list[tuple[int, int]]  # each document's [start, end) character span in text
    offsets: list[tuple[int, int]]  # each text token's character offsets
    shift: int  # ids before the text: token i of text is ids[i + shift]


def encoded_prompt(tok, record: dict) -> EncodedPrompt:
    prefix, prompt = prompt_text(tok, record)
    enc = tok(prompt, add_special_tokens=False, return_offsets_mapping=True)
    chars, cursor = [], 0
    for doc in record["documents"]:
        start = prompt.index(doc, cursor)
        cursor = start + len(doc)
        chars.append((start, cursor))
    return EncodedPrompt(
        prefix + enc["input_ids"], prompt, chars, enc["offset_mapping"], len(prefix)
    )


def document_spans(tok, record: dict) -> tuple[list[int], list[tuple[int, int]]]:
    """Prompt token ids and each document's [start, end) token span."""
    p = encoded_prompt(tok, record)
    spans = []
    for start, end in p.doc_chars:
        toks = [i + p.shift for i, (a, b) in enumerate(p.offsets) if a >= start and b <= end]
        spans.append((toks[0], toks[-1] + 1))
    return p.ids, spans


@torch.no_grad()
def last_rows(model, ids: list[int], dtype=torch.float64) -> torch.Tensor:
    """Every layer's attention row of the last prompt token: ``[layers, heads, S]`` in ``dtype``
    (one row per head, never the matrix)."""
    with recording_last_row(model) as layers:
        model(input_ids=torch.tensor([ids], device=model.device), use_cache=False)
        return torch.stack([m.last_row[0] for m in layers]).to(dtype).cpu()


def passage_attention(model, tok, record: dict, dtype=torch.float64) -> np.ndarray:
    """The last prompt token's attention summed over each document: ``[layers, heads, docs]``
    (one attention row per head, never the matrix), summed in ``dtype``."""
    ids, spans = document_spans(tok, record)
    rows = last_rows(model, ids, dtype)
    return torch.stack([rows[..., a:b].sum(-1) for a, b in spans], dim=-1).numpy()


def document_shares(model, tok, record: dict) -> np.ndarray:
    mass = torch.from_numpy(passage_attention(model, tok, record, torch.float32))
    mean_mass = mass.mean(dim=(0, 1))
    return (mean_mass / mean_mass.sum()).numpy()


def golden_attention(model, tok, records: list[dict]) -> dict:
    """Per-example shares, and the mean golden/noise share by the golden document's position."""
    n_docs = len(records[0]["documents"])
    shares, golden_pos = [], []
    for rec in tqdm(records, desc="attention", mininterval=5):
        if len(rec["documents"]) != n_docs or len(rec["golden"]) != 1:
            raise ValueError(f"{rec['id']}: attention share needs one golden doc among {n_docs}")
        shares.append(document_shares(model, tok, rec))
        golden_pos.append(rec["golden"][0])
    shares, golden_pos = np.stack(shares), np.array(golden_pos)
    golden = shares[np.arange(len(shares)), golden_pos]
    by_position = []
    for p in range(n_docs):
        at_p = golden_pos == p
        noise_at_p = shares[~at_p, p]
        by_position.append(
            {
                "position": p + 1,
                "golden_share": float(golden[at_p].mean()) if at_p.any() else None,
                "noise_share": float(noise_at_p.mean()) if len(noise_at_p) else None,
                "n_golden_here": int(at_p.sum()),
            }
        )
    return {
        "n_examples": len(records),
        "n_documents": n_docs,
        "mean_golden_share": float(golden.mean()),
        "uniform_share": 1.0 / n_docs,
        "golden_is_top": float((shares.argmax(1) == golden_pos).mean()),
        "by_position": by_position,
        "mean_share_by_position": shares.mean(0).tolist(),
    }
