"""Where the last prompt token's attention goes: onto each document, and onto the answer.

Golden attention share (OpAmp Fig. 1/5/6): every layer's last-row attention (OpAmp: the signed M̄
row) is summed over each document's tokens, averaged over heads and layers, then normalised over
documents. Averaging before normalising keeps the denominator positive even where single OpAmp
heads put negative mass on a document; a document's share can still fall outside [0, 1] in
principle.

Answer-token attention gap (rectification Fig. 3): the same row (after softmax, averaged over
layers and heads) on the tokens of the gold answer inside the golden documents, minus that on every
other prompt token, × 1000; the mean over examples whose golden documents contain the answer.
``golden_attention`` takes both from one forward per example.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from zoomattn.attention.interface import recording_last_row
from zoomattn.evaluation.metrics import bootstrap_ci
from zoomattn.modeling.chat import prompt_text

GAP_SCALE = 1000.0


@dataclass(frozen=True)
class EncodedPrompt:
    ids: list[int]  # the prompt's token ids, prefix included
    text: str  # the prompt text after the prefix ids
    doc_chars: list[tuple[int, int]]  # each document's [start, end) character span in text
    offsets: list[tuple[int, int]]  # each text token's character offsets
    shift: int  # ids before the text: token i of text is ids[i + shift]

    def token_spans(self, chars: list[tuple[int, int]]) -> list[int]:
        """Positions in ``ids`` of the text tokens that overlap any of the character spans."""
        return [
            i + self.shift
            for i, (a, b) in enumerate(self.offsets)
            if b > a and any(a < e and b > s for s, e in chars)
        ]


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


def _document_spans(p: EncodedPrompt) -> list[tuple[int, int]]:
    spans = []
    for start, end in p.doc_chars:
        toks = [i + p.shift for i, (a, b) in enumerate(p.offsets) if a >= start and b <= end]
        spans.append((toks[0], toks[-1] + 1))
    return spans


def document_spans(tok, record: dict) -> tuple[list[int], list[tuple[int, int]]]:
    """Prompt token ids and each document's [start, end) token span."""
    p = encoded_prompt(tok, record)
    return p.ids, _document_spans(p)


def _answer_positions(p: EncodedPrompt, record: dict) -> list[int]:
    chars = []
    for start, end in (p.doc_chars[i] for i in sorted(set(record["golden"]))):
        for answer in filter(None, record["answers"]):
            at = p.text.find(answer, start, end)
            while at != -1:
                chars.append((at, at + len(answer)))
                at = p.text.find(answer, at + len(answer), end)
    return sorted(set(p.token_spans(chars)))


def answer_positions(tok, record: dict) -> tuple[list[int], list[int]]:
    """Prompt ids and the positions of gold-answer tokens inside the golden documents."""
    p = encoded_prompt(tok, record)
    return p.ids, _answer_positions(p, record)


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
    return _document_mass(last_rows(model, ids, dtype), spans).numpy()


def _document_mass(rows: torch.Tensor, spans: list[tuple[int, int]]) -> torch.Tensor:
    return torch.stack([rows[..., a:b].sum(-1) for a, b in spans], dim=-1)


def _shares(rows: torch.Tensor, spans: list[tuple[int, int]]) -> np.ndarray:
    mean_mass = _document_mass(rows, spans).mean(dim=(0, 1))
    return (mean_mass / mean_mass.sum()).numpy()


def _gap(rows: torch.Tensor, answer: list[int]) -> float:
    row = rows.mean(dim=(0, 1))
    is_answer = torch.zeros(row.shape[-1], dtype=torch.bool)
    is_answer[answer] = True
    return float(row[is_answer].mean() - row[~is_answer].mean()) * GAP_SCALE


def _gap_summary(gaps: list[float]) -> dict:
    if not gaps:
        return {"answer_gap": None, "answer_gap_examples": 0}
    low, high = bootstrap_ci(gaps)
    return {
        "answer_gap": float(np.mean(gaps)),
        "answer_gap_ci_low": low,
        "answer_gap_ci_high": high,
        "answer_gap_examples": len(gaps),
    }


def document_shares(model, tok, record: dict) -> np.ndarray:
    p = encoded_prompt(tok, record)
    return _shares(last_rows(model, p.ids, torch.float32), _document_spans(p))


def answer_gap(model, tok, records: list[dict]) -> dict:
    """The answer-token gap over ``records``, skipping those whose golden documents lack the
    answer (e.g. long-form answers)."""
    gaps = []
    for rec in tqdm(records, desc="answer gap", mininterval=5):
        p = encoded_prompt(tok, rec)
        if answer := _answer_positions(p, rec):
            gaps.append(_gap(last_rows(model, p.ids, torch.float32), answer))
    return _gap_summary(gaps)


def golden_attention(model, tok, records: list[dict], answer_gap_examples: int = 0) -> dict:
    """Per-example shares, and the mean golden/noise share by the golden document's position;
    with ``answer_gap_examples``, the answer gap of the first that many records, from the same
    forward."""
    n_docs = len(records[0]["documents"])
    shares, golden_pos, gaps = [], [], []
    for i, rec in enumerate(tqdm(records, desc="attention", mininterval=5)):
        if len(rec["documents"]) != n_docs or len(rec["golden"]) != 1:
            raise ValueError(f"{rec['id']}: attention share needs one golden doc among {n_docs}")
        p = encoded_prompt(tok, rec)
        rows = last_rows(model, p.ids, torch.float32)
        shares.append(_shares(rows, _document_spans(p)))
        golden_pos.append(rec["golden"][0])
        if i < answer_gap_examples and (answer := _answer_positions(p, rec)):
            gaps.append(_gap(rows, answer))
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
    summary = {
        "n_examples": len(records),
        "n_documents": n_docs,
        "mean_golden_share": float(golden.mean()),
        "uniform_share": 1.0 / n_docs,
        "golden_is_top": float((shares.argmax(1) == golden_pos).mean()),
        "by_position": by_position,
        "mean_share_by_position": shares.mean(0).tolist(),
    }
    return summary | (_gap_summary(gaps) if answer_gap_examples else {})
