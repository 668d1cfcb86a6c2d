"""The gpu lane: every method builds, trains in 4-bit with bf16 compute, saves, reloads to the same
logits and evaluates on CUDA, through the same functions the workflow's jobs call."""

import pytest
import torch

from tests.gpu.lane import DEVICE, LANE, NF4_BF16
from zoomattn.data.build import load_split
from zoomattn.evaluation.generate import evaluate_records
from zoomattn.methods import METHODS, ResolveContext
from zoomattn.methods.loading import build_trainable, load_finetuned, load_for_eval
from zoomattn.modeling.loading import load_tokenizer, save_finetuned
from zoomattn.placement import describe
from zoomattn.training.answer_loss import backward_batch
from zoomattn.training.batching import encode_example, pad_batch
from zoomattn.training.finetune import finetune

pytestmark = pytest.mark.gpu

CUDA = LANE
LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
VALUES = {
    "qlora": {},
    "opamp": {"K": 10, "adapter_dim": 8, "every": 2, "dropout": 0.1},
    "rectify": {"xi": 3, "g": "max"},
    "mudaf": {"heads": 2, "alpha": 0.7, "negatives": 3, "tuning": "lora"},
    "lkg": {"fusion_heads": "middle"},
}


def _resolved(method, base_dir):
    context = ResolveContext(
        tokenizer=load_tokenizer(base_dir),
        selected_heads=[[1, 0], [2, 3]],
        middle_heads=[[1, 0], [2, 3]],
    )
    return METHODS[method].resolve(VALUES[method], LORA, context)


def _cfg(cell):
    """The typed method config the finetune stage hands the trainer."""
    return METHODS[cell["method"]].make_config(cell["method_config"])


def _tokenizer(method, cfg, base_dir):
    tok = load_tokenizer(base_dir)
    METHODS[method].prepare_tokenizer(tok, cfg)
    return tok


def test_every_method_has_a_gpu_case():
    assert set(VALUES) == set(METHODS)


@pytest.mark.parametrize("method", sorted(VALUES))
def test_method_trains_in_4bit_bf16_on_cuda_and_reloads_to_identical_logits(
    method, base_dir, train_dir, tmp_path
):
    values = _resolved(method, base_dir)
    cfg = METHODS[method].make_config(values)
    tok = _tokenizer(method, cfg, base_dir)
    model = build_trainable(base_dir, method, cfg, LORA, NF4_BF16, CUDA)
    info = describe(model)
    assert info["device"].startswith(DEVICE) and info["quantization"] == "4-bit nf4"
    for name, p in model.named_parameters():
        assert p.device.type == DEVICE, name
        if ".zoom." in name:
            assert p.dtype == torch.bfloat16, name
    examples = [encode_example(tok, r) for r in load_split(train_dir)[:4]]
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(2):
        loss = backward_batch(model, examples, tok.pad_token_id, 2)
        assert loss == loss and loss > 0  # finite
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()
    batch = pad_batch(examples, tok.pad_token_id, model.device)
    with torch.no_grad():
        want = model(**batch).logits
    save_finetuned(model, tmp_path, method, values)
    if tok is not None:
        tok.save_pretrained(tmp_path)
    reloaded = load_finetuned(tmp_path, base_dir, NF4_BF16, CUDA)
    with torch.no_grad():
        got = reloaded(**batch).logits
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, atol=0, rtol=0)


@pytest.mark.parametrize("method", ["opamp", "lkg"])
def test_finetune_job_trains_with_paged_adamw_and_checkpointing_then_evaluates_on_cuda(
    method, base_dir, train_dir, tmp_path, world
):
    values = _resolved(method, base_dir)
    cell = {
        "run": f"{method}-gpu",
        "seed": 0,
        "method": method,
        "preset": "test",
        "method_config": values,
        "device": CUDA.as_spec(),
        "finetune": {"steps": 4, "batch_size": 4, "lr": 1e-3, "warmup_ratio": 0.0,
                     "optimizer": "paged_adamw_32bit", "log_every": 1, "checkpoint_every": 2,
                     "gradient_checkpointing": True, "lora": LORA, "quantization": NF4_BF16},
    }  # fmt: skip
    logged = []
    finetune(cell, _cfg(cell), train_dir, base_dir, tmp_path / "out", tmp_path / "ckpt", 4,
             lambda m, step: logged.append(m))  # fmt: skip
    assert len(logged) == 4 and all(m["train_loss"] == m["train_loss"] for m in logged)
    model = load_for_eval(tmp_path / "out", base_dir, NF4_BF16, CUDA)
    own = (tmp_path / "out" / "tokenizer_config.json").is_file()
    tok = load_tokenizer(tmp_path / "out" if own else base_dir)
    records = [{**r, "subset": None} for r in load_split(train_dir)[:6]]
    metrics, rows = evaluate_records(model, tok, records, "em", 3, 4)
    assert metrics["n"] == 6 and len(rows) == 6
