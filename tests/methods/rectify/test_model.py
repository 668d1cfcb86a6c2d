import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from zoomattn.attention.interface import attention_modules
from zoomattn.methods import METHODS, ResolveContext, cells
from zoomattn.methods.loading import build_trainable
from zoomattn.methods.rectify.config import RectifyConfig
from zoomattn.methods.rectify.model import attach

LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
IDS = torch.tensor([[1, 5, 9, 12, 7, 30, 4, 8], [0, 0, 0, 3, 14, 15, 9, 2]])
MASK = torch.tensor([[1] * 8, [0, 0, 0, 1, 1, 1, 1, 1]])


def _model(base_dir):
    return AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="zoomattn").eval()


def _logits(model):
    with torch.no_grad():
        return model(input_ids=IDS, attention_mask=MASK).logits


def _assert_same(got, want):
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1, 3:], want[1, 3:], atol=1e-5, rtol=1e-5)


def _rectified(base_dir, xi: float, g: str = "max"):
    """Base + rectification + the shared LoRA on the modules it does not replace."""
    cfg = RectifyConfig(**RectifyConfig(xi=xi, g=g).resolved(LORA))
    model = _model(base_dir)
    attach(model, cfg)
    targets = METHODS["rectify"].lora_targets(LORA["target_modules"])
    return get_peft_model(model, _lora_config(targets)).eval()


def _lora_config(targets):
    return LoraConfig(r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=0.0,
                      target_modules=targets)  # fmt: skip


def _trained_lora(base_dir):
    """Plain LoRA on q_proj and v_proj with random (as if trained) weights."""
    model = get_peft_model(_model(base_dir), _lora_config(LORA["target_modules"])).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model


def _copy_lora_into_rectified(lora_model, rect_model):
    """Map LoRA's q_proj (A, B) onto ΔW's (down, up) and copy the other LoRA layers."""
    lora = dict(lora_model.named_parameters())
    with torch.no_grad():
        for name, p in rect_model.named_parameters():
            if ".zoom.down." in name or ".zoom.up." in name:
                layer = name.split(".self_attn.")[0]
                part = "lora_A" if ".down." in name else "lora_B"
                p.copy_(lora[f"{layer}.self_attn.q_proj.{part}.default.weight"])
            elif "lora_" in name:
                p.copy_(lora[name])


def test_xi_zero_rectification_is_lora_on_q_proj_with_the_same_weights(base_dir):
    """Same function class: every LoRA(q_proj) checkpoint maps onto a ξ = 0 rectification with
    identical outputs (RoPE, GQA and padding included), and the parameter counts agree."""
    lora = _trained_lora(base_dir)
    rect = _rectified(base_dir, xi=0.0)
    _copy_lora_into_rectified(lora, rect)
    _assert_same(_logits(rect), _logits(lora))
    n_lora = sum(p.numel() for n, p in lora.named_parameters() if "lora_" in n)
    n_rect = sum(p.numel() for n, p in rect.named_parameters() if "lora_" in n or ".zoom." in n)
    assert n_rect == n_lora


def test_rectification_with_xi_above_zero_differs_from_lora_once_trained(base_dir):
    lora = _trained_lora(base_dir)
    rect = _rectified(base_dir, xi=3.0)
    _copy_lora_into_rectified(lora, rect)
    assert (_logits(rect) - _logits(lora)).abs().max() > 1e-3


@pytest.mark.parametrize(("xi", "g"), [(0.0, "max"), (3.0, "max"), (3.0, "tanh"), (1.0, "sigmoid")])
def test_rectification_at_initialisation_scores_like_the_base_model(base_dir, xi, g):
    """B = 0 at init, so u = 0 and g(0) = 0: the base model's scores, for every g and ξ."""
    _assert_same(_logits(_rectified(base_dir, xi, g)), _logits(_model(base_dir)))


def test_incremental_decoding_matches_the_full_forward_pass(base_dir):
    """The pre-hook hands each decoding step its own layer input; keys come from the cache."""
    lora = _trained_lora(base_dir)
    rect = _rectified(base_dir, xi=3.0)
    _copy_lora_into_rectified(lora, rect)
    ids = IDS[:1]
    with torch.no_grad():
        full = rect(input_ids=ids).logits[0, -1]
        cache = rect(input_ids=ids[:, :-1], use_cache=True).past_key_values
        step = rect(input_ids=ids[:, -1:], past_key_values=cache, use_cache=True).logits[0, -1]
    torch.testing.assert_close(step, full, atol=1e-5, rtol=1e-5)


def test_build_trainable_leaves_q_proj_to_the_rectification(base_dir):
    rectify = METHODS["rectify"]
    values = rectify.resolve({"xi": 3, "g": "max"}, LORA, ResolveContext())
    model = build_trainable(base_dir, "rectify", rectify.make_config(values), LORA, None)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any(".q_proj." in n for n in names) is False
    assert any(".v_proj.lora_A" in n for n in names)
    assert sum(".zoom.down." in n for n in names) == len(attention_modules(model))


def test_config_takes_rank_alpha_dropout_from_the_shared_lora_and_resolves_auto_xi():
    values = RectifyConfig(xi="auto", g="sigmoid").resolved(LORA, xi_auto=2.5)
    assert values == {"xi": 2.5, "g": "sigmoid", "rank": 4, "alpha": 8, "dropout": 0.0,
                      "block": 128}  # fmt: skip
    with pytest.raises(ValueError, match="xi: 'auto' needs"):
        RectifyConfig(xi="auto").resolved(LORA)


@pytest.mark.parametrize(
    ("values", "message"),
    [({"g": "relu"}, "g: unknown variant 'relu'"), ({"xi": -1}, "xi: a number ≥ 0 or 'auto'")],
)
def test_bad_config_values_name_the_key(values, message):
    with pytest.raises(ValueError, match=message):
        RectifyConfig(**values)


def test_cells_sweep_xi_and_g_under_an_entry_named_for_the_method_or_not():
    grid = cells(
        {
            "rectify": {"xi": [0, 3, "auto"], "g": "max"},
            "rectify_g": {"method": "rectify", "xi": 3, "g": ["tanh", "sigmoid"]},
        }
    )
    assert list(grid) == [
        "rectify-xi0", "rectify-xi3", "rectify-xiauto", "rectify_g-gtanh", "rectify_g-gsigmoid"
    ]  # fmt: skip
    assert grid["rectify_g-gtanh"] == ("rectify", {"xi": 3, "g": "tanh"})
