"""Tokenizers of the LKG-RALM method tests: the world's base tokenizer, and one with the markers."""

import pytest

from zoomattn.data.tokenizer import build_tokenizer
from zoomattn.modeling.boundary import add_boundary_tokens


@pytest.fixture(scope="module")
def base_tok(world):
    return build_tokenizer(world.words())


@pytest.fixture(scope="module")
def tok(world):
    t = build_tokenizer(world.words())
    add_boundary_tokens(t)
    return t
