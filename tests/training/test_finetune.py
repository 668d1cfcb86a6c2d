import logging
import random

import pytest
import torch
from safetensors.torch import load_file

from zoomattn.data.build import load_split, write_split
from zoomattn.data.tasks import training_mix
from zoomattn.methods import METHODS
from zoomattn.methods.loading import build_trainable, load_for_eval
from zoomattn.methods.mudaf.config import MudafConfig
from zoomattn.modeling.loading import load_base, load_tokenizer
from zoomattn.training.answer_loss import backward_batch
from zoomattn.training.batching import encode_example
from zoomattn.training.finetune import batch_indices, finetune, lr_factor


@pytest.fixture(scope="module")
def train_dir(tmp_path_factory, world):
    records = training_mix(world, {"single": 1.0, "multihop": 0.5}, 64, 0.9, 4, seed=3)
    out = tmp_path_factory.mktemp("train") / "train"
    write_split(records, out, {})
    return out


def _cell(steps=6):
    return {
        "run": "opamp-K10",
        "seed": 0,
        "method": "opamp",
        "preset": "test",
        "method_config": {"K": 10, "adapter_dim": 8, "every": 2, "dropout": 0.1},
        "finetune": {
            "steps": steps,
            "batch_size": 4,
            "lr": 1e-3,
            "warmup_ratio": 0.2,
            "optimizer": "adamw",
            "log_every": 1,
            "checkpoint_every": 2,
            "lora": {"r": 4, "alpha": 8, "dropout": 0.1, "target_modules": ["q_proj", "v_proj"]},
            "quantization": {
                "load_in_4bit": True,
                "quant_type": "nf4",
                "double_quant": True,
                "compute_dtype": "float32",
            },
        },
    }


def _cfg(cell):
    """The typed method config the finetune stage hands the trainer."""
    return METHODS[cell["method"]].make_config(cell["method_config"])


def test_batches_are_a_function_of_seed_and_step_cover_an_epoch_and_group_lengths():
    lengths = [random.Random(i).randint(5, 300) for i in range(64)]
    assert batch_indices(lengths, 4, 0, 3) == batch_indices(lengths, 4, 0, 3)
    epoch = sorted(i for s in range(16) for i in batch_indices(lengths, 4, 0, s))
    assert epoch == list(range(64))
    assert batch_indices(lengths, 4, 0, 16) != batch_indices(lengths, 4, 0, 0)  # reshuffled
    padded = sum(4 * max(lengths[i] for i in batch_indices(lengths, 4, 0, s)) for s in range(16))
    assert padded < 0.8 * 4 * 16 * max(lengths)  # length grouping cuts padding


def test_learning_rate_warms_up_then_stays_constant():
    assert [round(lr_factor(s, 100, 0.03), 3) for s in (0, 1, 2, 3, 50)] == [0.333, 0.667, 1, 1, 1]


class Killed(Exception):
    pass


def die_at_step_5(metrics, step):  # after the checkpoint of step 4
    if step == 5:
        raise Killed


def _same_weights(a_dir, b_dir, names=("adapter_model.safetensors", "zoom_modules.safetensors")):
    for name in names:
        a, b = load_file(a_dir / name), load_file(b_dir / name)
        assert a.keys() == b.keys()
        for k in a:
            assert (a[k] == b[k]).all(), k


def _logger(into: list):
    return lambda metrics, step: into.append((step, metrics))


def test_interrupted_finetune_resumes_to_the_same_weights_and_metric_history(
    tmp_path, train_dir, base_dir
):
    random.seed(0)
    cell = _cell()
    cell["finetune"]["log_every"] = 3  # step 4's loss is in the window logged at step 6
    reference = []
    finetune(
        cell,
        _cfg(cell),
        train_dir,
        base_dir,
        tmp_path / "a",
        tmp_path / "ckpt_a",
        1,
        _logger(reference),
    )

    def die_at_step_6(metrics, step):  # logged before the checkpoint of step 6: 4 is the last
        if step == 6:
            raise Killed

    with pytest.raises(Killed):
        finetune(
            cell,
            _cfg(cell),
            train_dir,
            base_dir,
            tmp_path / "b",
            tmp_path / "ckpt_b",
            1,
            die_at_step_6,
        )
    assert (tmp_path / "ckpt_b" / "state.pt").exists() and not (tmp_path / "b").exists()
    resumed, started = [], []
    result = finetune(
        cell,
        _cfg(cell),
        train_dir,
        base_dir,
        tmp_path / "b",
        tmp_path / "ckpt_b",
        1,
        _logger(resumed),
        on_start=started.append,
    )
    assert result["steps"] == 6 and started == [4]
    _same_weights(tmp_path / "a", tmp_path / "b")
    assert [step for step, _ in reference] == [3, 6]
    assert resumed == reference  # step 3 re-sent, step 6 averaged over steps 4-6


def test_a_checkpoint_of_another_learning_rate_is_discarded_not_continued(
    tmp_path, train_dir, base_dir, caplog
):
    fast = _cell()
    fast["finetune"]["lr"] = 5e-3
    finetune(
        fast,
        _cfg(fast),
        train_dir,
        base_dir,
        tmp_path / "clean",
        tmp_path / "ckpt_clean",
        threads=1,
    )
    with pytest.raises(Killed):
        finetune(
            _cell(),
            _cfg(_cell()),
            train_dir,
            base_dir,
            tmp_path / "b",
            tmp_path / "ckpt",
            1,
            die_at_step_5,
        )
    started = []
    with caplog.at_level(logging.INFO, logger="zoomattn"):
        finetune(
            fast,
            _cfg(fast),
            train_dir,
            base_dir,
            tmp_path / "b",
            tmp_path / "ckpt",
            1,
            on_start=started.append,
        )
    assert started == [0]
    assert "discarding checkpoint" in caplog.text and "resumed" not in caplog.text
    _same_weights(tmp_path / "clean", tmp_path / "b")


SELECTED = [[1, 0], [2, 3]]
IDS = torch.tensor([[1, 5, 9, 12, 7, 30, 4, 8]])


def _mudaf_cell(heads, steps=4, alpha=0.7):
    cell = _cell(steps)
    values = MudafConfig(heads=heads, alpha=alpha, negatives=3).resolved(
        cell["finetune"]["lora"], selected_heads=SELECTED[:heads]
    )
    cell.update(run=f"mudaf-heads{heads}", method="mudaf", method_config=values)
    cell["finetune"]["micro_batch_size"] = 3  # uneven split of the batch of 4
    return cell


@pytest.mark.parametrize("heads", [2, 0])
def test_full_finetune_of_mudaf_trains_every_weight_saves_and_reloads(
    tmp_path, train_dir, base_dir, heads
):
    logged = []
    result = finetune(
        _mudaf_cell(heads),
        _cfg(_mudaf_cell(heads)),
        train_dir,
        base_dir,
        tmp_path / "out",
        tmp_path / "ckpt",
        1,
        lambda metrics, step: logged.append(metrics),
    )
    base = load_base(base_dir)
    assert result["trainable_params"] == sum(p.numel() for p in base.parameters())
    assert len(logged) == 4 and all(m["qa_loss"] > 0 for m in logged)
    if heads:
        # length-grouped batches of one-document records have no negative: cl_loss 0
        assert any(m["cl_loss"] > 0 for m in logged) and all(m["cl_loss"] >= 0 for m in logged)
        for m in logged:
            assert m["train_loss"] == pytest.approx(0.3 * m["qa_loss"] + 0.7 * m["cl_loss"])
    else:
        assert all("cl_loss" not in m and m["train_loss"] == m["qa_loss"] for m in logged)
    assert not (tmp_path / "out" / "adapter_config.json").exists()
    reloaded = load_for_eval(tmp_path / "out", base_dir, _cell()["finetune"]["quantization"])
    trained = torch.load(tmp_path / "ckpt" / "state.pt", weights_only=False)["weights"]
    params = dict(reloaded.named_parameters())
    assert trained.keys() == params.keys()
    for name, p in base.named_parameters():
        assert not torch.equal(params[name], p), name  # every weight moved
        assert torch.equal(params[name], trained[name]), name  # saved as trained
    with torch.no_grad():
        for name, p in base.named_parameters():
            p.copy_(trained[name])
        torch.testing.assert_close(reloaded(input_ids=IDS).logits, base(input_ids=IDS).logits)


def test_interrupted_mudaf_finetune_resumes_to_the_same_weights(tmp_path, train_dir, base_dir):
    cell = _mudaf_cell(2, steps=6)
    finetune(cell, _cfg(cell), train_dir, base_dir, tmp_path / "a", tmp_path / "ckpt_a", threads=1)

    def die_at_step_5(metrics, step):  # after the checkpoint of step 4
        if step == 5:
            raise Killed

    with pytest.raises(Killed):
        finetune(
            cell,
            _cfg(cell),
            train_dir,
            base_dir,
            tmp_path / "b",
            tmp_path / "ckpt_b",
            1,
            die_at_step_5,
        )
    finetune(cell, _cfg(cell), train_dir, base_dir, tmp_path / "b", tmp_path / "ckpt_b", threads=1)
    a = load_file(tmp_path / "a" / "model.safetensors")
    b = load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert (a[k] == b[k]).all(), k


def test_contrastive_term_changes_the_gradient_of_the_selected_layers_only(train_dir, base_dir):
    """α > 0: the QA gradient scaled by 1 − α plus α·∇L_cl, which reaches layers 0-2 (heads in
    layers 1 and 2) and nothing after them; heads 0 (Vanilla-SFT): the QA gradient alone."""
    tok = load_tokenizer(base_dir)
    records = load_split(train_dir)[:4]
    examples = [encode_example(tok, r) for r in records]
    grads = {}
    for heads in (2, 0):
        cfg = _cfg(_mudaf_cell(heads))
        model = build_trainable(base_dir, "mudaf", cfg, None, None)
        objective = METHODS["mudaf"].objective(cfg)
        qa_weight = 0.3 if heads else 1.0
        backward_batch(model, examples, tok.pad_token_id, 4, qa_weight)
        if heads:
            objective.backward(model, tok, records, 0, 0, 4)
        else:
            assert objective is None
        grads[heads] = {n: p.grad / qa_weight for n, p in model.named_parameters()}
    for name in grads[0]:
        if name.startswith(("model.layers.3.", "model.norm")):
            torch.testing.assert_close(grads[2][name], grads[0][name])
        elif name.startswith(("model.layers.1.self_attn.q_proj", "model.layers.2.self_attn.k")):
            assert not torch.allclose(grads[2][name], grads[0][name], rtol=1e-3), name


def test_mudaf_with_alpha_0_is_vanilla_sft(tmp_path, train_dir, base_dir):
    for run, cell in (("vanilla", _mudaf_cell(0, steps=2)), ("a0", _mudaf_cell(2, 2, alpha=0))):
        finetune(cell, _cfg(cell), train_dir, base_dir, tmp_path / run, tmp_path / f"ckpt_{run}", 1)
    a = load_file(tmp_path / "vanilla" / "model.safetensors")
    b = load_file(tmp_path / "a0" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("total,ratio", [(100, 0.03), (40, 0.1), (12, 0.0)])
def test_cosine_schedule_after_the_warm_up_is_transformers_get_cosine_schedule_with_warmup(
    total, ratio
):
    from torch.optim.lr_scheduler import LambdaLR
    from transformers import get_cosine_schedule_with_warmup

    warmup = max(1, round(total * ratio))
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    hf: LambdaLR = get_cosine_schedule_with_warmup(opt, warmup, total)
    for step in (warmup, warmup + 1, total // 2, total - 2, total - 1):
        want = hf.lr_lambdas[0](step)
        assert lr_factor(step, total, ratio, "cosine") == pytest.approx(want, abs=1e-12), step
    # the warm-up is ours, as the constant schedule's: one step ahead of transformers' s / w
    for step in range(warmup):
        assert lr_factor(step, total, ratio, "cosine") == lr_factor(step, total, ratio)
        assert lr_factor(step, total, ratio, "cosine") == pytest.approx(hf.lr_lambdas[0](step + 1))
    assert lr_factor(total, total, ratio, "cosine") == pytest.approx(0.0, abs=1e-12)  # 0 at the end


def test_an_unknown_lr_schedule_is_refused_naming_the_key():
    with pytest.raises(ValueError, match="finetune.lr_schedule: one of constant, cosine"):
        lr_factor(0, 10, 0.1, "linear")


def test_gradients_are_clipped_to_max_grad_norm(tmp_path, train_dir, base_dir, monkeypatch):
    seen = []
    clip = torch.nn.utils.clip_grad_norm_

    def recording(params, max_norm, *args, **kwargs):
        seen.append(max_norm)
        return clip(params, max_norm, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recording)
    cell = _cell(steps=2)
    cell["finetune"]["max_grad_norm"] = 0.5
    finetune(cell, _cfg(cell), train_dir, base_dir, tmp_path / "a", tmp_path / "ckpt", 1)
    del cell["finetune"]["max_grad_norm"]  # a cell without the key: the schema's default
    finetune(cell, _cfg(cell), train_dir, base_dir, tmp_path / "b", tmp_path / "ckpt_b", 1)
    assert seen == [0.5, 0.5, 1.0, 1.0]


def test_the_cosine_schedule_sets_the_optimizer_learning_rate_each_step(
    tmp_path, train_dir, base_dir, monkeypatch
):
    lrs = []
    step = torch.optim.AdamW.step

    def recording(self, *args, **kwargs):
        lrs.append(self.param_groups[0]["lr"])
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", recording)
    cell = _cell(steps=4)
    cell["finetune"]["lr_schedule"] = "cosine"
    finetune(cell, _cfg(cell), train_dir, base_dir, tmp_path / "a", tmp_path / "ckpt", 1)
    want = [1e-3 * lr_factor(s, 4, 0.2, "cosine") for s in range(4)]
    assert lrs == pytest.approx(want) and lrs[-1] < lrs[1]
