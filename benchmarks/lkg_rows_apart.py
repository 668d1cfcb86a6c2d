"""Benchmark: LKG-RALM's guided rows apart, chunked (today) against the materialised softmax.

One layer's QUESTION/TAIL rows computed apart from flex (``flex.ROWS_APART``, and every
checkpointed fine-tune): ``rows_apart.guided_rows_attention``, which keeps the rows' outputs and
log-sum-exps, beside ``materialised``, the same rows through autograd of the materialised
softmax (how the path computed them until 2026-11-27). q ``[1, 32, L, 128]`` over 8 KV heads,
the last R rows guided, passages of 100 tokens before them, causal; fp32 and bf16. Two figures
per path:

- ``kept_mib``: what autograd keeps from forward to backward, counted once per storage through
  ``torch.autograd.graph.saved_tensors_hooks``, beyond q, k and v (the layer keeps those anyway).
  It does not depend on the device; a GPU's peak, which adds the backward's transients, is not
  this;
- ``seconds``: the median of interleaved forward + backward steps on this CPU (``--threads``),
  and the ratio to the materialised path's, measured in the same run.

    PYTHONPATH=$PWD python benchmarks/lkg_rows_apart.py   # -> results/lkg_rows_apart.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from measure import median_seconds
from tile_sweep import kept_bytes

from zoomattn.__main__ import cpu_description
from zoomattn.methods.lkg.kernel import TAIL, column_log_alpha
from zoomattn.methods.lkg.rows_apart import allowed_rows, guided_rows_attention

OUT = Path(__file__).parent / "results" / "lkg_rows_apart.json"
PASSAGE = 100


def materialised(q, k, v, mask, scaling, rows, key_segments, log_alpha) -> torch.Tensor:
    """The guided rows through autograd of the materialised softmax, in fp32 at least."""
    (b, h, n_q, d), (n_kv, n_k), r = q.shape, k.shape[1:3], rows.shape[1]
    dtype = torch.promote_types(q.dtype, torch.float32)
    q_rows = q.gather(2, rows[:, None, :, None].expand(b, h, r, d)).to(dtype)
    scores = (q_rows.view(b, n_kv, -1, d) @ k.to(dtype).transpose(-1, -2)).view(b, h, r, n_k)
    scores = scores * d**-0.5 + column_log_alpha(key_segments, log_alpha).to(dtype)[:, None, None]
    allowed = allowed_rows(mask, rows, n_q, n_k)
    probs = scores.masked_fill(~allowed, torch.finfo(dtype).min).softmax(-1)
    out = (probs.view(b, n_kv, -1, n_k) @ v.to(dtype)).view(b, h, r, d)
    return (out * allowed.any(-1)[..., None]).to(q.dtype)


def measure(
    tokens: int, rows: int, heads: int, kv_heads: int, head_dim: int, dtype, repeats: int
) -> dict:
    torch.manual_seed(0)
    q = torch.randn(1, heads, tokens, head_dim, dtype=dtype, requires_grad=True)
    k, v = (
        torch.randn(1, kv_heads, tokens, head_dim, dtype=dtype, requires_grad=True) for _ in "kv"
    )
    segments = torch.full((1, tokens), TAIL)
    segments[0, : tokens - rows] = torch.arange(tokens - rows) // PASSAGE
    log_alpha = torch.randn(1, int(segments.max()) + 1, requires_grad=True)
    guided = torch.arange(tokens - rows, tokens)[None]
    inputs = {t.untyped_storage().data_ptr() for t in (q, k, v)}
    args = (q, k, v, None, None, guided, segments, log_alpha)
    paths = {"rows_apart": guided_rows_attention, "materialised": materialised}
    mib = {name: kept_bytes(lambda f=fn: f(*args), inputs) / 2**20 for name, fn in paths.items()}

    def step(name):
        paths[name](*args).float().square().mean().backward()
        for t in (q, k, v, log_alpha):
            t.grad = None

    seconds = median_seconds(step, list(paths), repeats)
    return {
        "kept_mib": {name: round(x, 2) for name, x in mib.items()},
        "kept_materialised_over_rows_apart": round(mib["materialised"] / mib["rows_apart"], 1),
        "seconds": {name: round(x, 4) for name, x in seconds.items()},
        "time_rows_apart_over_materialised": round(
            seconds["rows_apart"] / seconds["materialised"], 2
        ),
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--rows", type=int, default=200)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=OUT)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    shape = (a.tokens, a.rows, a.heads, a.kv_heads, a.head_dim)
    result = {
        "what": "one layer's guided rows, forward + backward: MiB autograd keeps beyond q, k, v "
        "(a count; the device does not change it) and median seconds on this CPU",
        "shape": f"q [1, {a.heads}, {a.tokens}, {a.head_dim}] over {a.kv_heads} KV heads, "
        f"the last {a.rows} rows guided",
        "cpu": f"{cpu_description()}, {a.threads} thread(s)",
        "torch": torch.__version__,
        "repeats": a.repeats,
        "fp32": measure(*shape, torch.float32, a.repeats),
        "bf16": measure(*shape, torch.bfloat16, a.repeats),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
