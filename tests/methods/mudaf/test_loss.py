import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from tests.methods.mudaf.conftest import SELECTED
from tests.modeling.family_tokenizers import family_tokenizer
from zoomattn.attention.interface import capturing_qk
from zoomattn.methods.mudaf.loss import (
    anchor_ids,
    contrastive_examples,
    contrastive_loss_sum,
    head_vectors,
    info_nce,
    passage_ids,
)
from zoomattn.modeling.chat import FAMILIES


def test_info_nce_matches_a_hand_computed_case():
    """Row 0: q = (1, 0), keys (1, 0), (0, 1), (-1, 0): cosines 1, 0, -1, logits /0.5 = 2, 0, -2;
    loss = log(1 + e^-2 + e^-4) = log(1 + 0.1353352832 + 0.0183156389) = 0.1429316285.
    Row 1: q = (0, 2), keys (1, 1), (0, -3), (5, 5) invalid: cosines 1/√2, -1; logits √2, -2;
    loss = log(1 + e^(-2-√2)) = log(1 + 0.0329022721) = 0.0323725798. Mean 0.0876521041."""
    query = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    keys = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], [[1.0, 1.0], [0.0, -3.0], [5, 5]]])
    valid = torch.tensor([[True, True, True], [True, True, False]])
    assert info_nce(query, keys, valid, 0.5).item() == pytest.approx(0.0876521041, abs=1e-6)
    # the invalid key is left out whatever it holds
    keys[1, 2] = torch.tensor([0.0, 7.0])
    assert info_nce(query, keys, valid, 0.5).item() == pytest.approx(0.0876521041, abs=1e-6)


def test_info_nce_gradient_is_finite_with_zero_padding_keys():
    query = torch.randn(2, 4, requires_grad=True)
    keys = torch.randn(2, 3, 4)
    keys[1, 1:] = 0.0
    keys.requires_grad_(True)
    valid = torch.tensor([[True, True, True], [True, False, False]])
    info_nce(query, keys, valid, 0.05).backward()
    assert torch.isfinite(query.grad).all() and torch.isfinite(keys.grad).all()
    assert (keys.grad[1, 1:] == 0).all()


def test_info_nce_needs_the_positive_of_every_row():
    with pytest.raises(ValueError, match="positive"):
        info_nce(torch.ones(1, 2), torch.ones(1, 2, 2), torch.tensor([[False, True]]), 0.05)


def test_anchor_is_the_question_without_documents(tokenizer, records):
    rec = {**records[0], "placement": "reverse"}
    text = tokenizer.decode(anchor_ids(tokenizer, rec))
    assert text == f"<bos> question : {rec['question']} answer :"


def test_anchor_of_a_chat_tokenizer_is_the_user_turn_with_the_answer_cue(world, records):
    tok = family_tokenizer("llama3", world.words())
    tok.chat_template = FAMILIES["llama3"].template
    question = records[0]["question"].replace("?", " ?").split()  # the tokenizer splits "?"
    assert tok.decode(anchor_ids(tok, records[0])).split() == [
        "<|begin_of_text|>",
        *("<|start_header_id|> user <|end_header_id|> Question :".split()),
        *question,
        *("<|eot_id|> <|start_header_id|> assistant <|end_header_id|>".split()),
    ]


def test_passages_start_after_bos_when_the_tokenizer_has_one(tokenizer, world):
    ids, start = passage_ids(tokenizer, "the friend of pexo is lomi .")
    assert ids[0] == tokenizer.bos_token_id and start == 1 and len(ids) == 8
    chatml = family_tokenizer("chatml", world.words())  # no bos
    ids, start = passage_ids(chatml, "the friend")
    assert start == 0 and len(ids) == 2


def test_positive_is_golden_and_first_then_distinct_negatives(tokenizer, records):
    for negatives in (1, 3, 10):
        examples = contrastive_examples(tokenizer, records, negatives, 0, 0)
        for rec, ex in zip(records, examples, strict=True):
            by_ids = {
                tuple(passage_ids(tokenizer, d)[0]): i for i, d in enumerate(rec["documents"])
            }
            chosen = [by_ids[tuple(p)] for p in ex["passages"]]
            assert chosen[0] in rec["golden"]
            assert not set(chosen[1:]) & set(rec["golden"]) and len(set(chosen)) == len(chosen)
            n_other = len(rec["documents"]) - len(rec["golden"])
            assert len(chosen) == 1 + min(negatives, n_other)


def test_choice_of_passages_is_a_function_of_seed_and_step(tokenizer, records):
    def draw(seed, step):
        return contrastive_examples(tokenizer, records, 2, seed, step)

    assert draw(0, 5) == draw(0, 5)
    assert any(draw(0, 5) != draw(0, s) for s in range(6, 12))
    assert any(draw(0, 5) != draw(s, 5) for s in range(1, 7))


def test_records_without_golden_or_without_negatives_contribute_nothing(tokenizer, records, model):
    no_golden = {**records[0], "golden": []}
    golden_only = {**records[0], "documents": ["a b", "c d"], "golden": [0, 1]}
    assert contrastive_examples(tokenizer, [no_golden, golden_only], 10, 0, 0) == [None, None]
    loss = contrastive_loss_sum(model, [], SELECTED, 0.05, tokenizer.pad_token_id)
    assert loss.item() == 0.0
    loss.backward()  # backprops cleanly, to nothing
    assert all(p.grad is None for p in model.parameters())


def _post_rope(model, ids: list[int], layer: int):
    """Query [H, L, d] and key [KV, L, d] of one layer for one unpadded sequence, computed from
    the layer's input with its own projections and RoPE (not through the attention function)."""
    x = torch.tensor([ids])
    with torch.no_grad():
        hidden = model(input_ids=x, output_hidden_states=True).hidden_states[layer]
        attn = model.model.layers[layer].self_attn
        h = model.model.layers[layer].input_layernorm(hidden)
        d = attn.head_dim
        q = attn.q_proj(h).view(1, len(ids), -1, d).transpose(1, 2)
        k = attn.k_proj(h).view(1, len(ids), -1, d).transpose(1, 2)
        cos, sin = model.model.rotary_emb(hidden, torch.arange(len(ids))[None])
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
    return q[0], k[0]


def test_query_and_pooled_keys_are_the_heads_post_rope_projections(tokenizer, records, model):
    """Batched and padded as training runs it, against each sequence alone: the query of each
    selected head at the anchor's last token, the key of its KV head (GQA) averaged over the
    passage's tokens (not bos, not padding), heads concatenated in order."""
    examples = contrastive_examples(tokenizer, records, 3, 0, 0)
    with torch.no_grad():
        query, keys, valid = head_vectors(model, examples, SELECTED, tokenizer.pad_token_id)
    d = model.config.hidden_size // model.config.num_attention_heads
    assert query.shape == (3, 3 * d) and keys.shape == (3, 4, 3 * d)
    for i, ex in enumerate(examples):
        want_q = torch.cat([_post_rope(model, ex["anchor"], lay)[0][h, -1] for lay, h in SELECTED])
        torch.testing.assert_close(query[i], want_q, atol=1e-5, rtol=1e-5)
        assert valid[i].tolist() == [True] * len(ex["passages"]) + [False] * (
            4 - len(ex["passages"])
        )
        for p, (ids, start) in enumerate(zip(ex["passages"], ex["starts"], strict=True)):
            want_k = torch.cat(
                [_post_rope(model, ids, lay)[1][h // 2, start:].mean(0) for lay, h in SELECTED]
            )
            torch.testing.assert_close(keys[i, p], want_k, atol=1e-5, rtol=1e-5)
            # head 3 reads KV head 1, not KV head 0
            other = _post_rope(model, ids, 1)[1][0, start:].mean(0)
            assert not torch.allclose(keys[i, p, d : 2 * d], other, atol=1e-3)


def test_captured_heads_match_the_attention_function_input(tokenizer, records, model):
    ids = contrastive_examples(tokenizer, records, 3, 0, 0)[0]["anchor"]
    with capturing_qk(model) as modules, torch.no_grad():
        model(input_ids=torch.tensor([ids]))
        q, k = modules[2].captured_qk
    want_q, want_k = _post_rope(model, ids, 2)
    torch.testing.assert_close(q[0], want_q, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(k[0], want_k, atol=1e-5, rtol=1e-5)


def test_unknown_heads_are_refused(tokenizer, records, model):
    examples = contrastive_examples(tokenizer, records, 3, 0, 0)
    with pytest.raises(ValueError, match="selected: heads"):
        head_vectors(model, examples, [[0, 4]], tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="selected: layer 4"):
        head_vectors(model, examples, [[4, 0]], tokenizer.pad_token_id)
