import math

import pytest
import torch

from tests.methods.mudaf.conftest import SELECTED
from zoomattn.methods import METHODS
from zoomattn.methods.loading import build_trainable
from zoomattn.methods.mudaf.objective import ContrastiveObjective
from zoomattn.modeling.loading import enable_activation_checkpointing, load_base


def test_a_batch_without_usable_records_adds_nothing(tokenizer, records, model):
    no_golden = {**records[0], "golden": []}
    objective = ContrastiveObjective(SELECTED, 0.7, 0.05, 10)
    assert objective.backward(model, tokenizer, [no_golden], 0, 0, 4) == (0.0, {"cl_loss": 0.0})


@pytest.mark.parametrize("micro", [1, 2])
def test_micro_batches_accumulate_the_full_batch_contrastive_gradient(
    tokenizer, records, model, micro
):
    recs = [*records, {**records[0], "golden": []}]  # a record that contributes nothing
    objective = ContrastiveObjective(SELECTED, 0.7, 0.05, 3)
    grads, losses = [], []
    for m in (len(recs), micro):
        losses.append(objective.backward(model, tokenizer, recs, 0, 3, m))
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
        model.zero_grad(set_to_none=True)
    (term, metrics), (term_m, metrics_m) = losses
    assert term == pytest.approx(0.7 * metrics["cl_loss"]) and metrics["cl_loss"] > 0
    assert term_m == pytest.approx(term, rel=1e-5)
    assert len(grads[0]) == len(grads[1]) > 0
    for full, accumulated in zip(*grads, strict=True):
        torch.testing.assert_close(
            accumulated, full, rtol=1e-4, atol=1e-5 * full.abs().max().item()
        )


def test_contrastive_gradient_reaches_the_selected_layers_and_no_later_one(
    tokenizer, records, model
):
    ContrastiveObjective([[1, 3]], 0.7, 0.05, 3).backward(model, tokenizer, records, 0, 0, 8)
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert grads["model.layers.1.self_attn.q_proj.weight"].abs().sum() > 0
    assert grads["model.layers.1.self_attn.k_proj.weight"].abs().sum() > 0
    assert grads["model.layers.0.mlp.down_proj.weight"].abs().sum() > 0  # earlier layers feed it
    later = [n for n in grads if n.startswith(("model.layers.2.", "model.layers.3.", "model.norm"))]
    assert later and all(grads[n] is None or not grads[n].any() for n in later)
    assert not math.isnan(sum(g.sum().item() for g in grads.values() if g is not None))


def test_gradient_checkpointing_gives_the_same_contrastive_gradient(tokenizer, records, base_dir):
    objective = ContrastiveObjective(SELECTED, 0.7, 0.05, 3)
    grads = []
    for checkpointing in (False, True):
        model = load_base(base_dir).train()
        if checkpointing:
            enable_activation_checkpointing(model)
        objective.backward(model, tokenizer, records, 0, 0, 2)
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name])


def test_contrastive_gradient_reaches_lora_through_the_peft_wrapper(tokenizer, records, base_dir):
    lora = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
    nf4 = {
        "load_in_4bit": True,
        "quant_type": "nf4",
        "double_quant": True,
        "compute_dtype": "float32",
    }
    values = {"heads": 1, "selected": [[1, 3]], "tuning": "lora"}
    model = build_trainable(base_dir, "mudaf", METHODS["mudaf"].make_config(values), lora, nf4)
    ContrastiveObjective([[1, 3]], 0.7, 0.05, 3).backward(model, tokenizer, records, 0, 0, 4)
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    assert grads["base_model.model.model.layers.1.self_attn.q_proj.lora_B.default.weight"].any()
    assert not any(g is not None and g.any() for n, g in grads.items() if ".layers.3." in n)
