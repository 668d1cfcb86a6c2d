import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from zoomattn.attention import kernels
from zoomattn.attention.interface import attention_modules, capturing_qk, masking_heads

IDS = torch.tensor([[1, 5, 9, 12, 7, 30, 4, 8, 21, 3]])


def _model(base_dir):
    return AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="zoomattn").eval()


def _logits(model):
    with torch.no_grad():
        return model(input_ids=IDS).logits


def test_masking_a_head_equals_zeroing_its_o_proj_input_columns(base_dir):
    layer, head = 1, 2
    model, zeroed = _model(base_dir), _model(base_dir)
    o_proj = attention_modules(zeroed)[layer].o_proj
    d = o_proj.in_features // model.config.num_attention_heads
    with torch.no_grad():
        o_proj.weight[:, head * d : (head + 1) * d] = 0
    with masking_heads(model, [(layer, head)]):
        masked = _logits(model)
    torch.testing.assert_close(masked, _logits(zeroed), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(masked, _logits(model), atol=1e-4)  # the head mattered


def test_masking_several_heads_across_layers_equals_zeroing_each(base_dir):
    heads = [(0, 0), (0, 3), (3, 1)]
    model, zeroed = _model(base_dir), _model(base_dir)
    d = model.config.hidden_size // model.config.num_attention_heads
    with torch.no_grad():
        for layer, head in heads:
            attention_modules(zeroed)[layer].o_proj.weight[:, head * d : (head + 1) * d] = 0
    with masking_heads(model, heads):
        torch.testing.assert_close(_logits(model), _logits(zeroed), atol=1e-5, rtol=1e-5)


def test_masking_nothing_leaves_logits_unchanged(base_dir):
    model = _model(base_dir)
    plain = _logits(model)
    with masking_heads(model, []):
        torch.testing.assert_close(_logits(model), plain, atol=0, rtol=0)


def test_mask_is_removed_when_the_context_exits(base_dir):
    model = _model(base_dir)
    plain = _logits(model)
    with masking_heads(model, [(2, 1), (0, 0)]):
        assert not torch.allclose(_logits(model), plain, atol=1e-4)
    assert all(not hasattr(m, "masked_heads") for m in attention_modules(model))
    torch.testing.assert_close(_logits(model), plain, atol=0, rtol=0)


@pytest.mark.parametrize("head", [(4, 0), (-1, 0), (0, 4), (0, -1)])
def test_masking_a_head_the_model_lacks_is_an_error_naming_it(base_dir, head):
    model = _model(base_dir)  # 4 layers x 4 heads
    with pytest.raises(ValueError, match=rf"no head \({head[0]}, {head[1]}\): 4 layers × 4 heads"):
        with masking_heads(model, [head]):
            pass


def _attention_inputs(model):
    """Each layer's (hidden_states, position_embeddings) as the attention module receives them."""
    seen, hooks = {}, []
    for i, m in enumerate(attention_modules(model)):

        def hook(module, args, kwargs, i=i):
            seen[i] = (
                kwargs.get("hidden_states", args[0] if args else None),
                kwargs["position_embeddings"],
            )

        hooks.append(m.register_forward_pre_hook(hook, with_kwargs=True))
    return seen, hooks


def test_captured_query_and_key_are_the_projections_with_rope_applied(base_dir):
    model = _model(base_dir)
    seen, hooks = _attention_inputs(model)
    with torch.no_grad(), capturing_qk(model) as layers:
        model(input_ids=IDS)
        captured = [m.captured_qk for m in layers]
    for h in hooks:
        h.remove()
    cfg = model.config
    d = cfg.hidden_size // cfg.num_attention_heads
    for i, m in enumerate(attention_modules(model)):
        hidden, (cos, sin) = seen[i]
        q = m.q_proj(hidden).view(1, IDS.shape[1], -1, d).transpose(1, 2)
        k = m.k_proj(hidden).view(1, IDS.shape[1], -1, d).transpose(1, 2)
        assert not torch.allclose(captured[i][0], q)  # the rotation is not the identity
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        assert captured[i][0].shape == (1, cfg.num_attention_heads, IDS.shape[1], d)
        assert captured[i][1].shape == (1, cfg.num_key_value_heads, IDS.shape[1], d)
        torch.testing.assert_close(captured[i][0], q, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(captured[i][1], k, atol=1e-6, rtol=1e-6)


def test_a_loss_on_captured_queries_and_keys_reaches_q_and_k_proj(base_dir):
    model = _model(base_dir)
    with capturing_qk(model) as layers:
        model(input_ids=IDS)
        q, k = layers[2].captured_qk
        (q.square().sum() + k.sum()).backward()
    attn = attention_modules(model)[2]
    assert attn.q_proj.weight.grad is not None and attn.q_proj.weight.grad.abs().sum() > 0
    assert attn.k_proj.weight.grad is not None and attn.k_proj.weight.grad.abs().sum() > 0


def test_captured_qk_are_released_after_exit(base_dir):
    model = _model(base_dir)
    with torch.no_grad(), capturing_qk(model) as layers:
        model(input_ids=IDS)
        assert all(hasattr(m, "captured_qk") for m in layers)
    assert all(not hasattr(m, "captured_qk") for m in attention_modules(model))
    with torch.no_grad():
        model(input_ids=IDS)  # capturing is off: nothing is stored again
    assert all(not hasattr(m, "captured_qk") for m in attention_modules(model))


@pytest.mark.usefixtures("plain_fused_as_on_cuda")
@pytest.mark.parametrize("method", ["qlora", "opamp"])
def test_a_right_padded_fine_tune_step_with_plain_sdpa_run_causal_has_the_same_loss_and_gradients(
    base_dir, world, method
):
    """Every plain layer's SDPA, and OpAmp's stacked path (one SDPA call over both branches), on a
    right-padded training batch under ``plain: fused`` as on CUDA: the mask transformers builds
    reads as right padding, and neither the loss nor any gradient changes (fp32, CPU kernels)."""
    from tests.training.test_finetune import _cell
    from zoomattn.data.tasks import training_mix
    from zoomattn.methods import METHODS
    from zoomattn.methods.loading import build_trainable
    from zoomattn.modeling.loading import load_tokenizer
    from zoomattn.training.answer_loss import backward_batch
    from zoomattn.training.batching import encode_example

    tok = load_tokenizer(base_dir)
    records = training_mix(world, {"single": 1.0, "multihop": 0.5}, 4, 0.9, 4, seed=3)
    examples = [encode_example(tok, r) for r in records]
    assert len({len(e["input_ids"]) for e in examples}) > 1  # the batch is padded
    values = {**_cell()["method_config"], "dropout": 0.0} if method == "opamp" else {}
    lora = {**_cell()["finetune"]["lora"], "dropout": 0.0}
    method_path = {"opamp": "fused"} if method == "opamp" else {}

    def loss_and_grads(setting):
        torch.manual_seed(0)
        model = build_trainable(base_dir, method, METHODS[method].make_config(values), lora, None)
        with kernels.using(setting):
            loss = backward_batch(model, examples, tok.pad_token_id, len(examples))
            ran = kernels.paths_run()
        return ran, loss, {n: p.grad for n, p in model.named_parameters() if p.requires_grad}

    ran, loss, grads = loss_and_grads({**method_path, "plain": "fused"})
    masked_ran, want, want_grads = loss_and_grads(method_path or "reference")
    assert ran == {**method_path, "plain": "fused"} and masked_ran == method_path
    assert loss == pytest.approx(want, rel=1e-6)
    assert grads.keys() == want_grads.keys() and grads
    for name, grad in grads.items():
        torch.testing.assert_close(grad, want_grads[name], atol=1e-6, rtol=1e-4, msg=name)
