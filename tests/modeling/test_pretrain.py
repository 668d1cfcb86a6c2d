import logging

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import SMALL_MODEL
from zoomattn.modeling.pretrain import pretrain, probe_sets

SETTINGS = {
    "seed": 0,
    "lr": 3e-3,
    "batch_size": 4,
    "copy_target_em": 1.1,
    "copy_eval_every": 3,
    "copy_max_steps": 6,
    "mix_steps": 4,
    "mix_noise_ratios": [0.0, 0.5],
    "plain_share": 0.25,
    "closed_book_share": 0.05,
    "probe_examples": 4,
    "log_every": 2,
    "checkpoint_every": 5,
}


def test_pretraining_is_deterministic_and_runs_both_curriculum_phases(tmp_path, world, tokenizer):
    results = []
    for run in ("a", "b"):
        metrics = pretrain(
            world,
            tokenizer,
            SMALL_MODEL,
            SETTINGS,
            tmp_path / run,
            tmp_path / f"ckpt_{run}",
            threads=1,
            identity="job",
        )
        results.append(metrics)
    assert results[0] == results[1]
    assert results[0]["copy_phase_steps"] == 6 and results[0]["total_steps"] == 10
    a, b = (load_file(tmp_path / r / "model.safetensors") for r in ("a", "b"))
    assert all(torch.equal(a[k], b[k]) for k in a)


class Killed(Exception):
    pass


def _pretrain(world, tokenizer, tmp_path, run, ckpt, on_metrics, identity="job", **kw):
    return pretrain(
        world,
        tokenizer,
        SMALL_MODEL,
        SETTINGS,
        tmp_path / run,
        tmp_path / ckpt,
        1,
        on_metrics,
        identity=identity,
        **kw,
    )


def _killed_after_step_5(world, tokenizer, tmp_path, identity="job"):
    def die_at_step_6(metrics, step):  # the checkpoint of step 5 is the last one
        if step == 6:
            raise Killed

    with pytest.raises(Killed):
        _pretrain(world, tokenizer, tmp_path, "b", "ckpt_b", die_at_step_6, identity)
    assert (tmp_path / "ckpt_b" / "state.pt").exists()


def _same_weights(tmp_path):
    a, b = (load_file(tmp_path / r / "model.safetensors") for r in ("a", "b"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_interrupted_pretraining_resumes_to_the_same_weights_and_metric_history(
    tmp_path, world, tokenizer
):
    reference, resumed, started = [], [], []
    expected = _pretrain(
        world, tokenizer, tmp_path, "a", "ckpt_a", lambda m, s: reference.append((s, m))
    )
    _killed_after_step_5(world, tokenizer, tmp_path)
    metrics = _pretrain(
        world,
        tokenizer,
        tmp_path,
        "b",
        "ckpt_b",
        lambda m, s: resumed.append((s, m)),
        on_start=started.append,
    )
    assert started == [5] and metrics == expected
    _same_weights(tmp_path)
    by_step = {}  # what MLflow holds: a step's metrics, however they were sent
    for step, m in reference:
        by_step.setdefault(step, {}).update(m)
    assert {2, 3, 4} <= set(by_step)  # losses and a copy-phase EM from before the resume step
    resumed_by_step = {}
    for step, m in resumed:
        resumed_by_step.setdefault(step, {}).update(m)
    assert resumed_by_step == by_step


def test_a_pretraining_checkpoint_of_another_identity_is_discarded(
    tmp_path, world, tokenizer, caplog
):
    _pretrain(world, tokenizer, tmp_path, "a", "ckpt_a", lambda m, s: None, identity="new")
    _killed_after_step_5(world, tokenizer, tmp_path, identity="old")
    started = []
    with caplog.at_level(logging.INFO, logger="zoomattn"):
        _pretrain(
            world,
            tokenizer,
            tmp_path,
            "b",
            "ckpt_b",
            lambda m, s: None,
            identity="new",
            on_start=started.append,
        )
    assert started == [0] and "discarding checkpoint" in caplog.text
    assert "resumed" not in caplog.text
    _same_weights(tmp_path)


def test_golden_removed_probe_drops_exactly_the_golden_documents(world):
    sets = probe_sets(world, seed=1, n=10)
    for full, cut in zip(sets["noise_0.8"], sets["noise_0.8_golden_removed"], strict=True):
        assert len(cut["documents"]) == len(full["documents"]) - 1
        golden = full["documents"][full["golden"][0]]
        assert golden not in cut["documents"]
