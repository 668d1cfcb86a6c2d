"""The gpu lane: the attention probes (golden share, retrieval heads, head patterns, head masking,
score margins) run on CUDA and agree with the CPU where both compute in fp32."""

import random

import numpy as np
import pytest

from tests.gpu.lane import DEVICE, LANE
from zoomattn.data import tasks
from zoomattn.data.world import FactSampler
from zoomattn.evaluation.attention_share import golden_attention
from zoomattn.evaluation.head_patterns import head_patterns
from zoomattn.evaluation.rectification import score_margins
from zoomattn.evaluation.retrieval_heads import head_scores, masking_experiment
from zoomattn.modeling.loading import load_base
from zoomattn.placement import CPU, Placement

pytestmark = pytest.mark.gpu

FP32_THERE = Placement(DEVICE, "float32", LANE.gpus)


@pytest.fixture(scope="module")
def records(world):
    """Two-golden records (retrieval heads, patterns, masking)."""
    sampler = FactSampler(world, random.Random(5))
    recs = [tasks.distractor_qa(sampler, "multihop", 2) for _ in range(4)]
    for i, rec in enumerate(recs):
        rec["id"] = f"r-{i}"
    return recs


@pytest.fixture(scope="module")
def single(world):
    """One-golden records (golden share, score margins)."""
    sampler = FactSampler(world, random.Random(6))
    return [tasks.single_doc(sampler, 0.8) for _ in range(4)]


@pytest.fixture(scope="module")
def models(base_dir):
    return {p: load_base(base_dir, placement=p).eval() for p in (CPU, FP32_THERE, LANE)}


def test_golden_share_agrees_with_the_cpu_and_runs_in_bf16(models, tokenizer, single):
    cpu, there = (golden_attention(models[p], tokenizer, single, 2) for p in (CPU, FP32_THERE))
    assert cpu["mean_golden_share"] == pytest.approx(there["mean_golden_share"], abs=1e-4)
    assert cpu["answer_gap"] == pytest.approx(there["answer_gap"], abs=1e-4)
    bf16 = golden_attention(models[LANE], tokenizer, single, 2)
    assert 0 < bf16["mean_golden_share"] < 1
    assert bf16["mean_golden_share"] == pytest.approx(cpu["mean_golden_share"], abs=2e-2)


def test_retrieval_heads_and_masking_agree_with_the_cpu(models, tokenizer, records):
    cpu, there = (head_scores(models[p], tokenizer, records, 0.2) for p in (CPU, FP32_THERE))
    np.testing.assert_allclose(there["f1"], cpu["f1"], atol=1e-6)
    assert np.isfinite(head_scores(models[LANE], tokenizer, records, 0.2)["f1"]).all()
    runs = [
        masking_experiment(models[p], tokenizer, records, "em", cpu["f1"], [2], 1, 0, 2, 4)
        for p in (CPU, FP32_THERE)
    ]
    assert runs[0]["k"][0]["top_heads"] == runs[1]["k"][0]["top_heads"]


def test_head_patterns_and_score_margins_run_on_the_device(models, tokenizer, records, single):
    cpu, there = (head_patterns(models[p], tokenizer, records, 2) for p in (CPU, FP32_THERE))
    assert cpu["distribution"] == there["distribution"]
    margins = [score_margins(models[p], tokenizer, single[:2]) for p in (CPU, FP32_THERE)]
    assert margins[1]["median"] == pytest.approx(margins[0]["median"], rel=1e-4)
    assert head_patterns(models[LANE], tokenizer, records, 2)["distribution"]
