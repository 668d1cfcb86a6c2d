import logging
import random
import shutil

import pytest
import torch

from zoomattn.training import checkpoint, distributed
from zoomattn.training.checkpoint import Checkpointer, MetricHistory, job_identity
from zoomattn.training.distributed import SINGLE, World

SPEC = {"run": "qlora", "finetune": {"lr": 1e-3, "steps": 6}, "code": "abc"}


def _trained(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    return model, optimizer


def _fresh() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(99)
    model = torch.nn.Linear(3, 2)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def test_a_checkpoint_of_the_same_identity_resumes_its_step_weights_and_extra(tmp_path):
    model, optimizer = _trained(0)
    Checkpointer(tmp_path, 2, "id-a").save(4, model, optimizer, {"metrics": {2: {"loss": 1.0}}})
    resumed, resumed_opt = _fresh()
    step, extra = Checkpointer(tmp_path, 2, "id-a").restore(resumed, resumed_opt)
    assert step == 4 and extra == {"metrics": {2: {"loss": 1.0}}}
    assert torch.equal(resumed.weight, model.weight) and torch.equal(resumed.bias, model.bias)
    assert resumed_opt.state_dict()["state"][0]["step"] == 1


def test_a_checkpoint_made_for_another_identity_is_discarded_and_training_starts_at_step_0(
    tmp_path, caplog
):
    model, optimizer = _trained(0)
    Checkpointer(tmp_path, 2, "a" * 64).save(4, model, optimizer, {"copy_end": 3})
    fresh, fresh_opt = _fresh()
    untouched = fresh.weight.detach().clone()
    with caplog.at_level(logging.WARNING, logger="zoomattn.training.checkpoint"):
        step, extra = Checkpointer(tmp_path, 2, "b" * 64).restore(fresh, fresh_opt)
    assert (step, extra) == (0, {})
    assert torch.equal(fresh.weight, untouched) and not fresh_opt.state_dict()["state"]
    assert not (tmp_path / "state.pt").exists()
    [record] = caplog.records
    assert "discarding checkpoint" in record.message and "step 4" in record.message
    assert "made for another job identity (identity aaaaaaaaaaaa" in record.message


def test_a_checkpoint_without_an_identity_an_older_format_is_discarded(tmp_path, caplog):
    model, optimizer = _trained(0)
    Checkpointer(tmp_path, 2, "id-a").save(4, model, optimizer)
    state = torch.load(tmp_path / "state.pt", weights_only=False)
    del state["identity"]
    torch.save(state, tmp_path / "state.pt")
    with caplog.at_level(logging.WARNING, logger="zoomattn.training.checkpoint"):
        step, _ = Checkpointer(tmp_path, 2, "id-a").restore(*_fresh())
    assert step == 0
    assert "made for another job identity (it records none" in caplog.text


def _inputs(tmp_path):
    data, base = tmp_path / "data", tmp_path / "base"
    (data / "arrow").mkdir(parents=True)
    (data / "manifest.json").write_text('{"sha256": "1"}')
    (data / "arrow" / "part.arrow").write_bytes(b"x" * 100)
    base.mkdir()
    (base / "config.json").write_text('{"hidden_size": 8}')
    (base / "model.safetensors").write_bytes(b"w" * 100)
    return data, base


def test_job_identity_follows_the_spec_the_code_hash_and_the_inputs_content(tmp_path):
    data, base = _inputs(tmp_path)
    ref = job_identity(SPEC, data, base)
    assert job_identity(dict(reversed(SPEC.items())), data, base) == ref  # key order is no change
    assert job_identity({**SPEC, "finetune": {"lr": 5e-3, "steps": 6}}, data, base) != ref
    assert job_identity({**SPEC, "code": "abd"}, data, base) != ref
    assert job_identity({**SPEC, "method_config": {"selected": [[1, 0]]}}, data, base) != ref
    (data / "manifest.json").write_text('{"sha256": "2"}')
    assert job_identity(SPEC, data, base) != ref


def test_job_identity_reads_content_not_paths_or_hidden_files(tmp_path):
    data, base = _inputs(tmp_path)
    ref = job_identity(SPEC, data, base)
    copy = shutil.copytree(data, tmp_path / "elsewhere")
    (copy / ".snakemake_timestamp").write_text("")
    assert job_identity(SPEC, copy, base) == ref
    (base / "config.json").write_text('{"hidden_size": 9}')
    assert job_identity(SPEC, data, base) != ref


def test_big_input_files_count_by_size(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "CONTENT_HASHED_BYTES", 50)
    data, base = _inputs(tmp_path)
    ref = job_identity(SPEC, data, base)
    (base / "model.safetensors").write_bytes(b"v" * 100)  # same size: not read
    assert job_identity(SPEC, data, base) == ref
    (base / "model.safetensors").write_bytes(b"v" * 101)
    assert job_identity(SPEC, data, base) != ref


def test_a_missing_input_is_an_error_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        job_identity(SPEC, tmp_path / "nowhere")


def test_metric_history_merges_a_steps_metrics_and_replays_them_in_step_order():
    sent = []
    history = MetricHistory(lambda metrics, step: sent.append((step, metrics)))
    history({"loss": 2.0}, 2)
    history({"em": 0.5}, 2)
    assert history.by_step == {2: {"loss": 2.0, "em": 0.5}}
    resumed = MetricHistory(lambda metrics, step: sent.append((step, metrics)))
    sent.clear()
    resumed.replay({4: {"loss": 1.0}, 2: {"loss": 2.0, "em": 0.5}})
    assert sent == [(2, {"loss": 2.0, "em": 0.5}), (4, {"loss": 1.0})]
    assert resumed.by_step == {2: {"loss": 2.0, "em": 0.5}, 4: {"loss": 1.0}}


def test_each_process_restores_its_own_random_streams(tmp_path):
    """A checkpoint of 2 processes holds each one's streams; the second process restores the
    second's, not the first's (the one a single process would restore)."""
    streams = []
    for seed in (11, 12):
        torch.manual_seed(seed)
        random.seed(seed)
        streams.append(distributed.rng_state())
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    Checkpointer(tmp_path, 2, "id").save(2, model, optimizer)
    state = torch.load(tmp_path / "state.pt", weights_only=False)
    torch.save({**state, "ranks_rng": streams}, tmp_path / "state.pt")
    second = World(1, 2, 0, "none")  # restoring needs no collective
    Checkpointer(tmp_path, 2, "id", second).restore(model, optimizer)
    got_torch, got_python = torch.rand(3), random.random()
    torch.manual_seed(12)
    random.seed(12)
    assert torch.equal(got_torch, torch.rand(3)) and got_python == random.random()
    assert distributed.gather_rng_states(SINGLE)[0]["torch"].equal(torch.get_rng_state())
