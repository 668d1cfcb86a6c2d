"""Benchmark: the bytes autograd keeps from forward to backward, per OpAmp path, beside plain SDPA.

One OpAmp layer (``OpAmpAttention``, K = 10, adapter dimension 6, dropout 0.1, training), q
``[1, 4, L, 16]`` over 2 KV heads, fp32, causal prefill; each path's kept tensors are counted once
per storage through ``torch.autograd.graph.saved_tensors_hooks``, as multiples of |q|: beyond q,
k and v, and in all (q, k and v counted where a path keeps them: a model's post-RoPE q is kept by
its attention alone); the layer's weights, resident anyway, in neither. Runs on the CPU (the
``triton`` path through Triton's interpreter): what is kept does not depend on the device; a
GPU's peak, which adds the backward's transients, is not this.

    PYTHONPATH=$PWD python benchmarks/opamp_kept_memory.py    # -> results/opamp_kept_memory.json
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

import torch  # noqa: E402
from tile_sweep import kept_bytes, with_switch  # noqa: E402

from tests.triton_interpreter import squeeze_interpreter_indices  # noqa: E402
from zoomattn.attention.math import sdpa  # noqa: E402
from zoomattn.methods.opamp import fused  # noqa: E402
from zoomattn.methods.opamp.config import OpAmpConfig  # noqa: E402
from zoomattn.methods.opamp.model import OpAmpAttention  # noqa: E402

OUT = Path(__file__).parent / "results" / "opamp_kept_memory.json"
PATHS = ("plain", "stacked", "recompute", "triton")


def main(tokens: int = 64) -> dict:
    squeeze_interpreter_indices()
    torch.manual_seed(0)
    q = torch.randn(1, 4, tokens, 16, requires_grad=True)
    k, v = (torch.randn(1, 2, tokens, 16, requires_grad=True) for _ in range(2))
    layer = OpAmpAttention(4, 2, 16, OpAmpConfig(10, 6, dropout=0.1)).train()
    weights = {p.untyped_storage().data_ptr() for p in layer.parameters()}  # resident anyway
    inputs = weights | {t.untyped_storage().data_ptr() for t in (q, k, v)}
    q_bytes = q.numel() * q.element_size()
    calls = {"sdpa": lambda: sdpa(q, k, v)}
    calls.update({path: lambda p=path: layer(q, k, v, path=p) for path in PATHS})
    calls["stacked_adapters_replayed"] = lambda: with_switch(  # the adapters replayed in backward
        fused, "RECOMPUTE_ADAPTERS", True, lambda: layer(q, k, v, path="stacked")
    )
    beyond = {name: kept_bytes(fn, inputs) / q_bytes for name, fn in calls.items()}
    in_all = {name: kept_bytes(fn, weights) / q_bytes for name, fn in calls.items()}
    return {
        "what": "bytes autograd keeps from forward to backward, in multiples of |q| (CPU, fp32): "
        "beyond q, k, v (kept_over_q), and in all, q, k, v included where kept "
        "(kept_in_all_over_q); the layer's weights, resident anyway, left out of both",
        "shape": f"q [1, 4, {tokens}, 16], k/v [1, 2, {tokens}, 16], K = 10, adapter dim 6",
        "torch": torch.__version__,
        "kept_over_q": {name: round(x, 3) for name, x in beyond.items()},
        "kept_vs_sdpa": {name: round(x / beyond["sdpa"], 2) for name, x in beyond.items()},
        "kept_in_all_over_q": {name: round(x, 3) for name, x in in_all.items()},
        "kept_in_all_vs_sdpa": {name: round(x / in_all["sdpa"], 2) for name, x in in_all.items()},
    }


if __name__ == "__main__":
    result = main(*(int(a) for a in sys.argv[1:]))
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
