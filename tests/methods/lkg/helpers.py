"""Shared pieces of the LKG-RALM method tests: a random tiny Llama over the world's vocabulary,
the base tokenizer and one with the boundary markers, an attached LKG model and batches."""

import torch
from transformers import LlamaForCausalLM

from zoomattn.methods.lkg.config import LkgConfig
from zoomattn.methods.lkg.model import attach
from zoomattn.modeling.boundary import add_boundary_tokens
from zoomattn.modeling.pretrain import llama_config
from zoomattn.training.batching import encode_example, encode_prompt, left_pad, pad_batch

TINY = dict(hidden=32, layers=2, heads=4, kv_heads=2, intermediate=64, max_positions=512)
LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}


def tiny_base(base_tok, seed=0):
    """A random tiny Llama whose vocabulary is the base tokenizer's: the markers lie past it."""
    torch.manual_seed(seed)
    config = llama_config(len(base_tok), TINY, base_tok)
    config.initializer_range = 0.2  # far from uniform logits: greedy tokens vary
    config._attn_implementation = "zoomattn"
    return LlamaForCausalLM(config).eval()


def lkg_config(tok, **values) -> LkgConfig:
    values.setdefault("middle_heads", [[0, 1], [1, 2]])
    values.setdefault("dropout", 0.0)
    return LkgConfig(boundary_ids=add_boundary_tokens(tok), **values)


def attached_lkg(base_tok, tok, seed=0, **values):
    model = tiny_base(base_tok, seed)
    attach(model, lkg_config(tok, **values))
    return model


def batch_of(tok, records, answers=True):
    if answers:
        return pad_batch([encode_example(tok, r) for r in records], tok.pad_token_id)
    return left_pad([encode_prompt(tok, r) for r in records], tok.pad_token_id)
