import json

import pytest
import torch

from zoomattn.modeling.loading import (
    METHOD_FILE,
    build_trainable,
    export_merged,
    load_finetuned,
    load_merged,
    save_finetuned,
)

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj", "down_proj"]}
NF4 = {"load_in_4bit": True, "quant_type": "nf4", "double_quant": True, "compute_dtype": "float32"}
OPAMP = {"K": 10, "adapter_dim": 8, "every": 2, "dropout": 0.0}
IDS = torch.tensor([[1, 5, 9, 12, 7, 30, 4, 8]])


def _train_a_little(model):
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)


def test_base_is_quantised_to_4bit_and_only_lora_and_zoom_train(base_dir):
    import bitsandbytes as bnb

    model = build_trainable(base_dir, "opamp", OPAMP, LORA, NF4)
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or ".zoom." in n for n in trainable)
    assert any(".zoom.q1." in n for n in trainable)
    zoom = [p for n, p in model.named_parameters() if ".zoom." in n]
    assert all(p.dtype == torch.float32 for p in zoom)  # adapters stay unquantised


@pytest.mark.parametrize("method,values", [("qlora", {}), ("opamp", OPAMP)])
def test_finetuned_model_reloads_to_identical_logits(base_dir, tmp_path, method, values):
    model = build_trainable(base_dir, method, values, LORA, NF4).eval()
    _train_a_little(model)
    with torch.no_grad():
        want = model(input_ids=IDS).logits
    save_finetuned(model, tmp_path, method, values)
    reloaded = load_finetuned(tmp_path, base_dir, NF4)
    with torch.no_grad():
        got = reloaded(input_ids=IDS).logits
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_reloading_with_another_layer_spacing_fails_naming_the_file(base_dir, tmp_path):
    """The official eval scripts attached adapters with another spacing than training did."""
    model = build_trainable(base_dir, "opamp", OPAMP, LORA, NF4)
    save_finetuned(model, tmp_path, "opamp", OPAMP)
    spec = json.loads((tmp_path / METHOD_FILE).read_text())
    spec["config"]["every"] = 1
    (tmp_path / METHOD_FILE).write_text(json.dumps(spec))
    with pytest.raises(RuntimeError, match="zoom_modules.safetensors.*missing"):
        load_finetuned(tmp_path, base_dir, NF4)


@pytest.mark.parametrize("method,values", [("qlora", {}), ("opamp", OPAMP)])
def test_merged_evaluation_copy_computes_what_the_4bit_lora_model_computes(
    base_dir, tmp_path, method, values
):
    model = build_trainable(base_dir, method, values, LORA, NF4).eval()
    _train_a_little(model)
    with torch.no_grad():
        want = model(input_ids=IDS).logits
    export_merged(model, base_dir, tmp_path / "merged", method, values)
    merged = load_merged(tmp_path / "merged")
    assert not any("lora" in n for n, _ in merged.named_parameters())
    with torch.no_grad():
        got = merged(input_ids=IDS).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


MUDAF_FULL = {"heads": 2, "selected": [[1, 0], [2, 3]], "tuning": "full"}


def test_full_tuning_trains_every_parameter_of_the_unquantised_base(base_dir):
    import bitsandbytes as bnb

    model = build_trainable(base_dir, "mudaf", MUDAF_FULL, LORA, NF4)
    assert not hasattr(model, "get_base_model")  # no peft wrapper
    assert not any(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())
    params = list(model.named_parameters())
    assert all(p.requires_grad and p.dtype == torch.float32 for _, p in params)
    assert not any("lora_" in n for n, _ in params)


def test_mudaf_with_lora_tuning_is_the_4bit_lora_path(base_dir):
    import bitsandbytes as bnb

    model = build_trainable(base_dir, "mudaf", {**MUDAF_FULL, "tuning": "lora"}, LORA, NF4)
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)


@pytest.mark.parametrize("values", [MUDAF_FULL, {"heads": 0, "tuning": "full"}])
def test_fully_tuned_model_saves_plain_and_reloads_to_identical_logits(base_dir, tmp_path, values):
    from zoomattn.modeling.loading import load_for_eval

    model = build_trainable(base_dir, "mudaf", values, LORA, NF4).eval()
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


SAVE_IN_A_FRESH_PROCESS = """
import sys
from zoomattn.modeling.loading import build_trainable, save_finetuned
base_dir, out, targets = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
lora = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": targets}
save_finetuned(build_trainable(base_dir, "qlora", {}, lora, None), out, "qlora", {})
"""
TARGETS = ["q_proj", "k_proj", "v_proj", "down_proj"]


def _in_process_with_hash_seed(seed: int, *args: str) -> str:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    done = subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_adapter_config_is_byte_identical_whatever_the_string_hash_seed(base_dir, tmp_path):
    seeds = (0, 3)  # two seeds under which the set of TARGETS iterates in different orders
    show_set = f"print(list(set({TARGETS!r})))"
    orders = {_in_process_with_hash_seed(s, "-c", show_set) for s in seeds}
    assert len(orders) == 2, "the seeds no longer reorder the set: pick two that do"
    texts = []
    for seed in seeds:
        out = tmp_path / f"seed{seed}"
        arguments = (str(base_dir), str(out), ",".join(TARGETS))
        _in_process_with_hash_seed(seed, "-c", SAVE_IN_A_FRESH_PROCESS, *arguments)
        texts.append((out / "adapter_config.json").read_bytes())
    assert texts[0] == texts[1]
    assert json.loads(texts[0])["target_modules"] == sorted(TARGETS)
