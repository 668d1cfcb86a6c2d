"""The device and dtype policy: planned from config, applied by construction when a method attaches.

A GPU is not needed: the meta device and bf16 on the CPU stand in for "a base somewhere else than
where the method's modules were built, in another dtype" — the class of bug that broke every
module-attaching method on CUDA.
"""

import copy

import pytest
import torch
import yaml
from transformers import LlamaForCausalLM

import zoomattn.attention.interface  # noqa: F401  (registers the attention implementation)
from tests.methods.lkg.helpers import lkg_config
from zoomattn.cluster import rule_resources
from zoomattn.config import ROOT, ConfigError, load_config
from zoomattn.data.tasks import single_doc
from zoomattn.methods import METHODS
from zoomattn.methods.loading import build_trainable
from zoomattn.methods.rectify.config import RectifyConfig
from zoomattn.modeling.boundary import add_boundary_tokens
from zoomattn.modeling.loading import load_base
from zoomattn.modeling.pretrain import llama_config
from zoomattn.placement import CPU, Placement, describe, plan
from zoomattn.training.batching import encode_example, pad_batch

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
TINY = dict(hidden=32, layers=2, heads=4, kv_heads=2, intermediate=64, max_positions=512)


def _preset(name, **top):
    raw = yaml.safe_load((ROOT / "config.yaml").read_text())
    raw.update(preset=name, **top)
    return load_config(raw)


# --- planning (config alone) ---------------------------------------------------------------


def test_auto_puts_gpu_kinds_on_cuda_in_bf16_and_the_rest_on_the_cpu_in_fp32():
    cfg = _preset("small")
    assert plan(cfg, "finetune") == Placement("cuda", "bfloat16", 1)
    assert plan(cfg, "evaluate") == Placement("cuda", "bfloat16", 1)
    assert plan(cfg, "pretrain") == CPU  # small's base-model job asks for no GPU
    assert plan(cfg, "data") == CPU
    tiny = _preset("tiny")
    assert {plan(tiny, k) for k in ("pretrain", "finetune", "evaluate")} == {CPU}


def test_a_pinned_device_and_dtype_override_auto_and_the_gpu_request_follows():
    on_cpu = _preset("small", device="cpu")
    assert plan(on_cpu, "finetune") == CPU
    assert "gpu" not in rule_resources(on_cpu, "finetune")  # no card asked of Slurm for a CPU job
    on_gpu = _preset("tiny", device="cuda", dtype="float32")
    assert plan(on_gpu, "finetune") == Placement("cuda", "float32", 1)
    assert rule_resources(on_gpu, "finetune")["gpu"] == 1
    assert plan(on_gpu, "data") == CPU  # data jobs never hold a model


def test_an_unknown_device_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"config\.device"):
        _preset("tiny", device="tpu")


def test_a_spec_round_trips_and_an_old_spec_without_device_means_the_cpu():
    p = Placement("cuda", "bfloat16", 2)
    assert Placement.from_spec(copy.deepcopy(p.as_spec())) == p
    assert Placement.from_spec(None) == CPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a machine without CUDA")
def test_a_job_planned_for_cuda_without_a_gpu_stops_with_what_to_set():
    with pytest.raises(RuntimeError, match="device: cpu"):
        Placement("cuda", "bfloat16", 1).torch_device()


# --- applying it: every method's modules follow the base ----------------------------------


def _method_configs(tok):
    """One config per registered method (a new method must add itself here)."""
    return {
        "qlora": METHODS["qlora"].make_config({}),
        "opamp": METHODS["opamp"].make_config({"K": 10, "adapter_dim": 8, "dropout": 0.0}),
        "rectify": RectifyConfig(**RectifyConfig(xi=3, g="max").resolved(LORA)),
        "mudaf": METHODS["mudaf"].make_config({"heads": 0}),
        "lkg": lkg_config(tok, fusion_heads="all"),
    }


def _base(tokenizer, device="cpu", dtype=torch.float32):
    torch.manual_seed(0)
    config = llama_config(len(tokenizer), TINY, tokenizer)
    config._attn_implementation = "zoomattn"
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype).eval()
    model.zoomattn_dtype = dtype
    return model


def _method_tensors(model):
    tensors = [*model.named_parameters(), *model.named_buffers()]
    return {n: t for n, t in tensors if ".zoom." in n or n.startswith("zoom.")}


@pytest.fixture(scope="module")
def marked_tok(tokenizer):
    tok = copy.deepcopy(tokenizer)
    add_boundary_tokens(tok)
    return tok


def test_every_method_is_covered(marked_tok):
    assert set(_method_configs(marked_tok)) == set(METHODS)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_method_modules_attach_on_the_base_device(method, tokenizer, marked_tok):
    model = _base(tokenizer, device="meta")
    METHODS[method].attach(model, _method_configs(marked_tok)[method])
    tensors = _method_tensors(model)
    if method in ("opamp", "rectify", "lkg"):
        assert tensors, "the method attaches modules"
    for name, t in tensors.items():
        assert t.device.type == "meta", name


@pytest.mark.parametrize("method", sorted(METHODS))
def test_method_modules_take_the_stated_dtype_and_a_bf16_forward_runs(
    method, tokenizer, marked_tok, sampler
):
    model = _base(tokenizer, dtype=torch.bfloat16)
    METHODS[method].attach(model, _method_configs(marked_tok)[method])
    for name, t in _method_tensors(model).items():
        if t.is_floating_point():
            assert t.dtype == torch.bfloat16, name
    tok = marked_tok if method == "lkg" else tokenizer
    batch = pad_batch([encode_example(tok, single_doc(sampler, 0.5)) for _ in range(2)], 0)
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()


def test_load_base_and_build_trainable_follow_the_placement(base_dir):
    placement = Placement("cpu", "bfloat16", 0)
    base = load_base(base_dir, placement=placement)
    assert base.get_input_embeddings().weight.dtype == torch.bfloat16
    opamp = METHODS["opamp"].make_config({"K": 10, "adapter_dim": 8})
    model = build_trainable(base_dir, "opamp", opamp, LORA, None, placement)
    for name, t in _method_tensors(model.get_base_model()).items():
        assert t.dtype == torch.bfloat16 and t.device.type == "cpu", name
    info = describe(model)
    assert info["device"] == "cpu" and info["dtype.method_modules"] == "torch.bfloat16"
    assert "OpAmpAttention" in info["attention"]


def test_the_default_placement_is_the_cpu_in_fp32_whatever_the_machine(base_dir):
    model = load_base(base_dir)
    weight = model.get_input_embeddings().weight
    assert weight.device.type == "cpu" and weight.dtype == torch.float32


def test_a_full_fine_tune_keeps_fp32_master_weights_under_a_bf16_placement(base_dir):
    values = {"heads": 0, "tuning": "full"}
    cfg = METHODS["mudaf"].make_config(values)
    model = build_trainable(base_dir, "mudaf", cfg, None, None, Placement("cpu", "bfloat16"))
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_what_ran_goes_to_the_log_and_the_active_mlflow_run(base_dir, tmp_path, caplog):
    import logging

    import mlflow

    from zoomattn.placement import report

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    opamp = METHODS["opamp"].make_config({"K": 10, "adapter_dim": 8})
    model = build_trainable(base_dir, "opamp", opamp, LORA, None)
    with caplog.at_level(logging.INFO, logger="zoomattn"), mlflow.start_run() as run:
        report(model)
    tags = mlflow.get_run(run.info.run_id).data.tags
    assert tags["zoomattn.device"] == "cpu" and tags["zoomattn.dtype.weights"] == "torch.float32"
    assert tags["zoomattn.attention"].startswith("zoomattn: 2 layers fused SDPA, 2 layers OpAmp")
    assert "model placement: device cpu" in caplog.text
