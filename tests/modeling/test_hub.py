"""The hub/local base model path, run offline on a small model saved in the real formats."""

import json
import shutil

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tests.modeling.family_tokenizers import family_tokenizer
from zoomattn.methods.loading import load_for_eval
from zoomattn.modeling.chat import family_of, stop_ids
from zoomattn.modeling.hub import BASE_FILE, BaseModelError, prepare_base, weights_path
from zoomattn.modeling.loading import load_base, load_tokenizer

ARCH = {"hidden": 32, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate": 64}
WORDS = ["paris", "france", "capital", "what", "is", "the", "of"]


@pytest.fixture(scope="module")
def llama3_dir(tmp_path_factory):
    """A small Llama-3-style checkpoint: save_pretrained weights, a tokenizer with Llama-3's
    special tokens and no chat template (as the base model ships)."""
    out = tmp_path_factory.mktemp("llama3")
    tok = family_tokenizer("llama3", WORDS)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=ARCH["hidden"],
        num_hidden_layers=ARCH["layers"],
        num_attention_heads=ARCH["heads"],
        num_key_value_heads=ARCH["kv_heads"],
        intermediate_size=ARCH["intermediate"],
        bos_token_id=tok.bos_token_id,
        eos_token_id=[tok.convert_tokens_to_ids(t) for t in ("<|end_of_text|>", "<|eot_id|>")],
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _hub_cache(tmp_path, model_dir, repo="meta-llama/Tiny-3", commit="a" * 40):
    """The huggingface_hub cache layout: models--org--name/{refs/main, snapshots/<commit>/}."""
    root = tmp_path / "hub" / f"models--{repo.replace('/', '--')}"
    shutil.copytree(model_dir, root / "snapshots" / commit)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    return tmp_path / "hub"


def test_local_base_is_recorded_with_the_llama3_template_pad_and_both_stop_ids(
    llama3_dir, tmp_path
):
    out = tmp_path / "base"
    out.mkdir()
    record = prepare_base({"source": str(llama3_dir), **ARCH}, out)
    assert record["chat_family"] == "llama3" and record["path"] == str(llama3_dir.resolve())
    assert json.loads((out / BASE_FILE).read_text()) == record
    tok = load_tokenizer(out)
    assert family_of(tok).name == "llama3"
    assert tok.pad_token == "<|finetune_right_pad_id|>"
    assert len(stop_ids(tok)) == 2
    assert weights_path(out) == llama3_dir.resolve()


def test_hub_id_resolves_from_the_cache_in_offline_mode(llama3_dir, tmp_path, monkeypatch):
    cache = _hub_cache(tmp_path, llama3_dir)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    out = tmp_path / "base"
    out.mkdir()
    record = prepare_base({"source": "meta-llama/Tiny-3", **ARCH}, out)
    assert record["snapshot"] == "a" * 40
    model = load_base(out)  # weights come from the recorded snapshot
    assert model.config.num_hidden_layers == ARCH["layers"]
    with pytest.raises(BaseModelError, match="'meta-llama/Not-Cached'.*offline"):
        prepare_base({"source": "meta-llama/Not-Cached"}, out)


def test_architecture_that_differs_from_the_config_names_the_key(llama3_dir, tmp_path):
    with pytest.raises(
        BaseModelError, match=r"base_model.layers: config says 3.*num_hidden_layers=2"
    ):
        prepare_base({"source": str(llama3_dir), **ARCH, "layers": 3}, tmp_path)


def test_a_directory_without_config_json_is_refused(tmp_path):
    with pytest.raises(BaseModelError, match="has no config.json"):
        prepare_base({"source": str(tmp_path)}, tmp_path)


def test_hub_base_evaluates_in_4bit_as_fine_tuning_sees_it(llama3_dir, tmp_path):
    import bitsandbytes as bnb

    out = tmp_path / "base"
    out.mkdir()
    prepare_base({"source": str(llama3_dir)}, out)
    nf4 = {
        "load_in_4bit": True,
        "quant_type": "nf4",
        "double_quant": True,
        "compute_dtype": "float32",
    }
    model = load_for_eval(out, out, nf4)
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in model.modules())
