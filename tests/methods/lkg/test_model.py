import functools
import json

import pytest
import torch

from tests.methods.lkg.helpers import (
    LORA,
    attached_lkg,
    batch_of,
    tiny_base,
)
from zoomattn.attention.interface import recording_last_row
from zoomattn.data.tasks import multihop, single_doc
from zoomattn.data.tokenizer import build_tokenizer
from zoomattn.methods import METHODS, ResolveContext, cells
from zoomattn.methods.lkg.config import LkgConfig
from zoomattn.methods.lkg.model import LkgLayerAttention, lkg_module
from zoomattn.modeling.boundary import add_boundary_tokens, has_boundary_tokens
from zoomattn.modeling.loading import enable_activation_checkpointing, zoom_state

# --- config -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key,bad",
    [
        ("estimator", "bert"),
        ("reranker", "qlm"),
        ("entropy", 1),
        ("fusion", "yes"),
        ("aux_weight", -1.0),
        ("beta", 0.0),
        ("alpha_init", 0),
        ("adapter_dim", 0),
        ("score_dim", 2.5),
        ("dropout", 1.0),
        ("rankers", ["bm25", "bm25"]),
        ("fusion_heads", "edge"),
        ("middle_heads", [[0, 1], [0, 1]]),
        ("boundary_ids", [1, 2, 3]),
    ],
)
def test_config_rejects_a_bad_value_naming_its_key(key, bad):
    with pytest.raises(ValueError, match=f"^{key}:"):
        LkgConfig(**{key: bad})


def test_resolved_fills_heads_and_marker_ids_and_keeps_a_saved_models_values(base_tok):
    fresh = build_tokenizer(base_tok.get_vocab().keys())
    n = len(fresh)
    values = METHODS["lkg"].resolve(
        {}, LORA, ResolveContext(middle_heads=[(1, 3)], tokenizer=fresh)
    )
    assert values["middle_heads"] == [[1, 3]]
    assert values["boundary_ids"] == [n, n + 1, n + 2, n + 3] and has_boundary_tokens(fresh)
    again = METHODS["lkg"].resolve(values, LORA, ResolveContext(middle_heads=[(0, 0)]))
    assert again == values  # a saved model keeps its heads and ids
    json.dumps(values)  # stored in method.json


def test_fusion_on_middle_heads_needs_them_and_other_settings_do_not():
    with pytest.raises(ValueError, match="^middle_heads:"):
        LkgConfig(boundary_ids=[5, 6, 7, 8]).resolved(LORA)
    for values in ({"fusion_heads": "all"}, {"fusion": False}):
        assert LkgConfig(boundary_ids=[5, 6, 7, 8], **values).resolved(LORA)["middle_heads"] is None
    with pytest.raises(ValueError, match="^boundary_ids:"):
        LkgConfig(fusion_heads="all").resolved(LORA)


def test_beta_is_a_grid_axis():
    assert sorted(cells({"lkg": {"beta": [0.2, 0.5]}})) == ["lkg-beta0.2", "lkg-beta0.5"]


# --- model --------------------------------------------------------------------------------


def test_zoom_parameters_are_the_boundary_and_estimator_once(base_tok, tok):
    model = attached_lkg(base_tok, tok)
    names = list(zoom_state(model))
    assert "model.zoom.boundary" in names
    assert all(n.startswith("model.zoom.") for n in names)
    assert [k for k in model.state_dict() if ".zoom." in k] == names  # each saved once
    layers = [m for m in model.modules() if isinstance(m, LkgLayerAttention)]
    assert [layer.heads for layer in layers] == [(1,), (2,)]
    assert all(layer.state is lkg_module(model).state for layer in layers)
    rows = model.model.embed_tokens.weight.detach()
    torch.testing.assert_close(lkg_module(model).boundary[2], rows.mean(0))


def test_lm_loss_alone_trains_boundary_and_estimator_through_alpha(base_tok, tok, sampler):
    model = attached_lkg(base_tok, tok, aux_weight=0.0).train()
    out = model(**batch_of(tok, [single_doc(sampler, 0.75), multihop(sampler, 0.6)]))
    assert torch.isfinite(out.loss)
    out.loss.backward()
    module = lkg_module(model)
    assert module.boundary.grad.abs().sum() > 0
    for name, p in module.estimator.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def _plain_logits(model, lkg_model, tok, batch):
    """The base with the boundary rows appended to its embedding table: no fusion at all."""
    ids = add_boundary_tokens(tok)
    n = model.model.embed_tokens.weight.shape[0]
    assert ids == [n, n + 1, n + 2, n + 3]
    table = torch.cat([model.model.embed_tokens.weight, lkg_module(lkg_model).boundary])
    embeds = table[batch["input_ids"]]
    return model(inputs_embeds=embeds, attention_mask=batch["attention_mask"]).logits


@pytest.mark.parametrize(
    "values,same",
    [
        ({"fusion": False}, True),
        ({"middle_heads": []}, True),  # fusion on, but no fused head
        ({"fusion_heads": "all"}, False),
    ],
)
def test_without_fused_heads_the_model_is_the_base_with_boundary_embeddings(
    base_tok, tok, sampler, values, same
):
    plain = tiny_base(base_tok)
    model = attached_lkg(base_tok, tok, **values)
    with torch.no_grad():
        lkg_module(model).boundary.normal_()
        batch = batch_of(tok, [single_doc(sampler, 0.75), single_doc(sampler, 0.5)])
        want = _plain_logits(plain, model, tok, batch)
        got = model(**batch).logits
    real = batch["attention_mask"].bool()
    assert torch.allclose(got[real], want[real], atol=1e-5) == same


def _swap_a_word(batch, tok, row: int, passage: int):
    """A copy of the batch with one word of a passage replaced by another word."""
    d = tok.convert_tokens_to_ids("[d]")
    ids = batch["input_ids"].clone()
    start = (ids[row] == d).nonzero()[passage].item()
    ids[row, start + 2] = tok.convert_tokens_to_ids("pet")
    assert not torch.equal(ids, batch["input_ids"])
    return {**batch, "input_ids": ids}


def test_passages_are_blocked_from_each_other_in_the_estimator_and_the_fused_heads(
    base_tok, tok, sampler
):
    """Changing a word of passage 0 leaves passage 1's estimator scores unchanged (blocked
    bidirectional mask), and passage 1's layer-0 output when every head is fused (M = 0 across
    passages); with plain causal attention the same change reaches passage 1."""
    record = single_doc(sampler, 0.75)
    batch = batch_of(tok, [record])
    other = _swap_a_word(batch, tok, 0, 0)
    seg1 = [i for i, s in enumerate(_segments(tok, batch)[0]) if s == 1]
    for values, blocked in (({"fusion_heads": "all"}, True), ({"fusion": False}, False)):
        model = attached_lkg(base_tok, tok, **values).train()  # training: the estimator pass runs
        outs = []
        hook = model.model.layers[0].register_forward_hook(
            lambda m, a, o, outs=outs: outs.append(o)
        )
        scores = []
        with torch.no_grad():
            for b in (batch, other):
                model(**b)
                scores.append(lkg_module(model).state.r.clone())
        hook.remove()
        main = [outs[1], outs[3]]  # each call: estimator pass first, then the model's own
        torch.testing.assert_close(scores[0][..., 1:], scores[1][..., 1:])
        assert not torch.allclose(scores[0][..., 0], scores[1][..., 0])
        same = torch.allclose(main[0][0, seg1], main[1][0, seg1], atol=1e-6)
        assert same == blocked


def _segments(tok, batch):
    from zoomattn.methods.lkg.kernel import Boundary, segment_ids

    return segment_ids(batch["input_ids"], Boundary(*add_boundary_tokens(tok))).tolist()


@pytest.mark.parametrize("values", [{}, {"fusion_heads": "all", "entropy": False}])
def test_left_padded_batch_generates_as_each_prompt_alone(base_tok, tok, sampler, values):
    model = attached_lkg(base_tok, tok, **values)
    records = [single_doc(sampler, 0.5), multihop(sampler, 0.8)]
    opts = dict(max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    opts.update(return_dict_in_generate=True, output_logits=True)
    with torch.no_grad():
        batch = batch_of(tok, records, answers=False)
        together = model.generate(**batch, **opts)
        width = batch["input_ids"].shape[1]
        for i, record in enumerate(records):
            alone = model.generate(**batch_of(tok, [record], answers=False), **opts)
            n = alone.sequences.shape[1] - 4
            assert together.sequences[i, width:].tolist() == alone.sequences[0, n:].tolist()
            for a, b in zip(together.logits, alone.logits, strict=True):
                torch.testing.assert_close(a[i], b[0], atol=1e-4, rtol=1e-4)
    assert len(set(together.sequences[:, width:].flatten().tolist())) > 1  # not one token


def test_cached_decoding_equals_recomputing_the_whole_sequence(base_tok, tok, sampler):
    model = attached_lkg(base_tok, tok, fusion_heads="all")
    batch = batch_of(tok, [single_doc(sampler, 0.75), single_doc(sampler, 0.0)], answers=False)
    opts = dict(max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
    opts.update(return_dict_in_generate=True, output_logits=True)
    with torch.no_grad():
        cached = model.generate(**batch, **opts)
        fresh = model.generate(**batch, **opts, use_cache=False)
    assert torch.equal(cached.sequences, fresh.sequences)
    for a, b in zip(cached.logits, fresh.logits, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_reranker_guidance_needs_no_estimator_pass(base_tok, tok, sampler):
    model = attached_lkg(base_tok, tok, estimator="reranker", fusion_heads="all").train()
    calls = []
    model.model.register_forward_pre_hook(lambda m, a, k: calls.append(1), with_kwargs=True)
    out = model(**batch_of(tok, [single_doc(sampler, 0.75), single_doc(sampler, 0.5)]))
    out.loss.backward()
    state = lkg_module(model).state
    assert len(calls) == 1 and state.estimator_passes == 0 and state.r is None
    alpha = state.alpha
    torch.testing.assert_close(alpha[:, 0], alpha[:, 1])  # the same α at every layer
    assert alpha[:, 0].amax(-1).tolist() == [1.0, 1.0] and (alpha >= 0.01).all()
    assert (alpha < 1).any()
    assert all(p.grad is None for p in lkg_module(model).estimator.parameters())

    layerwise = attached_lkg(base_tok, tok).train()
    layerwise.model.register_forward_pre_hook(lambda m, a, k: calls.append(1), with_kwargs=True)
    layerwise(**batch_of(tok, [single_doc(sampler, 0.75)]))
    assert len(calls) == 3 and lkg_module(layerwise).state.estimator_passes == 1


def _checkpointing_the_layers_calls(monkeypatch, model):
    """Each decoder layer checkpointed around ``__call__``, its forward hooks inside the
    checkpoint, as transformers 5.17 checkpoints (5.23 checkpoints ``forward``)."""
    layer_type = type(model.model.layers[0])

    def checkpointed_call(self, *args, **kwargs):
        kwargs = {**kwargs, "use_cache": False, "past_key_values": None}  # as transformers does
        call = functools.partial(torch.nn.Module.__call__, self, **kwargs)
        return torch.utils.checkpoint.checkpoint(call, *args, use_reentrant=False)

    monkeypatch.setattr(layer_type, "__call__", checkpointed_call)


@pytest.mark.parametrize("hooks", ["where_transformers_puts_them", "inside_the_checkpoint"])
def test_gradient_checkpointing_repeats_the_forward_exactly(
    monkeypatch, base_tok, tok, sampler, hooks
):
    """The estimator pass's hooks on the layers (their outputs at [e_i] and [e_q]) are gone when
    backward recomputes a layer, so what they save must not be the checkpoint's."""
    batch = batch_of(tok, [single_doc(sampler, 0.75), multihop(sampler, 0.6)])
    grads = []
    for checkpointing in (False, True):
        model = attached_lkg(base_tok, tok, fusion_heads="all").train()
        if checkpointing and hooks == "inside_the_checkpoint":
            _checkpointing_the_layers_calls(monkeypatch, model)
        elif checkpointing:
            enable_activation_checkpointing(model)
        model(**batch).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5)


def test_padding_as_other_leaves_every_real_token_and_gradient_as_segments_from_ids_alone(
    monkeypatch, base_tok, tok, sampler
):
    """The prefill's segments make the attention mask's padding OTHER; from the ids alone,
    training's right padding after the answer would be TAIL, a row guided by log α. No real
    token reads a padded row, so the loss, the real tokens' logits, α and every gradient are
    the same bit for bit; only the padded rows' own logits differ."""
    from zoomattn.methods.lkg import model as lkg_model

    batch = batch_of(tok, [single_doc(sampler, 0.75), multihop(sampler, 0.6)])
    real = batch["attention_mask"].bool()
    assert not real.all()
    runs, segment_ids = [], lkg_model.segment_ids
    for from_ids_alone in (False, True):
        if from_ids_alone:
            monkeypatch.setattr(lkg_model, "segment_ids", lambda ids, b, mask: segment_ids(ids, b))
        model = attached_lkg(base_tok, tok, fusion_heads="all").train()
        out = model(**batch)
        out.loss.backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        runs.append((out.loss, out.logits.detach(), lkg_module(model).state.alpha, grads))
    (loss, logits, alpha, grads), (loss_ids, logits_ids, alpha_ids, grads_ids) = runs
    assert torch.equal(loss, loss_ids) and torch.equal(alpha, alpha_ids)
    assert torch.equal(logits[real], logits_ids[real])
    assert not torch.equal(logits[~real], logits_ids[~real])  # the padded rows were guided
    assert grads.keys() == grads_ids.keys() and any("estimator" in n for n in grads)
    for name, grad in grads.items():
        assert torch.equal(grad, grads_ids[name]), name


def test_attention_probes_see_the_fused_rows(base_tok, tok, sampler):
    model = attached_lkg(base_tok, tok, fusion_heads="all")
    batch = batch_of(tok, [single_doc(sampler, 0.75)], answers=False)
    with torch.no_grad(), recording_last_row(model) as layers:
        model(**batch)
        rows = [m.last_row for m in layers]
    alpha = lkg_module(model).state.alpha
    assert not torch.allclose(alpha, torch.ones_like(alpha))
    for row in rows:
        torch.testing.assert_close(row.sum(-1), torch.ones_like(row.sum(-1)))
    plain = attached_lkg(base_tok, tok, fusion=False)
    with torch.no_grad(), recording_last_row(plain) as layers:
        plain(**batch)
        assert not torch.allclose(layers[1].last_row, rows[1])
