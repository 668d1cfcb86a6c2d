"""LKG-RALM's flex path under its switches: FlexAttention's kernel options (``flex.KERNEL_OPTIONS``,
the tiles for few fused heads) and its autotuned compile (``flex.AUTOTUNE``) reach the flex call,
padding is read as key spans (``flex.PADDING_SPANS``), and each leaves the values and
gradients the formula's. On the CPU the eager kernel stands in for the compiled one; the gpu lane
checks the generated kernels (tests/gpu/test_lkg_flex_tiles_on_cuda.py,
tests/gpu/test_lkg_flex_on_cuda.py)."""

import pytest
import torch
import torch.nn.attention.flex_attention as flex_api

from tests.methods.lkg.helpers import batch_of
from tests.methods.lkg.test_flex import (  # noqa: F401 (autouse fixture)
    SCALE,
    SEGMENTS,
    N,
    _flex_fn,
    _formula_fn,
    _inputs,
    _padding_mask,
    _rows,
    _values_and_grads,
    cpu_backward,
    rows_apart,
    trained,
)
from tests.spies import record_returns
from zoomattn.attention import kernels
from zoomattn.data.tasks import multihop, single_doc
from zoomattn.methods.lkg import flex

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


@pytest.mark.parametrize("autotune", [False, True])
def test_kernel_options_and_autotune_reach_the_flex_call_and_leave_the_values_as_they_were(
    monkeypatch, autotune
):
    """flex.KERNEL_OPTIONS (tiles for few fused heads) reach FlexAttention, and AUTOTUNE picks the
    max-autotune compile; on the CPU the eager kernel stands in for the compiled one, so the
    values and gradients must stay the formula's."""
    options = {"fwd_BLOCK_M": 64, "bwd_BLOCK_N1": 64}
    seen = []

    def compiled(tune):
        def attend(*args, **kwargs):
            seen.append((tune, kwargs["kernel_options"]))
            return flex_api.flex_attention(*args, **kwargs)

        return attend

    monkeypatch.setattr(flex, "compiled_flex_attention", compiled)
    monkeypatch.setattr(flex, "KERNEL_OPTIONS", options)
    monkeypatch.setattr(flex, "AUTOTUNE", autotune)
    qkv, log_alpha = _inputs()

    def fused(q, k, v, log_alpha):
        return flex.flex_relevance_attention(
            q, k, v, None, SCALE, [1, 2], SEGMENTS, SEGMENTS, log_alpha, compiled=True
        )

    out, grads = _values_and_grads(fused, qkv, log_alpha, padded=False)
    assert seen == [(autotune, options)]
    ref_out, ref_grads = _values_and_grads(_formula_fn([1, 2], None), qkv, log_alpha, False)
    torch.testing.assert_close(out, ref_out.float(), atol=1e-5, rtol=1e-5)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r.float(), atol=1e-5, rtol=1e-5)


def _mask_mod_everywhere(query_segments, mask, spans=None) -> torch.Tensor:
    """``fusion_mask_mod`` on every (batch row, query, key): ``[B, L, S]``."""
    b = torch.arange(2)[:, None, None]
    q_idx = torch.arange(query_segments.shape[1])[None, :, None]
    kv_idx = torch.arange(SEGMENTS.shape[1])[None, None, :]
    mask_mod = flex.fusion_mask_mod(query_segments, SEGMENTS, mask, spans)
    return mask_mod(b, 0, q_idx, kv_idx)


def _right_padding_mask():
    """Training's batches: row 1 right-padded by 3 (its padded rows see its 9 real keys)."""
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    real = torch.arange(N)[None] < torch.tensor([[N], [N - 3]])
    return causal[None, None] & real[:, None, None, :]


@pytest.mark.parametrize(
    ("padding", "decoding", "spans"),
    [("left", False, [[0, N], [3, N]]), ("left", True, [[0, N], [3, N]]),
     ("right", False, [[0, N], [0, N - 3]])],
)  # fmt: skip
def test_padding_spans_give_the_masks_mask_mod_without_reading_the_mask(
    monkeypatch, padding, decoding, spans
):
    """With the switch on, a causal mask with padding becomes each row's span of real keys, and
    ``mask_mod`` is the same function of (row, query, key) with the mask's bytes zeroed."""
    monkeypatch.setattr(flex, "PADDING_SPANS", True)
    mask = _padding_mask() if padding == "left" else _right_padding_mask()
    query_segments = SEGMENTS
    if decoding:  # one query row, the last
        mask, query_segments = mask[:, :, -1:], SEGMENTS[:, -1:]
    found = flex._spans(query_segments, SEGMENTS, mask)
    assert found.tolist() == spans
    want = _mask_mod_everywhere(query_segments, mask)
    assert torch.equal(_mask_mod_everywhere(query_segments, torch.zeros_like(mask), found), want)
    one_mask = mask[1:]  # one mask broadcast over the batch: its span for every row
    assert flex._spans(query_segments, SEGMENTS, one_mask).tolist() == [spans[1]] * 2


def test_padding_spans_are_none_without_the_switch_or_a_padded_causal_mask(monkeypatch):
    mask = _padding_mask()
    monkeypatch.setattr(flex, "PADDING_SPANS", False)
    assert flex._spans(SEGMENTS, SEGMENTS, mask) is None  # switch off
    monkeypatch.setattr(flex, "PADDING_SPANS", True)
    assert flex._spans(SEGMENTS, SEGMENTS, mask).tolist() == [[0, 12], [3, 12]]  # row 1: 3 pads
    assert flex._spans(SEGMENTS, SEGMENTS, None) is None  # causal: no mask to read anyway
    holed = mask.clone()
    holed[0, 0, -1, 5] = False  # one real key hidden from one row: read as a mask
    assert flex._spans(SEGMENTS, SEGMENTS, holed) is None


@pytest.mark.usefixtures("rows_apart")
@pytest.mark.parametrize("padding", ["left", "right"])
def test_padding_spans_leave_the_values_and_gradients_the_formulas(monkeypatch, padding):
    monkeypatch.setattr(flex, "PADDING_SPANS", True)
    built, real = [], flex.fusion_block_mask
    monkeypatch.setattr(flex, "fusion_block_mask", lambda *a: built.append(a[-1]) or real(*a))
    qkv, log_alpha = _inputs()
    mask = _padding_mask() if padding == "left" else _right_padding_mask()
    left = padding == "left"  # left padding's rows see nothing: the formula's are NaN, weight 0
    out, grads = _values_and_grads(_flex_fn([1, 2], mask), qkv, log_alpha, padded=left)
    ref, ref_grads = _values_and_grads(_formula_fn([1, 2], mask), qkv, log_alpha, left)
    assert [spans.tolist() for spans in built] == [flex.padding_spans(mask).tolist()]
    torch.testing.assert_close(_rows(out, left), _rows(ref, left).float(), atol=1e-5, rtol=1e-5)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r.float(), atol=1e-5, rtol=1e-5)


@pytest.mark.usefixtures("rows_apart")
def test_a_model_with_padding_spans_trains_and_generates_as_on_the_reference(
    monkeypatch, base_tok, tok, sampler
):
    """A tiny LKG model, every head fused: the masks its layers get, training's right padding and
    generation's left padding (the prefill and every decoding step), are read as key spans, and
    the loss, every gradient and the greedy tokens are the reference path's."""
    monkeypatch.setattr(flex, "PADDING_SPANS", True)
    read = record_returns(monkeypatch, flex, "_spans")
    tasks = [single_doc(sampler, 0.75), multihop(sampler, 0.6)]
    train, prompts = batch_of(tok, tasks), batch_of(tok, tasks, answers=False)
    opts = dict(max_new_tokens=2, do_sample=False, pad_token_id=tok.pad_token_id)
    results = []
    for path in (kernels.REFERENCE, kernels.FUSED):
        model, loss, grads = trained(monkeypatch, path, base_tok, tok, train)
        with torch.no_grad():
            tokens = model.eval().generate(**prompts, **opts)
        results.append((loss, grads, tokens))
    (loss, grads, tokens), (fused_loss, fused_grads, fused_tokens) = results
    real_train, real_prompt = train["attention_mask"].sum(-1), prompts["attention_mask"].sum(-1)
    width = prompts["input_ids"].shape[1]
    assert min(real_train) < train["input_ids"].shape[1] and min(real_prompt) < width
    assert [s.tolist() for s in read] == [  # training, the prefill, one decoding step
        [[0, n] for n in real_train.tolist()],
        [[width - n, width] for n in real_prompt.tolist()],
        [[width - n, width + 1] for n in real_prompt.tolist()],
    ]
    torch.testing.assert_close(fused_loss, loss, atol=1e-6, rtol=1e-6)
    for name, grad in grads.items():
        torch.testing.assert_close(fused_grads[name], grad, atol=1e-5, rtol=1e-5, msg=name)
    assert torch.equal(fused_tokens, tokens)
