import json
import warnings

import pytest
import torch

from zoomattn.methods import METHODS
from zoomattn.methods.loading import build_trainable, load_finetuned, load_merged
from zoomattn.modeling.loading import (
    METHOD_FILE,
    enable_activation_checkpointing,
    export_merged,
    save_finetuned,
    unwrap,
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


def test_reloading_with_another_layer_spacing_fails_naming_the_file(base_dir, tmp_path):
    """The official eval scripts attached adapters with another spacing than training did."""
    model = build_trainable(base_dir, "opamp", METHODS["opamp"].make_config(OPAMP), LORA, NF4)
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
    model = build_trainable(base_dir, method, METHODS[method].make_config(values), LORA, NF4).eval()
    _train_a_little(model)
    with torch.no_grad():
        want = model(input_ids=IDS).logits
    export_merged(model, base_dir, tmp_path / "merged", method, values)
    merged = load_merged(tmp_path / "merged")
    assert not any("lora" in n for n, _ in merged.named_parameters())
    with torch.no_grad():
        got = merged(input_ids=IDS).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


SAVE_IN_A_FRESH_PROCESS = """
import sys
from zoomattn.methods import METHODS
from zoomattn.methods.loading import build_trainable
from zoomattn.modeling.loading import save_finetuned
base_dir, out, targets = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
lora = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": targets}
model = build_trainable(base_dir, "qlora", METHODS["qlora"].make_config({}), lora, None)
save_finetuned(model, out, "qlora", {})
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


def test_a_4bit_model_computes_in_evaluation_what_it_computes_in_training_on_any_cpu(base_dir):
    """bitsandbytes' repacking for CPUs with AVX512-BF16 (no-grad forwards in eval mode, block
    scales rounded to bf16) stays off: an evaluation's numbers do not depend on the CPU."""
    import bitsandbytes as bnb

    model = build_trainable(base_dir, "qlora", METHODS["qlora"].make_config({}), LORA, NF4)
    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert layers and not any(m.support_avx512bf16_for_cpu for m in layers)  # on any CPU
    _train_a_little(model)
    want = model(input_ids=IDS).logits.detach()
    model.eval()
    with torch.no_grad():
        got = model(input_ids=IDS).logits
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_activation_checkpointing_reaches_every_layer_of_a_lora_model_with_no_deprecation(base_dir):
    """Through peft's wrapper to transformers' own call (5.23's name: no FutureWarning), every
    decoder layer checkpointed, and a training step's gradients those of the step without it."""
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = build_trainable(base_dir, "qlora", METHODS["qlora"].make_config({}), LORA, None)
        if checkpointing:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                enable_activation_checkpointing(model)
        layers = unwrap(model).model.layers
        assert all(layer.gradient_checkpointing for layer in layers) == checkpointing
        model.train()(input_ids=IDS, labels=IDS).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.requires_grad})
    assert grads[0].keys() == grads[1].keys()
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, msg=name)


def test_activation_checkpointing_takes_the_old_name_where_transformers_has_only_that():
    """transformers before 5.23 (the GPU image's 5.17) has gradient_checkpointing_enable alone."""
    calls = []

    class OldModel:
        def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
            calls.append(gradient_checkpointing_kwargs)

    enable_activation_checkpointing(OldModel())
    assert calls == [{"use_reentrant": False}]
