"""The fused Triton rectified attention inside the model, as a GPU fine-tune and evaluation call it:
transformers' masks and strides, every trainable parameter's gradient, activation checkpointing
and the decoding steps, against the reference path, on the CPU through Triton's interpreter (the
kernel alone against the formula: ``test_triton_kernel.py``)."""

import torch
from transformers import AutoConfig

from tests.methods.rectify.test_model import (
    IDS,
    MASK,
    _copy_lora_into_rectified,
    _rectified,
    _trained_lora,
)
from tests.methods.rectify.test_triton_kernel import (  # noqa: F401 (fixtures)
    kv_keys_as_rows,
    padding_spans,
    switches_pairwise,
)
from tests.spies import record_returns
from tests.triton_interpreter import KEYS, SPANS, interpreter_or_skip, one_way
from zoomattn.attention import kernels
from zoomattn.attention.interface import attention_modules
from zoomattn.methods.rectify import kernel as rectify_kernel
from zoomattn.modeling.loading import enable_activation_checkpointing

interpreter_or_skip("tests/gpu/test_rectify_triton_on_cuda.py")
from zoomattn.methods.rectify import triton_kernel  # noqa: E402


@switches_pairwise("padding", ("right", "left"))  # right: training's, with the defaults
def test_a_trained_model_gives_the_reference_logits_and_gradients_through_the_fused_kernel(
    base_dir, on_cuda_under_fused, padding, monkeypatch
):
    """The kernel inside the model as a fine-tune runs it: a padded batch (right: training's
    ``pad_batch``; left: generation's prompts), the mask and the post-RoPE q, u, k, v strides as
    transformers hands them over, GQA; every trainable parameter's gradient, not only the
    attention's inputs."""
    ids, mask = IDS, MASK
    if padding == "right":  # row 1's three pads moved to its end
        ids, mask = (torch.stack([t[0], t[1].roll(-3)]) for t in (IDS, MASK))
    spans = record_returns(monkeypatch, triton_kernel, "padding_spans")

    def logits_and_grads():
        torch.manual_seed(0)
        model = _rectified(base_dir, xi=3.0)
        _copy_lora_into_rectified(_trained_lora(base_dir), model)
        for name, p in model.named_parameters():  # ΔW trains, as build_trainable sets it
            p.requires_grad_(".zoom." in name or "lora_" in name)
        logits = model(input_ids=ids, attention_mask=mask).logits
        weight = torch.randn(logits.shape, generator=torch.Generator().manual_seed(2))
        (logits * weight * mask[..., None]).sum().backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
        return logits.detach(), grads

    with kernels.using(kernels.REFERENCE):
        logits, grads = logits_and_grads()
    fused_logits, fused_grads = logits_and_grads()
    layers = AutoConfig.from_pretrained(base_dir).num_hidden_layers
    assert on_cuda_under_fused == [(IDS.shape[1], True)] * layers
    if triton_kernel.PADDING_SPANS:  # transformers' mask read as spans, once per forward
        first, end = (0, 5) if padding == "right" else (3, 8)
        assert [s.tolist() for s in spans] == [[[0, 8], [first, end]]]
    torch.testing.assert_close(fused_logits[0], logits[0], atol=1e-5, rtol=1e-5)
    real = mask[1].bool()  # left padding's rows see no key: don't-care
    torch.testing.assert_close(fused_logits[1, real], logits[1, real], atol=1e-5, rtol=1e-5)
    if padding == "right":  # the padded rows see every real key, in both paths
        torch.testing.assert_close(fused_logits[1], logits[1], atol=1e-5, rtol=1e-5)
    assert fused_grads.keys() == grads.keys() and any(".zoom.down." in n for n in grads)
    for name, grad in grads.items():
        torch.testing.assert_close(fused_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


@one_way(SPANS, True)
@one_way(KEYS, False)
def test_gradient_checkpointing_recomputes_the_fused_kernel_to_the_same_gradients(
    base_dir, on_cuda_under_fused, monkeypatch
):
    """A fine-tune with ``gradient_checkpointing`` (non-reentrant, as finetune.py enables it; the
    paper presets' setting) runs each layer's kernel again in backward: the recomputed forward,
    which reuses the forward's key spans of the mask, gives every gradient of the fine-tune
    without checkpointing, on training's right-padded batch. In fp32, so the output's rounding
    error is not kept: the bf16 case is the gpu lane's. Once, with key spans on (the cached
    path), not under every switch: each run is a model in the interpreter."""
    ids, mask = (torch.stack([t[0], t[1].roll(-3)]) for t in (IDS, MASK))
    spans = record_returns(monkeypatch, triton_kernel, "padding_spans")

    def grads(checkpointing: bool) -> dict:
        torch.manual_seed(0)
        model = _rectified(base_dir, xi=3.0).train()
        _copy_lora_into_rectified(_trained_lora(base_dir), model)
        for name, p in model.named_parameters():
            p.requires_grad_(".zoom." in name or "lora_" in name)
        if checkpointing:
            enable_activation_checkpointing(model)
        labels = ids.masked_fill(mask == 0, -100)
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        return {n: p.grad for n, p in model.named_parameters() if p.requires_grad}

    plain = grads(False)
    layers = AutoConfig.from_pretrained(base_dir).num_hidden_layers
    assert len(on_cuda_under_fused) == layers
    checkpointed = grads(True)
    assert len(on_cuda_under_fused) == 3 * layers  # forward, then again in backward
    assert len(spans) == 2  # once per forward (transformers' new mask), not in the recomputation
    assert checkpointed.keys() == plain.keys() and any(".zoom.down." in n for n in plain)
    for name, grad in plain.items():
        torch.testing.assert_close(checkpointed[name], grad, atol=1e-6, rtol=1e-5, msg=name)


@switches_pairwise("fused_decoding", (True, False))
def test_generation_prefills_a_padded_batch_through_the_fused_kernel_and_decodes_as_set(
    base_dir, monkeypatch, on_cuda_under_fused, fused_decoding
):
    """Greedy decoding as evaluation runs it on CUDA: the prefill through the kernel with the
    padding mask, each one-query step over the cache through the kernel (``FUSED_DECODING``, the
    default) or, with it off, through the block-wise path (recorded as such); the reference's
    tokens and step logits either way."""
    model = _rectified(base_dir, xi=3.0)
    _copy_lora_into_rectified(_trained_lora(base_dir), model)

    def generate():
        with torch.no_grad():
            out = model.generate(input_ids=IDS, attention_mask=MASK, max_new_tokens=2,
                                 do_sample=False, output_logits=True, return_dict_in_generate=True,
                                 pad_token_id=0)  # fmt: skip
        return out.sequences, torch.stack(out.logits)

    with kernels.using(kernels.REFERENCE):
        tokens, logits = generate()
    monkeypatch.setattr(rectify_kernel, "FUSED_DECODING", fused_decoding)
    fused_tokens, fused_logits = generate()
    layers = len(attention_modules(model))
    steps = [(1, True)] * layers if fused_decoding else []
    assert on_cuda_under_fused == [(IDS.shape[1], True)] * layers + steps
    ran = "fused" if fused_decoding else "fused+reference (decoding)"
    assert kernels.paths_run() == {"rectify": ran}
    assert torch.equal(fused_tokens, tokens)
    torch.testing.assert_close(fused_logits, logits, atol=1e-5, rtol=1e-5)
