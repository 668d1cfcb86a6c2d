"""Building a model with its method for training, and rebuilding it from what fine-tuning saved."""

import json

import pytest
import torch

from tests.modeling.test_loading import IDS, LORA, NF4, OPAMP, _train_a_little
from zoomattn.methods import METHODS
from zoomattn.methods.loading import build_trainable, load_finetuned, load_for_eval
from zoomattn.modeling.loading import METHOD_FILE, save_finetuned


def test_base_is_quantised_to_4bit_and_only_lora_and_zoom_train(base_dir):
    import bitsandbytes as bnb

    model = build_trainable(base_dir, "opamp", METHODS["opamp"].make_config(OPAMP), LORA, NF4)
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or ".zoom." in n for n in trainable)
    assert any(".zoom.q1." in n for n in trainable)
    zoom = [p for n, p in model.named_parameters() if ".zoom." in n]
    assert all(p.dtype == torch.float32 for p in zoom)  # adapters stay unquantised


@pytest.mark.parametrize("method,values", [("qlora", {}), ("opamp", OPAMP)])
def test_finetuned_model_reloads_to_identical_logits(base_dir, tmp_path, method, values):
    model = build_trainable(base_dir, method, METHODS[method].make_config(values), LORA, NF4).eval()
    _train_a_little(model)
    with torch.no_grad():
        want = model(input_ids=IDS).logits
    save_finetuned(model, tmp_path, method, values)
    reloaded = load_finetuned(tmp_path, base_dir, NF4)
    with torch.no_grad():
        got = reloaded(input_ids=IDS).logits
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


MUDAF_FULL = {"heads": 2, "selected": [[1, 0], [2, 3]], "tuning": "full"}


def test_full_tuning_trains_every_parameter_of_the_unquantised_base(base_dir):
    import bitsandbytes as bnb

    model = build_trainable(base_dir, "mudaf", METHODS["mudaf"].make_config(MUDAF_FULL), LORA, NF4)
    assert not hasattr(model, "get_base_model")  # no peft wrapper
    assert not any(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())
    params = list(model.named_parameters())
    assert all(p.requires_grad and p.dtype == torch.float32 for _, p in params)
    assert not any("lora_" in n for n, _ in params)


def test_mudaf_with_lora_tuning_is_the_4bit_lora_path(base_dir):
    import bitsandbytes as bnb

    model = build_trainable(
        base_dir, "mudaf", METHODS["mudaf"].make_config({**MUDAF_FULL, "tuning": "lora"}), LORA, NF4
    )
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)


@pytest.mark.parametrize("values", [MUDAF_FULL, {"heads": 0, "tuning": "full"}])
def test_fully_tuned_model_saves_plain_and_reloads_to_identical_logits(base_dir, tmp_path, values):
    model = build_trainable(
        base_dir, "mudaf", METHODS["mudaf"].make_config(values), LORA, NF4
    ).eval()
    _train_a_little(model)
    with torch.no_grad():
        want = model(input_ids=IDS).logits
    save_finetuned(model, tmp_path, "mudaf", values)
    files = {p.name for p in tmp_path.iterdir()}
    assert {"config.json", "model.safetensors", METHOD_FILE} <= files
    assert "adapter_config.json" not in files and "zoom_modules.safetensors" not in files
    assert json.loads((tmp_path / METHOD_FILE).read_text()) == {"method": "mudaf", "config": values}
    reloaded = load_for_eval(tmp_path, base_dir, NF4)  # the 4-bit setting does not apply
    assert not hasattr(reloaded, "get_base_model") and not reloaded.training
    with torch.no_grad():
        got = reloaded(input_ids=IDS).logits
    torch.testing.assert_close(got, want, atol=0, rtol=0)
