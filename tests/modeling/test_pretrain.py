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
        )
        results.append(metrics)
    assert results[0] == results[1]
    assert results[0]["copy_phase_steps"] == 6 and results[0]["total_steps"] == 10
    a, b = (load_file(tmp_path / r / "model.safetensors") for r in ("a", "b"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_golden_removed_probe_drops_exactly_the_golden_documents(world):
    sets = probe_sets(world, seed=1, n=10)
    for full, cut in zip(sets["noise_0.8"], sets["noise_0.8_golden_removed"], strict=True):
        assert len(cut["documents"]) == len(full["documents"]) - 1
        golden = full["documents"][full["golden"][0]]
        assert golden not in cut["documents"]
