"""Fixtures of the MuDAF tests: multi-hop records with distractors and the small base model."""

import random

import pytest

from zoomattn.data import tasks
from zoomattn.data.world import FactSampler
from zoomattn.modeling.loading import load_base

SELECTED = [[1, 0], [1, 3], [2, 1]]  # 4 query heads, 2 KV heads: heads 0, 1 -> KV 0, head 3 -> KV 1


@pytest.fixture
def records(world):
    s = FactSampler(world, random.Random(0))
    return [tasks.distractor_qa(s, "multihop", 4) for _ in range(3)]


@pytest.fixture
def model(base_dir):
    return load_base(base_dir).eval()
