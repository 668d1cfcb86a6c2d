"""The model a job evaluates: ``evaluation.base`` picks the 4-bit base fine-tuning saw, or the
base's own weights with the LoRA merged into them (the OpAmp authors' ``merge_lora.py``)."""

import pytest
import torch

from tests.modeling.test_hub import llama3_dir  # noqa: F401  (a fixture: a local hub-style base)
from tests.modeling.test_loading import LORA, NF4, OPAMP, _train_a_little
from zoomattn.attention import kernels
from zoomattn.methods import METHODS
from zoomattn.methods.loading import build_trainable, load_for_eval
from zoomattn.modeling.hub import prepare_base
from zoomattn.modeling.loading import load_base, save_finetuned
from zoomattn.stages.common import attention_kernels, load_model, path_tags

IDS = torch.tensor([[1, 5, 2, 6, 3, 7, 4, 0]])  # within the small tokenizer's vocabulary


@pytest.fixture(scope="module")
def hub_base(llama3_dir, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("hub_base")
    prepare_base({"source": str(llama3_dir)}, out)
    return out


@pytest.fixture(scope="module")
def trained(hub_base, tmp_path_factory):
    """An OpAmp LoRA fine-tuned (a little) on the 4-bit base, saved as the finetune stage does."""
    torch.manual_seed(0)
    model = build_trainable(hub_base, "opamp", METHODS["opamp"].make_config(OPAMP), LORA, NF4)
    _train_a_little(model)
    out = tmp_path_factory.mktemp("finetuned")
    save_finetuned(model, out, "opamp", OPAMP)
    return out


def _is_4bit(model) -> bool:
    import bitsandbytes as bnb

    return any(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())


def _spec(base: str | None) -> dict:
    spec = {"quantization": NF4}
    return spec if base is None else {**spec, "evaluation_base": base}


def test_unquantized_evaluation_merges_the_lora_into_the_base_own_weights(hub_base, trained):
    from peft import PeftModel

    model, _ = load_model(_spec("unquantized"), trained, hub_base, threads=1)
    assert not _is_4bit(model) and not hasattr(model, "get_base_model")  # merged: no peft
    assert any(".zoom." in n for n, _ in model.named_parameters())  # OpAmp's adapters kept
    # the same model unmerged, on the unquantised base: merging changes nothing but rounding
    reference = PeftModel.from_pretrained(load_base(hub_base), trained)
    from zoomattn.methods.loading import _attach_saved_zoom
    from zoomattn.modeling.loading import unwrap

    _attach_saved_zoom(unwrap(reference), trained)
    with torch.no_grad():
        got, want = model(input_ids=IDS).logits, reference.eval()(input_ids=IDS).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_quantized_evaluation_is_the_4bit_base_the_lora_was_trained_on(hub_base, trained):
    quantized, _ = load_model(_spec("quantized"), trained, hub_base, threads=1)
    default, _ = load_model(_spec(None), trained, hub_base, threads=1)  # the schema's default
    unquantized, _ = load_model(_spec("unquantized"), trained, hub_base, threads=1)
    assert _is_4bit(quantized) and _is_4bit(default)
    with torch.no_grad():
        q, d = quantized(input_ids=IDS).logits, default(input_ids=IDS).logits
        u = unquantized(input_ids=IDS).logits
    torch.testing.assert_close(q, d, atol=0, rtol=0)
    assert not torch.allclose(q, u, atol=1e-4)  # 4-bit rounding shows in the logits


@pytest.mark.parametrize("base,four_bit", [("quantized", True), ("unquantized", False)])
def test_a_hub_base_itself_is_evaluated_on_the_chosen_weights(hub_base, base, four_bit):
    model, _ = load_model(_spec(base), hub_base, hub_base, threads=1)
    assert _is_4bit(model) == four_bit


def test_an_unknown_evaluation_base_is_refused_naming_the_key(hub_base):
    with pytest.raises(ValueError, match="evaluation.base: one of quantized, unquantized"):
        load_for_eval(hub_base, hub_base, NF4, base="bf16")


class _Run:
    def __init__(self):
        self.tags = {}

    def set_tags(self, tags):
        self.tags.update(tags)


def test_a_job_runs_under_its_specs_attention_kernels_and_tags_the_paths_its_attention_took(
    caplog,
):
    run = _Run()
    with caplog.at_level("INFO", logger="zoomattn"):
        with attention_kernels({"attention_kernels": "fused"}, run):
            assert kernels.setting() == "fused"
            kernels.choose("opamp", torch.device("cuda"))
            kernels.choose("rectify", torch.device("cpu"))
    assert run.tags == {"attention.path.opamp": "fused", "attention.path.rectify": "reference"}
    assert "opamp fused, rectify reference" in caplog.text
    with attention_kernels({}):  # a spec without the key: the default, what ran before forgotten
        assert kernels.setting() == "reference" and kernels.paths_run() == {}


def test_a_job_whose_attention_no_method_changes_sets_no_path_tag():
    run = _Run()
    with attention_kernels({}, run):
        pass
    assert run.tags == {}
    assert path_tags({"lkg": "fused+reference"}) == {"attention.path.lkg": "fused+reference"}
