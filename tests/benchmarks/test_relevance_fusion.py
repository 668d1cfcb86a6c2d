"""benchmarks/relevance_fusion_cuda.py's variants on the CPU (eager FlexAttention, PyTorch's CPU
backward guard lifted as in tests/methods/lkg/test_flex.py), a check of the steps a GPU session
times, not a measurement: each runs forward and backward, and the variants that compute LKG-RALM's
fusion give the same output."""

import json
import sys

import pytest
import torch
import torch.nn.attention.flex_attention as flex_api

from tests.spies import record_returns
from zoomattn.config import ROOT
from zoomattn.methods.lkg import flex

sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmark imports its siblings by name
import relevance_fusion_cuda  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
SAME_AS = {  # variant: the variant it must equal
    "flex_all": "bias_all",
    "flex_all_new_mask": "bias_all",
    "flex_all_rows_apart": "bias_all",
    "flex_2of32": "bias_2of32",
    "flex_2of32_copied": "bias_2of32",
    "flex_2of32_rows_apart": "bias_2of32",
    "flex_all_log_alpha_apart": "bias_all",
    "flex_2of32_log_alpha_apart": "bias_2of32",
    "flex_2of32_small_tiles": "bias_2of32",
    "flex_2of32_autotuned": "bias_2of32",
    "flex_all_mask_bytes": "bias_all",
    "flex_2of32_mask_bytes": "bias_2of32",
}
ALONE = (
    "flex_2of32_alone",
    "flex_2of32_alone_fixed_alpha",
    "flex_2of32_alone_rows_apart",
    "flex_2of32_alone_log_alpha_apart",
    "flex_2of32_alone_small_tiles",
    "flex_2of32_alone_autotuned",
    "flex_2of32_alone_mask_bytes",
)


@pytest.mark.parametrize(("padded", "side"), [(0.0, "left"), (0.25, "left"), (0.25, "right")])
def test_every_cuda_variant_steps_and_the_fused_ones_equal_the_bias_path(monkeypatch, padded, side):
    monkeypatch.setattr(flex_api, "_validate_device", lambda *tensors: None)
    apart = record_returns(monkeypatch, flex, "guided_rows_attention")
    gradient_apart = record_returns(monkeypatch, flex, "with_log_alpha_gradient")
    spans, real_spans = [], flex._spans  # (switch, key spans) of every block mask built

    def recorded_spans(*args):
        spans.append((flex.PADDING_SPANS, real_spans(*args)))
        return spans[-1][1]

    monkeypatch.setattr(flex, "_spans", recorded_spans)
    step, _, n_passages, forward = relevance_fusion_cuda.steps(
        n=300, heads=32, kv_heads=8, head_dim=16, passage=48, device="cpu", padded=padded, side=side
    )
    assert n_passages >= 3
    assert set(forward) == set(relevance_fusion_cuda.VARIANTS)
    for variant in relevance_fusion_cuda.VARIANTS:
        apart.clear(), gradient_apart.clear()
        step(variant)
        assert bool(apart) == variant.endswith("rows_apart"), variant
        assert bool(gradient_apart) == variant.endswith("log_alpha_apart"), variant
    # the padding read as its key span where the switch is on and there is a mask to read
    pads = int(padded * 300)
    want = None if not padded else [[pads, 300]] if side == "left" else [[0, 300 - pads]]
    read = [(on, None if span is None else span.tolist()) for on, span in spans]
    assert all(span is None for on, span in read if not on), read
    # built once, then reused, but by flex_all_new_mask, which builds its own (PADDING_SPANS is
    # on by default; the _mask_bytes variants build one without it)
    assert flex.PADDING_SPANS and [span for on, span in read if on] == [want, want], read
    assert [on for on, _ in read].count(False) == 1, read
    # with gradients on, as the steps run: the rows-apart path runs only where log α trains
    out = {variant: fn().detach().float() for variant, fn in forward.items()}
    for variant, reference in SAME_AS.items():
        torch.testing.assert_close(out[variant], out[reference], atol=2e-2, rtol=2e-2)
    fused_heads = list(relevance_fusion_cuda.TWO_OF_32)
    for variant in ALONE:
        torch.testing.assert_close(
            out[variant], out["bias_2of32"][:, fused_heads], atol=2e-2, rtol=2e-2
        )
    assert (out["bias_all"] - out["sdpa"]).abs().max() > 0.1  # the fusion changes the output


def test_a_variant_that_fails_is_recorded_and_the_others_go_on_unless_the_device_is_lost(
    monkeypatch, capsys
):
    """On the card each variant compiles its own kernels (flex at other tiles, autotuned): one
    that fails must not cost the step's other variants; one that leaves the device unusable ends
    the step's measuring, the rest marked not tried."""
    import tile_sweep

    def measure_one(variant):
        if variant.startswith("broken"):
            raise RuntimeError(f"{variant} does not fit")
        return {"seconds": 0.5}

    line = {"n": 64}
    variants = ["sdpa", "broken_tiles", "flex_2of32", "broken_device", "flex_all"]
    cells, lost = relevance_fusion_cuda.measured_cells(variants, measure_one, line, "cpu")
    assert lost is None and [cells[v].get("error", "ok")[:12] for v in variants] == [
        "ok", "RuntimeError", "ok", "RuntimeError", "ok"
    ]  # fmt: skip
    monkeypatch.setattr(tile_sweep, "device_lost", lambda device: True)
    cells, lost = relevance_fusion_cuda.measured_cells(variants, measure_one, line, "cpu")
    assert lost == "the device was unusable after broken_tiles"
    assert cells["sdpa"] == {"seconds": 0.5} and "does not fit" in cells["broken_tiles"]["error"]
    assert all(cells[v]["error"] == f"not tried: {lost}" for v in variants[2:])
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [p["variant"] for p in printed] == variants * 2 and all(p["n"] == 64 for p in printed)
