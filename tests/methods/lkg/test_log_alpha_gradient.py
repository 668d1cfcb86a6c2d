"""log α's gradient from the guided rows, outside FlexAttention (methods/lkg/log_alpha_gradient.py):
against autograd through the materialised formula, and where the fused path takes it. (Values and
every gradient through the fused path, each way of it: test_flex.py, test_flex_checkpointing.py.)"""

import pytest
import torch

from tests.methods.lkg.test_flex import SCALE, SEGMENTS, _inputs, cpu_backward  # noqa: F401
from tests.spies import record_returns
from zoomattn.attention.math import repeat_kv
from zoomattn.methods.lkg import flex, log_alpha_gradient, rows_apart
from zoomattn.methods.lkg.kernel import OTHER, QUESTION, TAIL

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
B, H, KV, L, D = 2, 4, 2, 24, 8
# batch row 0: 10 guided rows (question and answer); row 1: 4, then 2 of right padding (OTHER), so
# 6 of its R = 10 rows are filled in with others
LAYOUT = torch.tensor(
    [
        [OTHER] + [0] * 7 + [1] * 6 + [QUESTION] * 4 + [TAIL] * 6,
        [OTHER] + [0] * 9 + [1] * 8 + [QUESTION] * 3 + [TAIL] + [OTHER] * 2,
    ]
)


def materialised(q, k, v, bias, mask):
    """The output and log-sum-exps of softmax(q·kᵀ/√d + the bias on the guided rows + mask)·v,
    every score materialised."""
    scores = q @ repeat_kv(k, H).transpose(-1, -2) * D**-0.5
    guided = (LAYOUT <= QUESTION)[:, None, :, None]
    scores = scores + torch.where(guided, bias[:, None, None, :], 0.0)
    allowed = torch.ones(L, L, dtype=torch.bool).tril()[None, None] if mask is None else mask
    scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, -1)
    return (scores - lse[..., None]).exp() @ repeat_kv(v, H), lse


@pytest.mark.parametrize("chunk_bytes", [None, 3 * 8 * B * H * L], ids=["whole", "3_rows"])
@pytest.mark.parametrize("padded", [False, True])
def test_the_bias_gradient_of_the_guided_rows_is_autograds_through_the_formula(
    chunk_bytes, padded, monkeypatch
):
    """Every row's output weighted, the bias on the guided rows only: the gradient from the
    guided rows equals autograd's through the whole formula (fp64), with GQA, training's right
    padding, batch rows with fewer guided rows than R (the rows filled in give nothing), whole
    and a chunk of 3 rows at a time."""
    if chunk_bytes is not None:
        monkeypatch.setattr(rows_apart, "CHUNK_BYTES", chunk_bytes)
        assert len(rows_apart.row_chunks(B, H, 10, L, itemsize=8)) == 4
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, n, L, D, dtype=torch.float64) for n in (H, KV, KV))
    bias = torch.randn(B, L, dtype=torch.float64, requires_grad=True)
    mask = None
    if padded:  # batch row 1's last 2 tokens are padding: causal & real keys
        real = torch.arange(L)[None] < torch.tensor([[L], [L - 2]])
        mask = torch.ones(L, L, dtype=torch.bool).tril()[None, None] & real[:, None, None]
    out, lse = materialised(q, k, v, bias, mask)
    weight = torch.randn(out.shape, dtype=torch.float64)
    (expected,) = torch.autograd.grad((out * weight).sum(), bias)
    rows, valid, _ = rows_apart.guided_rows(LAYOUT)
    assert rows.shape == (B, 10) and valid.sum(-1).tolist() == [10, 4]
    got = log_alpha_gradient.bias_gradient(
        weight, out.detach(), bias.detach(), q, k, v, lse.detach(), mask, rows, valid, D**-0.5
    )
    # every column up to a batch row's last guided row is some guided row's key
    assert expected[0].abs().min() > 0 and expected[1, : L - 2].abs().min() > 0
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-10)


def test_the_rows_filled_in_give_nothing_whatever_their_log_sum_exp_and_gradient():
    """A shorter batch row's filled-in rows are passage rows to flex, whose log-sum-exp (no bias,
    no other passage's keys) need not bound their scores as recomputed here: with an lse far below
    them (exp would overflow to inf) and a NaN output gradient, the result is as with theirs."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, n, L, D, dtype=torch.float32) for n in (H, KV, KV))
    bias = torch.randn(B, L, dtype=torch.float32)
    out, lse = materialised(q, k, v, bias, None)
    weight = torch.randn(out.shape)
    rows, valid, _ = rows_apart.guided_rows(LAYOUT)
    args = (bias, q, k, v)
    want = log_alpha_gradient.bias_gradient(weight, out, *args, lse, None, rows, valid, D**-0.5)
    filled = torch.zeros(B, L, dtype=torch.bool)
    filled[1, rows[1][~valid[1]]] = True  # batch row 1's rows filled in (passage rows)
    lse, weight = lse.masked_fill(filled[:, None], -200.0), weight.clone()
    weight[filled[:, None, :, None].expand_as(weight)] = float("nan")
    got = log_alpha_gradient.bias_gradient(weight, out, *args, lse, None, rows, valid, D**-0.5)
    assert filled.sum() == 6 and got.isfinite().all()
    torch.testing.assert_close(got, want, atol=0, rtol=0)


def test_with_no_guided_row_log_alpha_gets_a_zero_gradient(monkeypatch):
    """A call with no question or answer row (a chunk of passages) gives log α a gradient of 0,
    as the score_mod does, not none."""
    monkeypatch.setattr(flex, "LOG_ALPHA_GRADIENT_APART", True)
    (q, k, v), log_alpha = _inputs()
    passages = SEGMENTS[:, :4]  # bos and passage 0 in both batch rows
    out = flex.flex_relevance_attention(
        q[:, :, :4], k[:, :, :4], v[:, :, :4], None, SCALE, [1, 2], passages, passages, log_alpha
    )
    (grad,) = torch.autograd.grad(out.square().sum(), log_alpha)
    assert torch.equal(grad, torch.zeros_like(log_alpha))


def test_the_fused_path_takes_log_alphas_gradient_apart_only_where_log_alpha_trains(monkeypatch):
    """With the switch, a call where log α trains gives flex log α detached (no captured tensor
    requires grad, so flex makes no atomic adds) and attaches its gradient from the guided rows;
    evaluation and generation (no gradient) keep the score_mod as it is. The rows apart, when
    also on, take precedence."""
    monkeypatch.setattr(flex, "LOG_ALPHA_GRADIENT_APART", True)
    captured, real = [], flex.fusion_score_mod
    monkeypatch.setattr(
        flex, "fusion_score_mod", lambda *a: captured.append(a[2].requires_grad) or real(*a)
    )
    attached = record_returns(monkeypatch, flex, "with_log_alpha_gradient")
    (q, k, v), log_alpha = _inputs()

    def call(alpha):
        return flex.flex_relevance_attention(
            q, k, v, None, SCALE, [1, 2], SEGMENTS, SEGMENTS, alpha
        )

    out = call(log_alpha)
    assert captured == [False] and len(attached) == 1
    (grad,) = torch.autograd.grad(out.square().sum(), log_alpha)
    assert grad.abs().sum() > 0
    with torch.no_grad():
        call(log_alpha)
    call(log_alpha.detach())
    assert len(attached) == 1 and len(captured) == 3
    monkeypatch.setattr(flex, "ROWS_APART", True)
    apart = record_returns(monkeypatch, flex, "guided_rows_attention")
    call(log_alpha)
    assert len(apart) == 1 and len(attached) == 1 and len(captured) == 3  # no score_mod
