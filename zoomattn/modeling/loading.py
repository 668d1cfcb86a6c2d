"""Building, saving and reloading models: the one code path a hub model and our tiny base share.

A fine-tuned model directory holds peft's LoRA files, the method's unquantised attention modules
(``zoom_modules.safetensors``) and ``method.json`` (method name and config). Reloading rebuilds the
method from that config and loads the modules strictly, so a model can never be evaluated with a
layer layout other than the one it was trained with.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

import zoomattn.attention.interface as attn_interface
from zoomattn.methods import METHODS

ZOOM_FILE = "zoom_modules.safetensors"
METHOD_FILE = "method.json"


def quantization_config(q: dict | None) -> BitsAndBytesConfig | None:
    if not q or not q["load_in_4bit"]:
        return None
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=q["quant_type"],
        bnb_4bit_use_double_quant=q["double_quant"],
        bnb_4bit_compute_dtype=getattr(torch, q["compute_dtype"]),
    )


def load_base(path: str | Path, quantization: dict | None = None):
    """from_pretrained with our attention implementation; 4-bit when quantization is set."""
    qc = quantization_config(quantization)
    model = AutoModelForCausalLM.from_pretrained(
        path,
        attn_implementation=attn_interface.NAME,
        quantization_config=qc,
        dtype=torch.float32 if qc is None else qc.bnb_4bit_compute_dtype,
        device_map="cuda" if torch.cuda.is_available() else "cpu",
    )
    return model


def load_tokenizer(path: str | Path):
    return AutoTokenizer.from_pretrained(path)


def zoom_state(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if ".zoom." in n}


def build_trainable(
    base_path, method_name: str, method_values: dict, lora: dict, quantization: dict | None
):
    """Base (4-bit) + the method's attention modules (unquantised, trained) + LoRA."""
    from peft import LoraConfig, get_peft_model  # peft imports bitsandbytes: load only when used

    method = METHODS[method_name]
    model = load_base(base_path, quantization)
    method.attach(model, method.make_config(method_values))
    model = get_peft_model(
        model,
        LoraConfig(
            r=lora["r"],
            lora_alpha=lora["alpha"],
            lora_dropout=lora["dropout"],
            target_modules=list(lora["target_modules"]),
            bias="none",
            task_type="CAUSAL_LM",
        ),
    )
    for name, p in model.named_parameters():
        if ".zoom." in name:
            p.requires_grad_(True)
    return model


def save_finetuned(model, out_dir: Path, method_name: str, method_values: dict) -> None:
    model.save_pretrained(out_dir)
    zoom = zoom_state(model)
    if zoom:
        save_file(zoom, str(Path(out_dir) / ZOOM_FILE))
    (Path(out_dir) / METHOD_FILE).write_text(
        json.dumps({"method": method_name, "config": method_values}, indent=1)
    )


def load_finetuned(model_dir: str | Path, base_path, quantization: dict | None):
    """Rebuild base + method + LoRA from a fine-tuned directory, for evaluation."""
    from peft import PeftModel

    model_dir = Path(model_dir)
    spec = json.loads((model_dir / METHOD_FILE).read_text())
    method = METHODS[spec["method"]]
    model = load_base(base_path, quantization)
    method.attach(model, method.make_config(spec["config"]))
    model = PeftModel.from_pretrained(model, model_dir)
    expected = {n for n, _ in model.named_parameters() if ".zoom." in n}
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
    model.eval()
    return model


def load_for_eval(model_dir: str | Path, base_dir: str | Path, quantization: dict | None):
    """The base model itself (model_dir == base_dir) or a fine-tuned one on top of it."""
    if Path(model_dir).resolve() == Path(base_dir).resolve():
        return load_base(base_dir).eval()
    return load_finetuned(model_dir, base_dir, quantization)
