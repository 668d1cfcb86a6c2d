"""A base model with its method attached: built for training, rebuilt from a saved directory.

The method-free parts (loading a base, saving LoRA files and the method's modules, the merged
evaluation copy) are in ``zoomattn.modeling.loading``; this module adds what needs the method
registry: attaching the method a cell or a saved ``method.json`` names, and the shared LoRA
around it. Reloading rebuilds the method from ``method.json`` and loads its modules strictly, so a
model can never be evaluated with a layer layout other than the one it was trained with.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from zoomattn.methods import METHODS
from zoomattn.modeling.hub import BASE_FILE
from zoomattn.modeling.loading import (
    ADAPTER_FILE,
    MERGED_DIR,
    load_base,
    load_zoom,
    read_method_file,
    unwrap,
)
from zoomattn.placement import CPU, Placement, report


def build_trainable(
    base_path,
    method_name: str,
    method_cfg,
    lora: dict,
    quantization: dict | None,
    placement: Placement = CPU,
):
    """Base (4-bit) + the method's attention modules (unquantised, trained) + LoRA; with
    ``tuning: full`` the unquantised base + the method's modules, every parameter trained.
    ``method_cfg``: the method's typed config (``Method.make_config``)."""
    method = METHODS[method_name]
    if method.tuning(method_cfg) == "full":  # fp32 master weights: bf16 would drop small steps
        model = load_base(base_path, placement=replace(placement, dtype="float32"))
        method.attach(model, method_cfg)
        for p in model.parameters():
            p.requires_grad_(True)
        report(model)
        return model

    from peft import LoraConfig, get_peft_model  # peft imports bitsandbytes: load only when used

    model = load_base(base_path, quantization, placement)
    method.attach(model, method_cfg)
    model = get_peft_model(
        model,
        LoraConfig(
            r=lora["r"],
            lora_alpha=lora["alpha"],
            lora_dropout=lora["dropout"],
            target_modules=method.lora_targets(lora["target_modules"]),
            bias="none",
            task_type="CAUSAL_LM",
        ),
    )
    for name, p in model.named_parameters():
        if ".zoom." in name:
            p.requires_grad_(True)
    report(model)
    return model


def _attach_saved_zoom(model, model_dir: Path) -> None:
    """Rebuild the method from method.json and load its modules strictly."""
    name, values = read_method_file(model_dir)
    method = METHODS[name]
    method.attach(model, method.make_config(values))
    load_zoom(model, model_dir)


def load_finetuned(
    model_dir: str | Path, base_path, quantization: dict | None, placement: Placement = CPU
):
    """Rebuild base + method + LoRA from a fine-tuned directory, exactly as trained."""
    from peft import PeftModel

    model_dir = Path(model_dir)
    model = PeftModel.from_pretrained(load_base(base_path, quantization, placement), model_dir)
    _attach_saved_zoom(unwrap(model), model_dir)
    return model.eval()


def load_unquantized_merged(model_dir: str | Path, base_path, placement: Placement = CPU):
    """The LoRA merged into the unquantised base, in the placement's dtype (bf16 on CUDA), with
    the method's modules: how the OpAmp authors evaluate (``merge_lora.py``: the bf16 base,
    ``merge_and_unload``), not the 4-bit weights the LoRA was trained against."""
    from peft import PeftModel

    model_dir = Path(model_dir)
    model = PeftModel.from_pretrained(load_base(base_path, placement=placement), model_dir)
    _attach_saved_zoom(unwrap(model), model_dir)
    return model.merge_and_unload().eval()


def load_merged(merged_dir: str | Path, placement: Placement = CPU):
    model = load_base(merged_dir, placement=placement)
    _attach_saved_zoom(model, Path(merged_dir))
    return model.eval()


EVAL_BASES = ("quantized", "unquantized")  # evaluation.base


def load_for_eval(
    model_dir: str | Path,
    base_dir: str | Path,
    quantization: dict | None,
    placement: Placement = CPU,
    base: str = "quantized",
):
    """The base itself, a fine-tuned model's merged evaluation copy, a fully tuned model (plain
    weights + method.json, unquantised as trained), or base + LoRA + method; on the placement's
    device, reported to the job's log and MLflow run.

    ``base`` (``evaluation.base``) says which base weights a hub base and a LoRA model are
    evaluated on: ``quantized``, the 4-bit ones fine-tuning saw (or the merged copy of them that
    ``export_merged`` saved); ``unquantized``, the base's own weights in the placement's dtype,
    the LoRA merged into them. A fully tuned model and our tiny base are unquantised either way.
    """
    if base not in EVAL_BASES:
        raise ValueError(f"evaluation.base: one of {', '.join(EVAL_BASES)}, got {base!r}")
    model_dir = Path(model_dir)
    if model_dir.resolve() == Path(base_dir).resolve():
        # A hub base is evaluated as fine-tuning sees it (4-bit); our tiny base unquantised.
        from_hub = (model_dir / BASE_FILE).is_file() and base == "quantized"
        model = load_base(base_dir, quantization if from_hub else None, placement).eval()
    elif (model_dir / ADAPTER_FILE).exists() and base == "unquantized":
        model = load_unquantized_merged(model_dir, base_dir, placement)
    elif (model_dir / MERGED_DIR).exists():
        model = load_merged(model_dir / MERGED_DIR, placement)
    elif (model_dir / "config.json").is_file() and not (model_dir / ADAPTER_FILE).exists():
        model = load_merged(model_dir, placement)
    else:
        model = load_finetuned(model_dir, base_dir, quantization, placement)
    report(model)
    return model
