"""A word-level tokenizer over the world's closed vocabulary, saved as a transformers tokenizer."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIAL = {"pad_token": "<pad>", "unk_token": "<unk>", "bos_token": "<bos>", "eos_token": "<eos>"}


def build_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(SPECIAL.values())}
    for w in words:
        vocab.setdefault(w, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=SPECIAL["unk_token"]))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # join words with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=core, clean_up_tokenization_spaces=False, **SPECIAL
    )


def save_tokenizer(words: list[str], out_dir: Path) -> PreTrainedTokenizerFast:
    tok = build_tokenizer(words)
    tok.save_pretrained(out_dir)
    return tok
