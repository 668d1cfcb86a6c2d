import pytest
import torch

from tests.training.test_finetune import _cell
from zoomattn.data.build import load_split, write_split
from zoomattn.data.tasks import training_mix
from zoomattn.methods import METHODS, StepBatch
from zoomattn.methods.loading import build_trainable
from zoomattn.modeling.loading import load_tokenizer
from zoomattn.training.answer_loss import AnswerLoss, backward_batch
from zoomattn.training.batching import encode_example


@pytest.fixture(scope="module")
def train_dir(tmp_path_factory, world):
    records = training_mix(world, {"single": 1.0, "multihop": 0.5}, 64, 0.9, 4, seed=3)
    out = tmp_path_factory.mktemp("train") / "train"
    write_split(records, out, {})
    return out


@pytest.mark.parametrize("micro", [1, 2, 3])
def test_gradient_accumulation_gives_the_full_batch_gradient(train_dir, base_dir, micro):
    """Micro-batches of unequal answer lengths and padding still sum to the full batch's
    mean-token-loss gradient (each is divided by the whole batch's scored-token count)."""
    tok = load_tokenizer(base_dir)
    examples = [encode_example(tok, r) for r in load_split(train_dir)[:6]]
    cfg = _cell()
    cfg["finetune"]["lora"]["dropout"] = 0.0
    values = {**cfg["method_config"], "dropout": 0.0}
    model = build_trainable(
        base_dir, "opamp", METHODS["opamp"].make_config(values), cfg["finetune"]["lora"], None
    )
    grads, losses = [], []
    for m in (len(examples), micro):
        losses.append(backward_batch(model, examples, tok.pad_token_id, m))
        grads.append([p.grad.clone() for p in model.parameters() if p.requires_grad])
        model.zero_grad(set_to_none=True)
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    for full, accumulated in zip(*grads, strict=True):
        torch.testing.assert_close(accumulated, full, rtol=1e-4, atol=1e-6)


def test_the_default_objective_is_the_answer_loss_alone(train_dir, base_dir):
    """``AnswerLoss.step`` (a method without a training step of its own) is ``backward_batch``:
    the same gradient, and its loss as both train_loss and qa_loss."""
    tok = load_tokenizer(base_dir)
    records = load_split(train_dir)[:4]
    examples = [encode_example(tok, r) for r in records]
    lora = {**_cell()["finetune"]["lora"], "dropout": 0.0}  # the same gradient twice
    model = build_trainable(base_dir, "qlora", METHODS["qlora"].make_config({}), lora, None)
    want = backward_batch(model, examples, tok.pad_token_id, 2)
    grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]
    model.zero_grad(set_to_none=True)
    batch = StepBatch(records, examples, tok.pad_token_id, micro_batch_size=2, seed=0, step=0)
    metrics = AnswerLoss().step(model, tok, batch)
    assert metrics == {"train_loss": want, "qa_loss": want}
    got = [p.grad for p in model.parameters() if p.requires_grad]
    for a, b in zip(got, grads, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
