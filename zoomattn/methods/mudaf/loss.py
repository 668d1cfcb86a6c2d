"""MuDAF's contrastive loss (paper §3.2 and §4.2, docs/papers.md §3).

For each record: the query is the post-RoPE query of every selected head at the last token of the
question anchor (the record's prompt without documents, run as its own forward pass); the keys are
the post-RoPE keys of the head's KV head (GQA: query head h reads KV head h // (H / KV)),
mean-pooled over each passage's tokens, every passage run apart (tokenised alone, after the
tokenizer's bos when it has one; the pool leaves bos and padding out). One golden passage comes
first, then up to ``negatives`` others; the heads' vectors are concatenated before the cosine, and
the loss is InfoNCE with temperature τ. Which golden passage and which negatives: drawn from
(seed, step), so a resumed run draws what an uninterrupted one does.
"""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F

from zoomattn.attention.interface import capturing_qk
from zoomattn.data.tasks import Record
from zoomattn.modeling.chat import prompt_ids
from zoomattn.modeling.loading import unwrap


def row_losses(query, keys, valid, tau: float) -> torch.Tensor:
    """InfoNCE of each row: −log softmax(cos(q, k_p) / τ over the valid keys) at the positive
    (key 0). query ``[B, D]``, keys ``[B, P, D]``, valid ``[B, P]`` bool."""
    if not bool(valid[:, 0].all()):
        raise ValueError("info_nce: every row needs its positive, key 0, to be valid")
    keys = torch.where(valid[..., None], keys, keys[:, :1])  # no 0/0 from padding keys
    sim = F.cosine_similarity(query[:, None, :], keys, dim=-1) / tau
    sim = sim.masked_fill(~valid, float("-inf"))
    return -torch.log_softmax(sim, dim=-1)[:, 0]


def info_nce(query, keys, valid, tau: float) -> torch.Tensor:
    """Mean InfoNCE over rows (see ``row_losses``)."""
    return row_losses(query, keys, valid, tau).mean()


def anchor_ids(tok, record: Record) -> list[int]:
    """The question anchor: the record's prompt with no documents (our tokenizer: ``<bos>
    question : … answer :``; a hub tokenizer: the chat template's user turn and answer cue)."""
    return prompt_ids(tok, {**record, "documents": [], "golden": [], "placement": "vanilla"})


def passage_ids(tok, text: str) -> tuple[list[int], int]:
    """A passage tokenised alone, after bos when the tokenizer has one; and where it starts."""
    bos = [] if tok.bos_token_id is None else [tok.bos_token_id]
    return bos + tok(text, add_special_tokens=False)["input_ids"], len(bos)


def contrastive_examples(
    tok, records: list[Record], negatives: int, seed: int, step: int
) -> list[dict | None]:
    """Per record ``{"anchor", "passages" (positive first), "starts"}``, or None for a record
    without a golden or without a non-golden passage."""
    rng = random.Random(f"mudaf/{seed}/{step}")
    out = []
    for record in records:
        docs = record["documents"]
        usable = [i for i, d in enumerate(docs) if d.strip()]
        golden = set(record["golden"])
        positives = [i for i in usable if i in golden]
        others = [i for i in usable if i not in golden]
        if not positives or not others:
            out.append(None)
            continue
        chosen = [rng.choice(positives), *rng.sample(others, min(negatives, len(others)))]
        encoded = [passage_ids(tok, docs[i]) for i in chosen]
        out.append(
            {
                "anchor": anchor_ids(tok, record),
                "passages": [ids for ids, _ in encoded],
                "starts": [start for _, start in encoded],
            }
        )
    return out


def _backbone(model):
    """The decoder stack without the LM head (inside a peft wrapper: LoRA layers included)."""
    inner = unwrap(model)
    return getattr(inner, inner.base_model_prefix)


def _right_pad(seqs: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return ids.to(device), mask.to(device)


def _captured(model, seqs, pad_id, layers) -> tuple[dict, torch.Tensor]:
    """Post-RoPE (query, key) of the given layers for right-padded seqs, and the mask."""
    ids, mask = _right_pad(seqs, pad_id, model.device)
    with capturing_qk(model) as modules:
        for layer in layers:
            if layer >= len(modules):
                raise ValueError(f"selected: layer {layer}, but the model has {len(modules)}")
        _backbone(model)(input_ids=ids, attention_mask=mask, use_cache=False)
        return {layer: modules[layer].captured_qk for layer in layers}, mask


def head_vectors(model, examples: list[dict], selected, pad_id: int):
    """(query ``[N, n·d]``, keys ``[N, P, n·d]``, valid ``[N, P]``) of the selected heads, in the
    order of ``selected``; P is the most passages of any example."""
    layers = sorted({layer for layer, _ in selected})
    qk, _ = _captured(model, [e["anchor"] for e in examples], pad_id, layers)
    n_heads = qk[layers[0]][0].shape[1]
    bad = [[layer, h] for layer, h in selected if h >= n_heads]
    if bad:
        raise ValueError(f"selected: heads {bad} do not exist (the model has {n_heads} per layer)")
    device = qk[layers[0]][0].device
    rows = torch.arange(len(examples), device=device)
    last = torch.tensor([len(e["anchor"]) - 1 for e in examples], device=device)
    query = torch.cat([qk[layer][0][rows, h, last].float() for layer, h in selected], dim=-1)

    passages = [p for e in examples for p in e["passages"]]
    qk, mask = _captured(model, passages, pad_id, layers)
    starts = torch.tensor([s for e in examples for s in e["starts"]], device=mask.device)
    pool = mask * (torch.arange(mask.shape[1], device=mask.device)[None] >= starts[:, None])
    pool = (pool / pool.sum(1, keepdim=True)).float()
    flat = []
    for layer, h in selected:
        key = qk[layer][1]  # [M, KV, S, d]
        group = n_heads // key.shape[1]
        flat.append(torch.einsum("ms,msd->md", pool, key[:, h // group].float()))
    counts = [len(e["passages"]) for e in examples]
    keys = torch.nn.utils.rnn.pad_sequence(
        list(torch.cat(flat, dim=-1).split(counts)), batch_first=True
    )
    valid = torch.arange(keys.shape[1])[None] < torch.tensor(counts)[:, None]
    return query, keys, valid.to(device)


def contrastive_loss_sum(model, examples: list[dict], selected, tau: float, pad_id: int):
    """Summed InfoNCE over the examples; a zero that backprops (to nothing) when there are none."""
    if not examples:
        return torch.zeros((), device=model.device, requires_grad=True)
    query, keys, valid = head_vectors(model, examples, selected, pad_id)
    return row_losses(query, keys, valid, tau).sum()
