"""Where a job's model runs and in which dtype the method's trainable modules are: one policy.

Config (top level or per preset):

- ``device: auto | cpu | cuda``. ``auto`` runs the model jobs (pretrain, finetune, evaluate and
  the attention analyses) on CUDA when their preset's ``resources.<kind>.gpus`` asks for a GPU,
  and on the CPU otherwise: ``small`` and ``paper`` train and evaluate on GPUs, ``tiny`` and
  ``smoke`` stay on the CPU on any machine (their results do not depend on what the machine
  has). ``cuda`` puts every model job on a GPU, ``cpu`` every one on the CPU (how the tests run
  ``small``'s DAG without a GPU).
- ``dtype: auto | float32 | bfloat16``: the dtype of the method's modules (OpAmp's adapters,
  rectification's ΔW, LKG-RALM's estimator and boundary embeddings) and of frozen unquantised
  weights (a full fine-tune keeps fp32 master weights). ``auto`` is bfloat16 on CUDA, as the
  papers' code trains with 4-bit bases computing in bf16, and float32 on the CPU. The accepted
  values are the schema's (workflow/schemas/config.schema.yaml).

The plan is made from config alone (no torch, no GPU probe) and goes into every model job's spec,
so a result is bound to the device and dtype it was computed with, and a job planned for CUDA
that finds none stops with a clear error instead of running elsewhere. At job time ``load_base``
puts the base on the planned device and ``Method.attach`` moves every module a method hangs on the
model to the base's device, in the planned dtype: no call site places a module by hand.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import asdict, dataclass

MODEL_KINDS = ("pretrain", "finetune", "evaluate")  # resource kinds whose jobs hold a model

log = logging.getLogger("zoomattn")


def default_dtype(device: str) -> str:
    """``dtype: auto``: bf16 on CUDA, fp32 elsewhere (the CPU, the meta device of tests)."""
    return "bfloat16" if device == "cuda" else "float32"


@dataclass(frozen=True)
class Placement:
    device: str = "cpu"  # cpu | cuda
    dtype: str = "float32"  # float32 | bfloat16: method modules and unquantised weights
    gpus: int = 0  # cards each of the job's processes uses (CUDA only): job_gpus

    def as_spec(self) -> dict:
        return asdict(self)

    @classmethod
    def from_spec(cls, spec: dict | None) -> Placement:
        """A job spec's ``device`` entry (absent: the CPU in fp32)."""
        return cls(**spec) if spec else cls()

    def torch_device(self):
        """The torch device. A job planned for CUDA that finds no GPU fails here, before work."""
        import torch

        if self.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(
                "this job was planned for CUDA (config `device`, or `auto` with "
                "resources.<kind>.gpus > 0) but no CUDA device is visible; set `device: cpu` "
                "(e.g. --config device=cpu) to run it on the CPU"
            )
        return torch.device(self.device)

    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)


CPU = Placement()


def processes(spec: dict) -> int:
    """The processes a job runs: a fine-tune's ``finetune.processes`` (torchrun starts them),
    one for every other job."""
    return (spec.get("finetune") or {}).get("processes", 1)


def job_gpus(placement: Placement, n_processes: int = 1) -> int:
    """The cards a job claims and asks the scheduler for: its placement's for each process.
    torchrun gives process i the i-th card the job sees (LOCAL_RANK), so a job of several
    processes has one card per process (config_checks holds ``resources.finetune.gpus`` to 1)."""
    return placement.gpus * n_processes


def plan(cfg: dict, kind: str) -> Placement:
    """The placement of a model job of resource ``kind``, from config alone."""
    if kind not in MODEL_KINDS:
        return CPU
    setting, gpus = cfg.get("device", "auto"), cfg["resources"][kind]["gpus"]
    device = ("cuda" if gpus else "cpu") if setting == "auto" else setting
    dtype = cfg.get("dtype", "auto")
    return Placement(
        device=device,
        dtype=default_dtype(device) if dtype == "auto" else dtype,
        gpus=max(gpus, 1) if device == "cuda" else 0,
    )


def place_method_modules(model) -> None:
    """Move every module a method hung on ``model`` (named ``zoom``) to the base's device, in the
    dtype its loader stated (``model.zoomattn_dtype``; else the default for that device)."""
    device = model.get_input_embeddings().weight.device
    dtype = getattr(model, "zoomattn_dtype", None)
    if dtype is None:
        import torch

        dtype = getattr(torch, default_dtype(device.type))
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] == "zoom":
            module.to(device=device, dtype=dtype)


def describe(model) -> dict[str, str]:
    """What ran: device (with the GPU's name), dtypes, 4-bit or not, the attention path."""
    from zoomattn.attention.interface import attention_modules

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    weight = base.get_input_embeddings().weight
    device = str(weight.device)
    if weight.device.type == "cuda":
        import torch

        device += f" ({torch.cuda.get_device_name(weight.device)})"
    quant = getattr(base.config, "quantization_config", None)
    if quant is not None and not isinstance(quant, dict):
        quant = quant.to_dict()
    zooms = [type(m.zoom).__name__ for m in attention_modules(base) if hasattr(m, "zoom")]
    n_layers = len(attention_modules(base))
    attention = f"{base.config._attn_implementation}: {n_layers - len(zooms)} layers fused SDPA"
    if zooms:
        attention += f", {len(zooms)} layers {sorted(set(zooms))[0]}"
    module_dtypes = sorted(
        {str(p.dtype) for n, p in base.named_parameters() if ".zoom." in n or n.startswith("zoom.")}
    )
    return {
        "device": device,
        "dtype.weights": str(weight.dtype),
        "dtype.method_modules": ",".join(module_dtypes) or "none",
        "quantization": f"4-bit {quant.get('bnb_4bit_quant_type')}" if quant else "none",
        "attention": attention,
    }


def report(model) -> None:
    """Log what ran to the job's log and, inside a job, as tags of its MLflow run."""
    info = describe(model)
    log.info("model placement: %s", "; ".join(f"{k} {v}" for k, v in info.items()))
    mlflow = sys.modules.get("mlflow")
    if mlflow is not None and mlflow.active_run() is not None:
        mlflow.set_tags({f"zoomattn.{k}": v for k, v in info.items()})
