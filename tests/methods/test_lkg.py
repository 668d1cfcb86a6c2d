import json
import random

import pytest
import torch
from safetensors.torch import load_file
from transformers import LlamaForCausalLM

from zoomattn.attention.interface import recording_last_row
from zoomattn.data.build import load_split, write_split
from zoomattn.data.tasks import multihop, single_doc, training_mix
from zoomattn.data.tokenizer import build_tokenizer
from zoomattn.methods import METHODS, cells
from zoomattn.methods.lkg.config import LkgConfig
from zoomattn.methods.lkg.model import LkgLayerAttention, attach, lkg_module
from zoomattn.methods.lkg.objective import LkgObjective, golden_top1
from zoomattn.modeling.boundary import add_boundary_tokens, has_boundary_tokens
from zoomattn.modeling.loading import (
    build_trainable,
    load_finetuned,
    load_tokenizer,
    save_finetuned,
    zoom_state,
)
from zoomattn.modeling.pretrain import llama_config
from zoomattn.stages.common import load_model
from zoomattn.training.batching import encode_example, encode_prompt, left_pad, pad_batch
from zoomattn.training.finetune import finetune

TINY = dict(hidden=32, layers=2, heads=4, kv_heads=2, intermediate=64, max_positions=512)
LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}


@pytest.fixture(scope="module")
def base_tok(world):
    return build_tokenizer(world.words())


@pytest.fixture(scope="module")
def tok(world):
    t = build_tokenizer(world.words())
    add_boundary_tokens(t)
    return t


def _base(base_tok, seed=0):
    """A random tiny Llama whose vocabulary is the base tokenizer's: the markers lie past it."""
    torch.manual_seed(seed)
    config = llama_config(len(base_tok), TINY, base_tok)
    config.initializer_range = 0.2  # far from uniform logits: greedy tokens vary
    config._attn_implementation = "zoomattn"
    return LlamaForCausalLM(config).eval()


def _cfg(tok, **values) -> LkgConfig:
    values.setdefault("middle_heads", [[0, 1], [1, 2]])
    values.setdefault("dropout", 0.0)
    return LkgConfig(boundary_ids=add_boundary_tokens(tok), **values)


def _lkg(base_tok, tok, seed=0, **values):
    model = _base(base_tok, seed)
    attach(model, _cfg(tok, **values))
    return model


def _batch(tok, records, answers=True):
    if answers:
        return pad_batch([encode_example(tok, r) for r in records], tok.pad_token_id)
    return left_pad([encode_prompt(tok, r) for r in records], tok.pad_token_id)


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
    values = METHODS["lkg"].resolve({}, LORA, middle_heads=[(1, 3)], tokenizer=fresh)
    assert values["middle_heads"] == [[1, 3]]
    assert values["boundary_ids"] == [n, n + 1, n + 2, n + 3] and has_boundary_tokens(fresh)
    again = METHODS["lkg"].resolve(values, LORA, middle_heads=[(0, 0)], tokenizer=None)
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
    model = _lkg(base_tok, tok)
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
    model = _lkg(base_tok, tok, aux_weight=0.0).train()
    out = model(**_batch(tok, [single_doc(sampler, 0.75), multihop(sampler, 0.6)]))
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
    plain = _base(base_tok)
    model = _lkg(base_tok, tok, **values)
    with torch.no_grad():
        lkg_module(model).boundary.normal_()
        batch = _batch(tok, [single_doc(sampler, 0.75), single_doc(sampler, 0.5)])
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
    batch = _batch(tok, [record])
    other = _swap_a_word(batch, tok, 0, 0)
    seg1 = [i for i, s in enumerate(_segments(tok, batch)[0]) if s == 1]
    for values, blocked in (({"fusion_heads": "all"}, True), ({"fusion": False}, False)):
        model = _lkg(base_tok, tok, **values).train()  # training: the estimator pass runs
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
    from zoomattn.attention.relevance import Boundary, segment_ids

    return segment_ids(batch["input_ids"], Boundary(*add_boundary_tokens(tok))).tolist()


@pytest.mark.parametrize("values", [{}, {"fusion_heads": "all", "entropy": False}])
def test_left_padded_batch_generates_as_each_prompt_alone(base_tok, tok, sampler, values):
    model = _lkg(base_tok, tok, **values)
    records = [single_doc(sampler, 0.5), multihop(sampler, 0.8)]
    opts = dict(max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    opts.update(return_dict_in_generate=True, output_logits=True)
    with torch.no_grad():
        batch = _batch(tok, records, answers=False)
        together = model.generate(**batch, **opts)
        width = batch["input_ids"].shape[1]
        for i, record in enumerate(records):
            alone = model.generate(**_batch(tok, [record], answers=False), **opts)
            n = alone.sequences.shape[1] - 4
            assert together.sequences[i, width:].tolist() == alone.sequences[0, n:].tolist()
            for a, b in zip(together.logits, alone.logits, strict=True):
                torch.testing.assert_close(a[i], b[0], atol=1e-4, rtol=1e-4)
    assert len(set(together.sequences[:, width:].flatten().tolist())) > 1  # not one token


def test_cached_decoding_equals_recomputing_the_whole_sequence(base_tok, tok, sampler):
    model = _lkg(base_tok, tok, fusion_heads="all")
    batch = _batch(tok, [single_doc(sampler, 0.75), single_doc(sampler, 0.0)], answers=False)
    opts = dict(max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
    opts.update(return_dict_in_generate=True, output_logits=True)
    with torch.no_grad():
        cached = model.generate(**batch, **opts)
        fresh = model.generate(**batch, **opts, use_cache=False)
    assert torch.equal(cached.sequences, fresh.sequences)
    for a, b in zip(cached.logits, fresh.logits, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_reranker_guidance_needs_no_estimator_pass(base_tok, tok, sampler):
    model = _lkg(base_tok, tok, estimator="reranker", fusion_heads="all").train()
    calls = []
    model.model.register_forward_pre_hook(lambda m, a, k: calls.append(1), with_kwargs=True)
    out = model(**_batch(tok, [single_doc(sampler, 0.75), single_doc(sampler, 0.5)]))
    out.loss.backward()
    state = lkg_module(model).state
    assert len(calls) == 1 and state.estimator_passes == 0 and state.r is None
    alpha = state.alpha
    torch.testing.assert_close(alpha[:, 0], alpha[:, 1])  # the same α at every layer
    assert alpha[:, 0].amax(-1).tolist() == [1.0, 1.0] and (alpha >= 0.01).all()
    assert (alpha < 1).any()
    assert all(p.grad is None for p in lkg_module(model).estimator.parameters())

    layerwise = _lkg(base_tok, tok).train()
    layerwise.model.register_forward_pre_hook(lambda m, a, k: calls.append(1), with_kwargs=True)
    layerwise(**_batch(tok, [single_doc(sampler, 0.75)]))
    assert len(calls) == 3 and lkg_module(layerwise).state.estimator_passes == 1


def test_gradient_checkpointing_repeats_the_forward_exactly(base_tok, tok, sampler):
    batch = _batch(tok, [single_doc(sampler, 0.75), multihop(sampler, 0.6)])
    grads = []
    for checkpointing in (False, True):
        model = _lkg(base_tok, tok, fusion_heads="all").train()
        if checkpointing:
            model.gradient_checkpointing_enable({"use_reentrant": False})
        model(**batch).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-6, rtol=1e-5)


def test_attention_probes_see_the_fused_rows(base_tok, tok, sampler):
    model = _lkg(base_tok, tok, fusion_heads="all")
    batch = _batch(tok, [single_doc(sampler, 0.75)], answers=False)
    with torch.no_grad(), recording_last_row(model) as layers:
        model(**batch)
        rows = [m.last_row for m in layers]
    alpha = lkg_module(model).state.alpha
    assert not torch.allclose(alpha, torch.ones_like(alpha))
    for row in rows:
        torch.testing.assert_close(row.sum(-1), torch.ones_like(row.sum(-1)))
    plain = _lkg(base_tok, tok, fusion=False)
    with torch.no_grad(), recording_last_row(plain) as layers:
        plain(**batch)
        assert not torch.allclose(layers[1].last_row, rows[1])


# --- saving and fine-tuning ---------------------------------------------------------------


def _resolved(base_dir, **values):
    return METHODS["lkg"].resolve(
        values, LORA, middle_heads=[[1, 0], [2, 3]], tokenizer=load_tokenizer(base_dir)
    )


def test_saved_model_reloads_to_identical_logits(base_dir, tmp_path, sampler):
    values = _resolved(base_dir)
    model = build_trainable(base_dir, "lkg", values, LORA, None).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.1)
    tok = load_tokenizer(base_dir)
    METHODS["lkg"].prepare_tokenizer(tok, values)
    batch = _batch(tok, [single_doc(sampler, 0.75), multihop(sampler, 0.5)])
    with torch.no_grad():
        want = model(**batch).logits
    save_finetuned(model, tmp_path, "lkg", values)
    reloaded = load_finetuned(tmp_path, base_dir, None)
    with torch.no_grad():
        got = reloaded(**batch).logits
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


def test_targets_label_golden_passages_and_count_agreeing_rankers(base_tok, tok):
    """The question's words occur in passage 1 only, so both rankers put it first; the golden
    passage is 0: agreement 0 (missed), 0 (false hit), 1 (rightly left out)."""
    record = {
        "id": "x",
        "documents": ["the pet of lomi is cat .", "the owner of xofi is vomi .", "vomi is ."],
        "golden": [0],
        "question": "owner xofi",
        "history": [],
        "answers": ["cat"],
    }
    cfg = _cfg(tok, fusion_heads="all")
    model = _lkg(base_tok, tok, fusion_heads="all").train()
    batch = _batch(tok, [record])
    model(**batch)
    state = lkg_module(model).state
    labels, agree, valid = LkgObjective(cfg).targets(state, batch["input_ids"], [record])
    assert labels.tolist() == [[1.0, 0.0, 0.0]]
    assert agree.tolist() == [[0.0, 0.0, 1.0]]
    assert valid.tolist() == [[True, True, True]]


def test_golden_top1_counts_rows_whose_largest_alpha_is_golden():
    alpha = torch.tensor([[0.9, 0.2, 0.5], [0.1, 0.8, 0.3], [0.5, 0.4, 0.9], [0.5, 0.4, 0.1]])
    labels = torch.tensor([[1, 0, 0], [1, 0, 0], [0, 0, 1.0], [0, 0, 0]])
    valid = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 1]]).bool()
    # row 2: the golden slot is invalid, so the row has no golden passage to find
    assert golden_top1(alpha, labels, valid) == (1, 2)


def test_micro_batches_give_the_full_batch_answer_gradient(base_tok, tok, sampler):
    records = [single_doc(sampler, 0.75), multihop(sampler, 0.6), single_doc(sampler, 0.0)]
    examples = [encode_example(tok, r) for r in records]
    cfg = _cfg(tok, fusion_heads="all", aux_weight=0.0)
    runs = []
    for micro in (3, 1):
        model = _lkg(base_tok, tok, fusion_heads="all", aux_weight=0.0).train()
        qa, metrics = LkgObjective(cfg).backward_batch(
            model, tok, records, examples, tok.pad_token_id, micro
        )
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        runs.append((qa, metrics, grads))
    (qa_a, m_a, g_a), (qa_b, m_b, g_b) = runs
    assert qa_a == pytest.approx(qa_b, rel=1e-5) and m_a.keys() == m_b.keys()
    assert set(m_a) == {
        "qa_loss", "golden_top1", "relevance_loss", "confidence_loss", "diversity", "train_loss"
    }  # fmt: skip
    assert m_a["train_loss"] == m_a["qa_loss"]  # aux_weight 0: reported, not trained
    for name in g_a:
        torch.testing.assert_close(g_b[name], g_a[name], atol=1e-6, rtol=1e-4)


def _cell(base_dir, steps=6, **values):
    return {
        "run": "lkg",
        "seed": 0,
        "method": "lkg",
        "preset": "test",
        "method_config": _resolved(base_dir, **values),
        "finetune": {
            "steps": steps,
            "batch_size": 4,
            "micro_batch_size": 3,
            "lr": 1e-3,
            "warmup_ratio": 0.2,
            "optimizer": "adamw",
            "log_every": 1,
            "checkpoint_every": 2,
            "lora": {**LORA, "dropout": 0.1},
            "quantization": {
                "load_in_4bit": True,
                "quant_type": "nf4",
                "double_quant": True,
                "compute_dtype": "float32",
            },
        },
    }


@pytest.fixture(scope="module")
def train_dir(tmp_path_factory, world):
    records = training_mix(world, {"single": 1.0, "multihop": 0.5}, 32, 0.9, 4, seed=3)
    out = tmp_path_factory.mktemp("train") / "train"
    write_split(records, out, {})
    return out


class Killed(Exception):
    pass


def test_lkg_finetune_saves_its_tokenizer_and_resumes_to_the_same_weights(
    tmp_path, train_dir, base_dir
):
    random.seed(0)
    logged = []
    cell = _cell(base_dir)
    exported = {**cell, "finetune": {**cell["finetune"], "export_merged": True}}
    finetune(exported, train_dir, base_dir, tmp_path / "a", tmp_path / "ckpt_a", 1,
             lambda m, s: logged.append(m))  # fmt: skip
    assert len(logged) == 6
    assert all(m["train_loss"] > 0 and 0 <= m["golden_top1"] <= 1 for m in logged)
    saved = load_tokenizer(tmp_path / "a")
    assert add_boundary_tokens(saved) == cell["method_config"]["boundary_ids"]
    assert not has_boundary_tokens(load_tokenizer(base_dir))

    def die_at_step_5(metrics, step):
        if step == 5:
            raise Killed

    with pytest.raises(Killed):
        finetune(cell, train_dir, base_dir, tmp_path / "b", tmp_path / "ckpt_b", 1, die_at_step_5)
    finetune(cell, train_dir, base_dir, tmp_path / "b", tmp_path / "ckpt_b", threads=1)
    for name in ("adapter_model.safetensors", "zoom_modules.safetensors"):
        a, b = load_file(tmp_path / "a" / name), load_file(tmp_path / "b" / name)
        assert a.keys() == b.keys()
        for k in a:
            assert (a[k] == b[k]).all(), k
    assert "model.zoom.boundary" in load_file(tmp_path / "a" / "zoom_modules.safetensors")

    assert has_boundary_tokens(load_tokenizer(tmp_path / "a" / "merged"))
    spec = {"quantization": cell["finetune"]["quantization"]}
    merged, tok = load_model(spec, tmp_path / "a", base_dir, 1)  # the merged copy
    assert has_boundary_tokens(tok) and not hasattr(merged, "get_base_model")
    trained = load_finetuned(tmp_path / "a", base_dir, spec["quantization"])
    batch = _batch(tok, load_split(train_dir)[:2], answers=False)
    with torch.no_grad():
        torch.testing.assert_close(
            merged(**batch).logits, trained(**batch).logits, atol=1e-4, rtol=1e-4
        )
    base, plain_tok = load_model(spec, base_dir, base_dir, 1)
    assert not has_boundary_tokens(plain_tok) and not hasattr(base.model, "zoom")
