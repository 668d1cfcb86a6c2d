"""Helpers the stages share."""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("zoomattn")


def load_model(spec: dict, model_dir: Path, base_dir: Path, threads: int):
    """The model and its tokenizer: the model directory's own when fine-tuning saved one (a method
    that adds tokens, LKG-RALM's boundary markers), else the base's. The spec's
    ``evaluation_base`` (the preset's ``evaluation.base``) picks the base weights a LoRA model is
    evaluated on (``methods.loading.load_for_eval``)."""
    import torch

    from zoomattn.methods.loading import load_for_eval
    from zoomattn.modeling.loading import load_tokenizer
    from zoomattn.placement import Placement

    torch.manual_seed(0)
    torch.set_num_threads(threads)
    own = (Path(model_dir) / "tokenizer_config.json").is_file()
    tok = load_tokenizer(model_dir if own else base_dir)
    placement = Placement.from_spec(spec.get("device"))
    base = spec.get("evaluation_base", "quantized")  # a spec built by hand may leave it out
    return load_for_eval(model_dir, base_dir, spec["quantization"], placement, base), tok


def clear_checkpoints(ckpt: Path) -> None:
    shutil.rmtree(ckpt, ignore_errors=True)


def tag_resumed_from(run):
    """A training loop's ``on_start``: the MLflow run says from which step it resumed (0: from
    scratch), its metrics before that step re-logged by the loop."""
    return lambda step: run.set_tags({"zoomattn.resumed_from_step": str(step)})


@contextlib.contextmanager
def attention_kernels(spec: dict, run=None) -> Iterator[None]:
    """The job's attention paths (zoomattn/attention/kernels.py): its spec's ``attention_kernels``
    (absent: ``reference``) set for the whole job; at the end, the path each method's attention
    took, in the job's log and, given its MLflow run, as the run's tags (``path_tags``)."""
    from zoomattn.attention import kernels

    kernels.configure(spec.get("attention_kernels", kernels.REFERENCE))
    yield
    paths = kernels.paths_run()
    if paths:
        log.info(
            "attention paths (attention_kernels: %s): %s",
            kernels.setting(),
            ", ".join(f"{method} {path}" for method, path in paths.items()),
        )
        if run is not None:
            run.set_tags(path_tags(paths))


def path_tags(paths: dict[str, str]) -> dict[str, str]:
    """MLflow tags of the paths each method's attention ran: ``attention.path.<method>``."""
    return {f"attention.path.{method}": path for method, path in paths.items()}
