"""``SKIP_PADDED_ROWS``: with the padding as key spans, right padding's padded query rows attend
to nothing, so the kernels skip their tiles. Against the materialised formula with those rows
emptied, through Triton's interpreter; inside the model, a fine-tune step's loss and gradients
are the reference path's, the padded rows being rows no loss reads."""

import pytest
import torch

from tests.methods.rectify.test_model import (
    IDS,
    MASK,
    _copy_lora_into_rectified,
    _rectified,
    _trained_lora,
)
from tests.methods.rectify.test_triton_kernel import (  # noqa: F401 (fixtures)
    _assert_fused_is_materialised,
    _scenario,
    kv_as_shipped,
    kv_keys_as_rows,
    padding_spans,
)
from tests.spies import record_returns
from tests.triton_interpreter import SPANS, interpreter_or_skip, one_way
from zoomattn.attention import kernels
from zoomattn.methods.rectify.kernel import Rectifier

interpreter_or_skip("tests/gpu/test_rectify_triton_on_cuda.py")
from zoomattn.methods.rectify import triton_kernel  # noqa: E402

pytestmark = one_way(SPANS, True)  # the switch acts on the spans only


@pytest.mark.parametrize("scenario", ["right_padded", "padded"])
def test_padded_rows_skipped_equal_the_formula_with_those_rows_empty(monkeypatch, scenario):
    """Right padding: the padded rows give 0, every other row and every gradient the formula's
    with those rows allowing no key, and the query tile of padded rows alone is skipped (an empty
    range). Left padding's padded rows saw no key already: the formula is the call's own."""
    monkeypatch.setattr(triton_kernel, "SKIP_PADDED_ROWS", True)
    ranges = record_returns(monkeypatch, triton_kernel, "tile_ranges")
    inputs, mask = _scenario(scenario, torch.float32)
    emptied = triton_kernel.without_padded_rows(mask, triton_kernel.padding_spans(mask))
    g = Rectifier("max", 3.0)
    _assert_fused_is_materialised(g, inputs, mask, reference_mask=emptied)
    if scenario == "padded":
        assert torch.equal(emptied, mask)
        return
    padded = ~emptied.any(-1)[1, 0]  # batch row 1: 13 real tokens of 24
    assert padded.sum() == 11 and torch.equal(padded, ~mask[1, 0].any(0))
    out = triton_kernel.fused_rectified_attention(*inputs, g, mask)
    assert out[1, :, padded].eq(0).all() and out[1, :, ~padded].ne(0).any()
    start, end = ranges[-1]["forward"][1, 1].tolist()  # batch row 1's rows 16-23: all padding
    assert start >= end


@kv_as_shipped  # the test above holds both layouts: here each run is a model in the interpreter
@pytest.mark.usefixtures("on_cuda_under_fused")
def test_a_fine_tune_step_skipping_padded_rows_has_the_reference_loss_and_gradients(
    base_dir, monkeypatch
):
    """Training's right-padded batch with labels on its real tokens, every trainable parameter's
    gradient: the padded rows no loss reads, and whose keys no real row sees, change nothing."""
    monkeypatch.setattr(triton_kernel, "SKIP_PADDED_ROWS", True)
    emptied = record_returns(monkeypatch, triton_kernel, "without_padded_rows")
    ids, mask = (torch.stack([t[0], t[1].roll(-3)]) for t in (IDS, MASK))

    def loss_and_grads():
        torch.manual_seed(0)
        model = _rectified(base_dir, xi=3.0)
        _copy_lora_into_rectified(_trained_lora(base_dir), model)
        for name, p in model.named_parameters():
            p.requires_grad_(".zoom." in name or "lora_" in name)
        labels = ids.masked_fill(mask == 0, -100)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.requires_grad}

    with kernels.using(kernels.REFERENCE):
        loss, grads = loss_and_grads()
    fused_loss, fused_grads = loss_and_grads()
    assert len(emptied) == 1  # the fused kernel ran, once per forward: the mask's ranges
    assert not emptied[0].any(-1)[1, 0, -3:].any()  # the three padded rows of batch row 1
    torch.testing.assert_close(fused_loss, loss, atol=1e-6, rtol=1e-6)
    assert fused_grads.keys() == grads.keys() and any(".zoom.down." in n for n in grads)
    for name, grad in grads.items():
        torch.testing.assert_close(fused_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)
