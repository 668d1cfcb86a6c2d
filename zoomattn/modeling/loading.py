"""Loading and saving models: the one code path a hub model and our tiny base share.

A fine-tuned model directory holds peft's LoRA files, the method's unquantised attention modules
(``zoom_modules.safetensors``) and ``method.json`` (method name and config). Attaching the method
that file names is ``zoomattn.methods.loading``'s part (this layer knows no method); here the
saved modules are loaded strictly into the model it rebuilt. A method tuned in full
(``tuning: full``, MuDAF) trains every parameter of the unquantised base and is saved as a plain
transformers model (``config.json`` + weights) with ``method.json`` beside it, which loads like a
merged copy.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

import zoomattn.attention.interface as attn_interface
from zoomattn.modeling.hub import weights_path
from zoomattn.placement import CPU, Placement

ZOOM_FILE = "zoom_modules.safetensors"
MERGED_DIR = "merged"
METHOD_FILE = "method.json"
ADAPTER_FILE = "adapter_config.json"  # peft's: a LoRA directory


def quantization_config(q: dict | None) -> BitsAndBytesConfig | None:
    if not q or not q["load_in_4bit"]:
        return None
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=q["quant_type"],
        bnb_4bit_use_double_quant=q["double_quant"],
        bnb_4bit_compute_dtype=getattr(torch, q["compute_dtype"]),
    )


def load_base(path: str | Path, quantization: dict | None = None, placement: Placement = CPU):
    """from_pretrained with our attention implementation, on the placement's device (the CPU
    unless a job's spec says otherwise); 4-bit when quantization is set, else in the placement's
    dtype. The method modules attached later follow (``placement.place_method_modules``). A base
    directory prepared from a hub model (modeling/hub.py) loads the snapshot it recorded."""
    qc = quantization_config(quantization)
    model = AutoModelForCausalLM.from_pretrained(
        weights_path(path),
        attn_implementation=attn_interface.NAME,
        quantization_config=qc,
        dtype=placement.torch_dtype() if qc is None else qc.bnb_4bit_compute_dtype,
        device_map=placement.torch_device(),
    )
    model.zoomattn_dtype = placement.torch_dtype()
    if qc is not None:
        _no_cpu_repacking(model)
    return model


def _no_cpu_repacking(model) -> None:
    """On CPUs with AVX512-BF16, bitsandbytes repacks a 4-bit layer on its first no-grad forward
    in eval mode, its block scales rounded to bf16, for another kernel: an evaluation's numbers
    would depend on the CPU it ran on (and the repacking fails on layers under two blocks wide).
    Off, so every CPU computes what training computed."""
    import bitsandbytes as bnb

    for module in model.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = False


def load_tokenizer(path: str | Path):
    return AutoTokenizer.from_pretrained(path)


def unwrap(model):
    """The transformers model inside a peft wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def zoom_state(model) -> dict[str, torch.Tensor]:
    """The method's attention modules, named as in the plain transformers model."""
    return {
        n: p.detach().cpu().contiguous()
        for n, p in unwrap(model).named_parameters()
        if ".zoom." in n
    }


def save_zoom(model, out_dir: Path, method_name: str, method_values: dict) -> None:
    zoom = zoom_state(model)
    if zoom:
        save_file(zoom, str(Path(out_dir) / ZOOM_FILE))
    (Path(out_dir) / METHOD_FILE).write_text(
        json.dumps({"method": method_name, "config": method_values}, indent=1)
    )


def load_zoom(model, model_dir: Path) -> None:
    """Load the saved attention modules into a model the method was attached to, strictly: the
    saved names must be exactly the model's."""
    expected = set(zoom_state(model))
    saved = load_file(str(model_dir / ZOOM_FILE)) if (model_dir / ZOOM_FILE).exists() else {}
    missing, unexpected = sorted(expected - set(saved)), sorted(set(saved) - expected)
    if missing or unexpected:
        raise RuntimeError(
            f"{model_dir / ZOOM_FILE}: saved attention modules do not match the model rebuilt from "
            f"{METHOD_FILE} (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in saved.items():
            params[name].copy_(value)


def read_method_file(model_dir: Path) -> tuple[str, dict]:
    """(method name, config values) a model was saved with."""
    spec = json.loads((Path(model_dir) / METHOD_FILE).read_text())
    return spec["method"], spec["config"]


def enable_activation_checkpointing(model) -> None:
    """Non-reentrant activation checkpointing on every decoder layer of ``model`` (a PeftModel
    passes the call on to its base). transformers 5.23 (the pin) names it
    ``activation_checkpointing_enable`` and warns that ``gradient_checkpointing_enable`` goes in
    v6; earlier 5.x, the GPU image's 5.17 among them, has only the old name."""
    kwargs = {"use_reentrant": False}
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def is_full(model) -> bool:
    """Whether a trained model is tuned in full (a plain transformers model, no peft wrapper)."""
    return not hasattr(model, "get_base_model")


def save_finetuned(model, out_dir: Path, method_name: str, method_values: dict) -> None:
    """peft's LoRA files, or (full tuning) the whole model; the method's modules and method.json."""
    model.save_pretrained(out_dir)
    _sort_adapter_lists(Path(out_dir) / ADAPTER_FILE)
    save_zoom(model, out_dir, method_name, method_values)


def _sort_adapter_lists(path: Path) -> None:
    """peft keeps target_modules as a set and writes it in the set's order, which the string hash
    seed changes from run to run: sorted, one run's adapter_config.json is byte for byte the next's.
    Rewritten as peft writes it (indent 2, sorted keys)."""
    if not path.exists():
        return  # tuned in full: no adapter
    config = json.loads(path.read_text())
    for key in ("target_modules", "exclude_modules"):
        if isinstance(config.get(key), list):
            config[key] = sorted(config[key])
    path.write_text(json.dumps(config, indent=2, sort_keys=True))


def export_merged(
    model,
    base_path,
    out_dir: Path,
    method_name: str,
    method_values: dict,
    placement: Placement = CPU,
) -> None:
    """An evaluation copy without peft or bitsandbytes: W = dequant(W_4bit) + ΔW_LoRA, in the
    placement's dtype (fp32 on the CPU).

    These are the weights the 4-bit layers compute with, so the copy is the trained model up to
    float rounding (tested); loading it skips the ~8 s import of peft and bitsandbytes.
    """
    import bitsandbytes as bnb
    from peft.tuners.lora import LoraLayer

    weights = {}
    for name, module in unwrap(model).named_modules():
        if isinstance(module, LoraLayer):
            layer = module.get_base_layer()
        elif isinstance(module, bnb.nn.Linear4bit) and not name.endswith(".base_layer"):
            layer = module  # quantised but not LoRA-targeted
        else:
            continue  # LoRA's own A/B, the method's modules, unquantised layers: kept as they are
        w = layer.weight
        dense = (
            bnb.functional.dequantize_4bit(w.data, w.quant_state)
            if isinstance(layer, bnb.nn.Linear4bit)
            else w.data
        )
        if isinstance(module, LoraLayer):
            dense = dense + module.get_delta_weight("default")
        weights[name] = dense.float()
    merged = load_base(base_path, placement=placement)
    with torch.no_grad():
        for name, dense in weights.items():
            merged.get_submodule(name).weight.copy_(dense)
    merged.save_pretrained(out_dir)
    save_zoom(model, out_dir, method_name, method_values)
