"""LKG-RALM's fusion through FlexAttention (methods/lkg/flex.py) against the materialised formula.

On the CPU flex_attention runs eagerly (its reference implementation: the compiled CPU kernel
takes minutes to build here and has no backward). PyTorch's API refuses a backward on the CPU
(``_validate_device``); its own eager backward runs fine there, so these tests lift that guard
to check values AND gradients of our score_mod/mask_mod. The tiles of the block mask (ignored
by the eager path) are checked against PyTorch's ``create_block_mask``; the compiled CUDA kernel
is checked in tests/gpu/test_lkg_flex_on_cuda.py.
"""

import pytest
import torch
import torch.nn.attention.flex_attention as flex_api

from tests.methods.lkg.helpers import attached_lkg, batch_of
from tests.methods.lkg.test_kernel import (
    OTHER,
    SCALE,
    SEGMENTS,
    N,
    _materialised,
    _padding_mask,
    _qkv,
)
from tests.spies import record_returns
from zoomattn.attention import kernels
from zoomattn.attention.math import sdpa
from zoomattn.data.tasks import multihop, single_doc
from zoomattn.methods.lkg import flex
from zoomattn.methods.lkg.kernel import (
    QUESTION,
    TAIL,
    Boundary,
    call_mask,
    fusion_bias,
    relevance_attention,
)
from zoomattn.methods.lkg.model import LkgLayerAttention, LkgState
from zoomattn.modeling.loading import enable_activation_checkpointing

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
PADDING_ROWS = 3  # row 1 of SEGMENTS is left-padded by 3 in _padding_mask


@pytest.fixture(autouse=True)
def cpu_backward(monkeypatch):
    monkeypatch.setattr(flex_api, "_validate_device", lambda *tensors: None)


@pytest.fixture(params=["score_mod", "rows_apart", "log_alpha_gradient_apart"])
def rows_apart(request, monkeypatch):
    """Each way of the fused path: log α in flex's score_mod, the guided rows apart, or log α
    detached in the score_mod and its gradient from the guided rows apart; True for the rows
    apart."""
    monkeypatch.setattr(flex, "ROWS_APART", request.param == "rows_apart")
    monkeypatch.setattr(flex, "LOG_ALPHA_GRADIENT_APART", request.param.startswith("log_alpha"))
    return request.param == "rows_apart"


def _inputs(dtype=torch.float32, d=8):
    q, k, v, log_alpha = _qkv(d=d)
    return [t.to(dtype).requires_grad_() for t in (q, k, v)], log_alpha.requires_grad_()


def _weight(out, padded):
    """Random output weights, 0 on the padded query rows (don't-care rows, NaN in the formula)."""
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out)
    if padded:
        w[1, :, :PADDING_ROWS] = 0
    return w


def _values_and_grads(fn, qkv, log_alpha, padded):
    out = fn(*qkv, log_alpha)
    grads = torch.autograd.grad((out * _weight(out, padded)).sum(), [*qkv, log_alpha])
    return out, grads


def _flex_fn(heads, mask, segments=SEGMENTS):
    def run(q, k, v, log_alpha):
        return flex.flex_relevance_attention(
            q, k, v, mask, SCALE, heads, segments, segments, log_alpha
        )

    return run


def _formula_fn(heads, mask, segments=SEGMENTS):
    """The materialised formula in fp64: softmax(q·kᵀ·s + fusion_bias)·v on the fused heads, plain
    SDPA on the others; padded query rows get a finite bias (their weight is 0)."""

    def run(q, k, v, log_alpha):
        q, k, v, log_alpha = (t.double() for t in (q, k, v, log_alpha))
        allowed = call_mask(mask, N, N, "cpu")
        bias = fusion_bias(segments, segments, log_alpha, allowed)
        bias = bias.masked_fill(~allowed.any(-1, keepdim=True), 0)  # rows without a key
        fused = _materialised(q, k, v, bias)
        plain = sdpa(q, k, v, mask, SCALE)
        is_fused = torch.zeros(q.shape[1], dtype=torch.bool)
        is_fused[heads] = True
        return torch.where(is_fused[None, :, None, None], fused, plain)

    return run


def _rows(out, padded):
    return torch.cat([out[:1], out[1:, :, PADDING_ROWS:]], dim=2) if padded else out


@pytest.mark.usefixtures("rows_apart")
@pytest.mark.parametrize("heads,padded", [([1, 2], True), ([0, 1, 2, 3], False)])
def test_flex_fusion_equals_the_materialised_formula_in_fp32_values_and_gradients(heads, padded):
    qkv, log_alpha = _inputs()
    mask = _padding_mask() if padded else None
    out, grads = _values_and_grads(_flex_fn(heads, mask), qkv, log_alpha, padded)
    ref, ref_grads = _values_and_grads(_formula_fn(heads, mask), qkv, log_alpha, padded)
    torch.testing.assert_close(_rows(out, padded), _rows(ref, padded).float(), atol=1e-5, rtol=1e-5)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r.float(), atol=1e-5, rtol=1e-5)
    assert (grads[3][1] != 0).all()  # every passage's α of the three-passage row gets a gradient


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.usefixtures("rows_apart")
def test_flex_fusion_in_bf16_is_within_plain_sdpas_bf16_error():
    """Values and gradients against the fp64 formula on the same rounded inputs, within twice
    the error plain causal SDPA makes in bf16 (the same inputs against its own fp64)."""
    mask = _padding_mask()
    qkv, log_alpha = _inputs(torch.bfloat16, d=64)
    out, grads = _values_and_grads(_flex_fn([0, 1, 2, 3], mask), qkv, log_alpha, True)
    ref, ref_grads = _values_and_grads(_formula_fn([0, 1, 2, 3], mask), qkv, log_alpha, True)

    def plain(q, k, v, log_alpha):
        return sdpa(q, k, v, None, SCALE) + 0 * log_alpha.sum()

    sdpa_out, sdpa_grads = _values_and_grads(plain, qkv, log_alpha, False)
    exact = [t.detach().double().requires_grad_() for t in qkv]
    sdpa_ref, sdpa_ref_grads = _values_and_grads(plain, exact, log_alpha.double(), False)
    assert out.dtype == torch.bfloat16
    assert _rel(_rows(out, True), _rows(ref, True)) <= 2 * _rel(sdpa_out, sdpa_ref) + 1e-3
    for g, r, s, e in zip(grads[:3], ref_grads, sdpa_grads, sdpa_ref_grads, strict=False):
        assert _rel(g, r) <= 2 * _rel(s, e) + 1e-3
    assert _rel(grads[3], ref_grads[3]) <= 1e-2  # log α: accumulated in fp32


@pytest.mark.usefixtures("rows_apart")
def test_fully_masked_rows_give_zero_output_and_gradient_as_todays_path():
    qkv, log_alpha = _inputs()
    mask = _padding_mask()
    out, grads = _values_and_grads(_flex_fn([1, 2], mask), qkv, log_alpha, False)

    def today(q, k, v, log_alpha):
        bias = fusion_bias(SEGMENTS, SEGMENTS, log_alpha, call_mask(mask, N, N, "cpu"))
        return relevance_attention(q, k, v, mask, SCALE, [1, 2], bias)

    ref, ref_grads = _values_and_grads(today, qkv, log_alpha, False)
    assert (out[1, [1, 2], :PADDING_ROWS] == 0).all()
    assert (grads[0][1, [1, 2], :PADDING_ROWS] == 0).all()
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-5)


@pytest.mark.usefixtures("rows_apart")
def test_a_guided_row_the_mask_leaves_no_key_gives_zero_output_and_finite_gradients():
    qkv, log_alpha = _inputs()
    mask = _padding_mask().clone()
    mask[0, :, -1] = False  # the last row, a TAIL row: nothing to attend to
    out, grads = _values_and_grads(_flex_fn([1, 2], mask), qkv, log_alpha, True)
    assert (out[0, [1, 2], -1] == 0).all() and out[0, [1, 2], -2].abs().sum() > 0
    assert all(torch.isfinite(g).all() for g in grads)
    assert (grads[0][0, [1, 2], -1] == 0).all()


@pytest.mark.usefixtures("rows_apart")
@pytest.mark.parametrize("padded", [False, True])
def test_a_decoding_step_through_flex_equals_the_formulas_last_row(padded):
    qkv, log_alpha = _inputs()
    q, k, v = qkv
    mask = _padding_mask()[:, :, -1:] if padded else None
    step = flex.flex_relevance_attention(
        q[:, :, -1:], k, v, mask, SCALE, [0, 2, 3], SEGMENTS[:, -1:], SEGMENTS, log_alpha
    )
    full_mask = _padding_mask() if padded else None
    ref = _formula_fn([0, 2, 3], full_mask)(q, k, v, log_alpha)[:, :, -1:]
    torch.testing.assert_close(step, ref.float(), atol=1e-5, rtol=1e-5)


@pytest.mark.usefixtures("rows_apart")
def test_a_batch_row_without_question_or_answer_rows_equals_the_formula():
    """Row 1 has no guided row while row 0 has five: with the rows apart, row 1's five slots are
    fillers that must leave its output as flex gives it."""
    segments = SEGMENTS.clone()
    segments[1] = torch.tensor([OTHER] * 3 + [0] * 3 + [1] * 3 + [2] * 3)
    qkv, log_alpha = _inputs()
    out, grads = _values_and_grads(_flex_fn([1, 2], None, segments), qkv, log_alpha, False)
    ref, ref_grads = _values_and_grads(_formula_fn([1, 2], None, segments), qkv, log_alpha, False)
    torch.testing.assert_close(out, ref.float(), atol=1e-5, rtol=1e-5)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r.float(), atol=1e-5, rtol=1e-5)


@pytest.mark.usefixtures("rows_apart")
@pytest.mark.parametrize("padded", [False, True])
def test_a_chunk_of_queries_over_a_longer_cache_equals_the_formulas_last_rows(padded):
    """Chunked prefill: the last 5 queries over all 12 keys (row 1's chunk holds a passage row
    beside its guided rows), values and gradients; a chunk always comes with its mask (math.sdpa
    refuses to guess the offset)."""
    qkv, log_alpha = _inputs()
    full_mask = _padding_mask() if padded else torch.ones(N, N, dtype=torch.bool).tril()[None, None]
    chunk_mask = full_mask[:, :, -5:]

    def chunk(q, k, v, log_alpha):
        return flex.flex_relevance_attention(
            q[:, :, -5:], k, v, chunk_mask, SCALE, [0, 3], SEGMENTS[:, -5:], SEGMENTS, log_alpha
        )

    def formula(*inputs):
        return _formula_fn([0, 3], full_mask)(*inputs)[:, :, -5:]

    out, grads = _values_and_grads(chunk, qkv, log_alpha, False)
    ref, ref_grads = _values_and_grads(formula, qkv, log_alpha, False)
    torch.testing.assert_close(out, ref.float(), atol=1e-5, rtol=1e-5)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r.float(), atol=1e-5, rtol=1e-5)


def test_rows_apart_only_where_log_alpha_trains_and_skips_flex_when_every_row_is_guided(
    monkeypatch,
):
    """Without log α's gradient (evaluation, generation) the score_mod path runs; with it, a call
    whose queries are all guided (a TAIL query) never reaches flex."""
    monkeypatch.setattr(flex, "ROWS_APART", True)
    qkv, log_alpha = _inputs()
    q, k, v = qkv

    def step(alpha):
        return flex.flex_relevance_attention(
            q[:, :, -1:], k, v, None, SCALE, [0, 2], SEGMENTS[:, -1:], SEGMENTS, alpha
        )

    def refuse(*args, **kwargs):
        raise AssertionError("flex ran")

    with monkeypatch.context() as patch:
        patch.setattr(flex, "flex_attention", refuse)
        step(log_alpha)  # log α trains: the guided row alone
    with monkeypatch.context() as patch:
        patch.setattr(flex, "guided_rows_attention", refuse)
        with torch.no_grad():
            step(log_alpha)
        step(log_alpha.detach())


# --- block mask --------------------------------------------------------------------------------


def _layout(n=300, passage=50, start=7, question=20):
    """Segments of one row: OTHER, passages of ``passage`` tokens, a question, then TAIL."""
    row = [OTHER] * n
    pos, k = start, 0
    while pos + passage <= n - question - 10:
        row[pos : pos + passage] = [k] * passage
        pos, k = pos + passage, k + 1
    row[pos : pos + question] = [QUESTION] * question
    row[pos + question :] = [TAIL] * (n - pos - question)
    return torch.tensor(row)


def _tiles(count, columns, n_columns):
    """Dense 0/1 tiles from BlockMask's (count, columns) layout."""
    keep = torch.arange(columns.shape[-1]) < count[..., None]
    dense = torch.zeros(*columns.shape[:-1], n_columns + 1, dtype=torch.int32)
    return dense.scatter_(-1, torch.where(keep, columns.long(), n_columns), 1)[..., :-1]


@pytest.mark.parametrize("spans", [False, True], ids=["mask", "padding_spans"])
@pytest.mark.parametrize("decoding", [False, True])
def test_block_mask_tiles_are_those_pytorch_builds_from_the_same_mask_mod(
    monkeypatch, decoding, spans
):
    monkeypatch.setattr(flex, "ROWS_PER_CHUNK", flex.BLOCK)  # several chunks
    segments = torch.stack([_layout(), _layout(passage=30, start=40)])
    n = segments.shape[1]
    key_padding = torch.arange(n)[None] >= torch.tensor([[0], [40]])  # row 1: 40 left pads
    mask = torch.ones(n, n, dtype=torch.bool).tril()[None, None] & key_padding[:, None, None]
    query_segments = segments[:, -1:] if decoding else segments
    mask = mask[:, :, -1:] if decoding else mask
    spans = flex.padding_spans(mask) if spans else None  # left padding read as key spans
    assert spans is None or spans.tolist() == [[0, n], [40, n]]
    ours = flex.fusion_block_mask(query_segments, segments, mask, spans)
    mask_mod = flex.fusion_mask_mod(query_segments, segments, mask, spans)
    theirs = flex_api.create_block_mask(mask_mod, 2, 1, query_segments.shape[1], n, device="cpu")
    k_tiles = -(-n // flex.BLOCK)
    for attr in ("kv", "full_kv"):
        got = _tiles(getattr(ours, f"{attr}_num_blocks"), getattr(ours, f"{attr}_indices"), k_tiles)
        want = _tiles(
            getattr(theirs, f"{attr}_num_blocks"), getattr(theirs, f"{attr}_indices"), k_tiles
        )
        assert torch.equal(got, want), attr
    if not decoding:  # the cross-passage and upper causal tiles are skipped
        assert _tiles(ours.kv_num_blocks, ours.kv_indices, k_tiles).sum() < k_tiles * k_tiles * 2


@pytest.mark.usefixtures("rows_apart")
def test_a_passage_without_a_log_alpha_slot_is_an_error():
    qkv, log_alpha = _inputs()
    with pytest.raises(ValueError, match="log α"):
        flex.flex_relevance_attention(*qkv, None, SCALE, [1], SEGMENTS, SEGMENTS, log_alpha[:, :2])


# --- dispatch ----------------------------------------------------------------------------------


@pytest.mark.usefixtures("rows_apart")
def test_the_layer_runs_flex_where_kernels_choose_fused_and_matches_the_reference(monkeypatch):
    qkv, log_alpha = _inputs()
    state = LkgState(Boundary(90, 91, 92, 93), n_layers=1)
    state.query_segments = state.key_segments = SEGMENTS
    state.log_alpha = log_alpha[:, None]
    layer = LkgLayerAttention(0, [1, 2], state, entropy=False)
    mask = _padding_mask()
    with kernels.using("fused"):
        reference = layer(*qkv, mask, SCALE)  # on the CPU: the reference path
        assert kernels.paths_run() == {"lkg": "reference"}
        monkeypatch.setattr(kernels, "choose", lambda method, device: kernels.FUSED)
        calls = record_returns(monkeypatch, flex, "flex_fused_heads")
        fused = layer(*qkv, mask, SCALE)
    assert calls, "the fused path did not run flex"
    torch.testing.assert_close(_rows(fused, True), _rows(reference, True), atol=1e-5, rtol=1e-5)


def trained(monkeypatch, path, base_tok, tok, batch, checkpointing=False):
    """A tiny LKG model, every head fused, dispatched to ``path``, after one backward of
    ``batch``: (the model, its loss, its gradients by parameter name). ``checkpointing``: with
    gradient checkpointing, non-reentrant, as finetune.py enables it."""
    monkeypatch.setattr(kernels, "choose", lambda method, device: path)
    model = attached_lkg(base_tok, tok, fusion_heads="all").train()
    if checkpointing:
        enable_activation_checkpointing(model)
    loss = model(**batch).loss
    loss.backward()
    return model, loss, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.usefixtures("rows_apart")
def test_a_model_on_the_fused_path_trains_as_on_the_reference(monkeypatch, base_tok, tok, sampler):
    """A tiny LKG model, every head fused, on a padded batch: the loss and every gradient
    (boundary embeddings and estimator through log α included) are the reference path's.
    (Decoding through flex: the kernel above, the model below.)"""
    batch = batch_of(tok, [single_doc(sampler, 0.75), multihop(sampler, 0.6)])
    _, loss, grads = trained(monkeypatch, kernels.REFERENCE, base_tok, tok, batch)
    _, fused_loss, fused_grads = trained(monkeypatch, kernels.FUSED, base_tok, tok, batch)
    torch.testing.assert_close(fused_loss, loss, atol=1e-6, rtol=1e-6)
    assert fused_grads.keys() == grads.keys() and any("estimator" in n for n in grads)
    for name, grad in grads.items():
        torch.testing.assert_close(fused_grads[name], grad, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.usefixtures("rows_apart")
def test_a_model_on_the_fused_path_generates_as_on_the_reference(
    monkeypatch, base_tok, tok, sampler
):
    """Greedy decoding of a left-padded batch, every head fused, as evaluation runs it on CUDA:
    the prefill and every one-query step over the cache go through flex, with the reference's
    tokens and step logits."""
    batch = batch_of(tok, [single_doc(sampler, 0.75), multihop(sampler, 0.6)], answers=False)
    opts = dict(max_new_tokens=3, do_sample=False, pad_token_id=tok.pad_token_id)
    opts.update(return_dict_in_generate=True, output_logits=True)
    results, queries = [], []
    real = flex.flex_fused_heads
    monkeypatch.setattr(
        flex,
        "flex_fused_heads",
        lambda q, *a, **kw: queries.append(q.shape[2]) or real(q, *a, **kw),
    )
    for path in (kernels.REFERENCE, kernels.FUSED):
        monkeypatch.setattr(kernels, "choose", lambda method, device, path=path: path)
        model = attached_lkg(base_tok, tok, fusion_heads="all").eval()
        with torch.no_grad():
            results.append(model.generate(**batch, **opts))
    (reference, fused), width = results, batch["input_ids"].shape[1]
    layers = queries.count(width)
    assert layers and queries == [width] * layers + [1] * 2 * layers
    assert torch.equal(fused.sequences, reference.sequences)
    for a, b in zip(fused.logits, reference.logits, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
