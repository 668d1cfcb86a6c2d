"""Pretraining the tiny base model from scratch on the synthetic world, with a curriculum.

docs/notes.md §2: with facts re-sampled per sequence the model first sits on a plateau (a well-typed
but fixed answer) until copying from the context emerges. Phase ``copy`` trains on short, noise-free
multi-question sequences until teacher-forced EM at noise 0 reaches a target; phase ``mix`` then
adds plain documents (the famous entities' canonical facts), closed-book questions and noise.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from zoomattn.data.tasks import closed_book, single_doc
from zoomattn.data.world import ATTRIBUTES, Fact, FactSampler, World
from zoomattn.placement import CPU, Placement
from zoomattn.training.batching import IGNORE, encode_example, pad_batch
from zoomattn.training.checkpoint import Checkpointer

log = logging.getLogger(__name__)


def llama_config(vocab_size: int, m: dict, tok: PreTrainedTokenizerFast) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=m["hidden"],
        num_hidden_layers=m["layers"],
        num_attention_heads=m["heads"],
        num_key_value_heads=m["kv_heads"],
        intermediate_size=m["intermediate"],
        max_position_embeddings=m["max_positions"],
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )


def _copy_sequence(s: FactSampler) -> dict:
    """1-3 noise-free documents about different entities, then 2-3 questions on them."""
    entities = s.entities(s.rng.randint(1, 3))
    facts, docs = [], []
    for e in entities:
        attrs = s.rng.sample(list(ATTRIBUTES), 2)
        own = [Fact(e, a, s.value(a)) for a in attrs]
        facts += own
        docs.append(" ".join(f.sentence() for f in own))
    asked = s.rng.sample(facts, min(len(facts), s.rng.randint(2, 3)))
    turns = [(f"what is the {f.attribute} of {f.entity} ?", f.value) for f in asked]
    return {
        "documents": docs,
        "history": turns[:-1],
        "question": turns[-1][0],
        "answers": [turns[-1][1]],
    }


def _plain_document(s: FactSampler) -> dict:
    """Canonical facts of a famous entity as plain text (no question is asked about them here)."""
    entity = s.rng.choice(list(s.world.famous))
    attrs = s.rng.sample(list(ATTRIBUTES), 3)
    text = " ".join(Fact(entity, a, s.world.famous[entity][a]).sentence() for a in attrs[:2])
    last = attrs[2]
    # Rendered as a document whose last fact is the "answer" so the whole text is LM-trained.
    return {
        "documents": [text],
        "history": [],
        "question": f"what is the {last} of {entity} ?",
        "answers": [s.world.famous[entity][last]],
    }


def pretrain_example(s: FactSampler, phase: str, p: dict) -> dict:
    if phase == "copy":
        return _copy_sequence(s)
    u = s.rng.random()
    if u < p["plain_share"]:
        return _plain_document(s)
    if u < p["plain_share"] + p["closed_book_share"]:
        return closed_book(s)
    return single_doc(s, s.rng.choice(p["mix_noise_ratios"]))


def batch_at(world: World, tok, seed: int, step: int, phase: str, p: dict) -> dict:
    """The batch of a given step: a pure function of (seed, step, phase), so resume is exact."""
    s = FactSampler(world, random.Random(seed * 1_000_003 + step))
    examples = [
        encode_example(tok, pretrain_example(s, phase, p), answer_only=False)
        for _ in range(p["batch_size"])
    ]
    return pad_batch(examples, tok.pad_token_id)


@torch.no_grad()
def teacher_forced_em(model, tok, records: list[dict], batch_size: int = 64) -> float:
    """Share of records whose every answer token is the argmax under teacher forcing.

    The closing <eos> is not scored: mid-sequence answers in the copy phase end with "." instead.
    """
    model.eval()
    hits = 0
    for i in range(0, len(records), batch_size):
        batch = pad_batch(
            [encode_example(tok, r) for r in records[i : i + batch_size]],
            tok.pad_token_id,
            model.device,
        )
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        pred, gold = logits[:, :-1].argmax(-1), batch["labels"][:, 1:]
        scored = (gold != IGNORE) & (gold != tok.eos_token_id)
        hits += ((pred == gold) | ~scored).all(dim=1).sum().item()
    model.train()
    return hits / len(records)


def probe_sets(world: World, seed: int, n: int) -> dict[str, list[dict]]:
    """Held-out checks of a meaningful base: EM by noise ratio, and with the golden doc removed."""
    sets = {}
    for r in (0.0, 0.5, 0.8, 0.9):
        s = FactSampler(world, random.Random(seed + int(r * 100)))
        sets[f"noise_{r}"] = [single_doc(s, r) for _ in range(n)]
    no_gold = []
    for rec in sets["noise_0.8"]:
        rec = dict(rec)
        rec["documents"] = [d for i, d in enumerate(rec["documents"]) if i not in rec["golden"]]
        no_gold.append(rec)
    sets["noise_0.8_golden_removed"] = no_gold
    return sets


def pretrain(
    world: World,
    tok,
    model_cfg: dict,
    p: dict,
    out_dir: Path,
    ckpt_dir: Path,
    threads: int,
    on_metrics=lambda metrics, step: None,
    placement: Placement = CPU,
    *,
    identity: str,
    on_start=lambda resumed_from_step: None,
) -> dict:
    """Train the base from scratch, in fp32 on the placement's device.

    ``identity`` (checkpoint.job_identity of the job's spec and world): a checkpoint made under
    another is discarded. A resumed run first sends ``on_metrics`` the metrics logged before the
    interruption again; ``on_start`` gets the step training resumes from (0: from scratch).
    """
    torch.manual_seed(p["seed"])
    torch.set_num_threads(threads)
    device = placement.torch_device()
    model = LlamaForCausalLM(llama_config(len(tok), model_cfg, tok)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=p["lr"], weight_decay=0.0)
    ckpt = Checkpointer(ckpt_dir, p["checkpoint_every"], identity)
    step, extra, history = ckpt.resume(model, optimizer, on_metrics, on_start)
    if step:
        log.info("resumed pretraining from step %d", step)
    copy_end = extra.get("copy_end")  # step at which the copy phase ended, once known
    probes = probe_sets(world, p["seed"] + 7919, p["probe_examples"])
    total_cap = p["copy_max_steps"] + p["mix_steps"]
    bar = tqdm(total=total_cap, initial=step, desc="pretrain", mininterval=5)
    model.train()
    while copy_end is None or step < copy_end + p["mix_steps"]:
        phase = "copy" if copy_end is None else "mix"
        batch = batch_at(world, tok, p["seed"], step, phase, p)
        batch = {k: v.to(device) for k, v in batch.items()}
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        bar.update(1)
        if step % p["log_every"] == 0:
            history({"pretrain_loss": loss.item()}, step)
        if phase == "copy" and (step % p["copy_eval_every"] == 0 or step >= p["copy_max_steps"]):
            em = teacher_forced_em(model, tok, probes["noise_0.0"])
            history({"copy_phase_em": em}, step)
            bar.set_postfix(phase=phase, em=f"{em:.2f}")
            if em >= p["copy_target_em"] or step >= p["copy_max_steps"]:
                copy_end = step
                log.info("copy phase ended at step %d with EM %.3f", step, em)
                bar.total = copy_end + p["mix_steps"]
        if ckpt.due(step):
            ckpt.save(step, model, optimizer, {"copy_end": copy_end, "metrics": history.by_step})
    bar.close()
    metrics = {f"base_em_{k}": teacher_forced_em(model, tok, v) for k, v in probes.items()}
    metrics.update(copy_phase_steps=copy_end, total_steps=step)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    on_metrics({k: v for k, v in metrics.items() if isinstance(v, float)}, step)
    return metrics
