import random

import pytest
import torch
from safetensors.torch import load_file

from tests.methods.lkg.helpers import (
    LORA,
    attached_lkg,
    batch_of,
    lkg_config,
)
from zoomattn.data.build import load_split
from zoomattn.data.tasks import multihop, single_doc
from zoomattn.methods import METHODS, ResolveContext, StepBatch
from zoomattn.methods.lkg.model import lkg_module
from zoomattn.methods.lkg.objective import LkgObjective, golden_top1
from zoomattn.methods.loading import build_trainable, load_finetuned
from zoomattn.modeling.boundary import add_boundary_tokens, has_boundary_tokens
from zoomattn.modeling.loading import load_tokenizer, save_finetuned
from zoomattn.stages.common import load_model
from zoomattn.training.batching import encode_example
from zoomattn.training.finetune import finetune

# --- saving and fine-tuning ---------------------------------------------------------------


def _resolved(base_dir, **values):
    context = ResolveContext(middle_heads=[[1, 0], [2, 3]], tokenizer=load_tokenizer(base_dir))
    return METHODS["lkg"].resolve(values, LORA, context)


def _cfg(cell):
    """The typed method config the finetune stage hands the trainer."""
    return METHODS[cell["method"]].make_config(cell["method_config"])


def test_saved_model_reloads_to_identical_logits(base_dir, tmp_path, sampler):
    values = _resolved(base_dir)
    cfg = METHODS["lkg"].make_config(values)
    model = build_trainable(base_dir, "lkg", cfg, LORA, None).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.1)
    tok = load_tokenizer(base_dir)
    assert METHODS["lkg"].prepare_tokenizer(tok, cfg)
    batch = batch_of(tok, [single_doc(sampler, 0.75), multihop(sampler, 0.5)])
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
    cfg = lkg_config(tok, fusion_heads="all")
    model = attached_lkg(base_tok, tok, fusion_heads="all").train()
    batch = batch_of(tok, [record])
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
    cfg = lkg_config(tok, fusion_heads="all", aux_weight=0.0)
    runs = []
    for micro in (3, 1):
        model = attached_lkg(base_tok, tok, fusion_heads="all", aux_weight=0.0).train()
        batch = StepBatch(records, examples, tok.pad_token_id, micro, seed=0, step=0)
        metrics = LkgObjective(cfg).step(model, tok, batch)
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        runs.append((metrics["qa_loss"], metrics, grads))
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


class Killed(Exception):
    pass


def test_lkg_finetune_saves_its_tokenizer_and_resumes_to_the_same_weights(
    tmp_path, train_dir, base_dir
):
    random.seed(0)
    logged = []
    cell = _cell(base_dir)
    exported = {**cell, "finetune": {**cell["finetune"], "export_merged": True}}
    finetune(exported, _cfg(exported), train_dir, base_dir, tmp_path / "a", tmp_path / "ckpt_a", 1,
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
        finetune(
            cell,
            _cfg(cell),
            train_dir,
            base_dir,
            tmp_path / "b",
            tmp_path / "ckpt_b",
            1,
            die_at_step_5,
        )
    finetune(cell, _cfg(cell), train_dir, base_dir, tmp_path / "b", tmp_path / "ckpt_b", threads=1)
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
    batch = batch_of(tok, load_split(train_dir)[:2], answers=False)
    with torch.no_grad():
        torch.testing.assert_close(
            merged(**batch).logits, trained(**batch).logits, atol=1e-4, rtol=1e-4
        )
    base, plain_tok = load_model(spec, base_dir, base_dir, 1)
    assert not has_boundary_tokens(plain_tok) and not hasattr(base.model, "zoom")
