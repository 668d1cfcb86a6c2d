import math

import pytest
import torch

from zoomattn.attention.math import attention_probs, repeat_kv, sdpa
from zoomattn.methods.lkg.kernel import (
    OTHER,
    QUESTION,
    TAIL,
    Boundary,
    by_heads,
    call_mask,
    estimator_mask,
    fusion_bias,
    n_passages,
    relevance_attention,
    relevance_last_row,
    segment_ids,
    spliced_by_heads,
)

O, Q, T = OTHER, QUESTION, TAIL  # noqa: E741 (one letter keeps the hand-written rows aligned)
INF = float("inf")
B = Boundary(d=90, e=91, q=92, eq=93)
D, E, QM, EQ = 90, 91, 92, 93
BOS, DOC, COLON, W, ANS, PAD = 1, 5, 6, 7, 8, 0


# --- segments ------------------------------------------------------------------------------------


def _segments(*rows):
    return segment_ids(torch.tensor(rows), B).tolist()


def test_segment_ids_of_a_prompt_with_two_passages_a_question_and_an_answer():
    row = [BOS, DOC, COLON, D, W, W, E, DOC, COLON, D, W, E, QM, W, EQ, ANS, ANS]
    expected = [O, O, O, 0, 0, 0, 0, O, O, 1, 1, 1, Q, Q, Q, T, T]
    assert _segments(row) == [expected]


def test_segment_ids_with_left_padding_leave_the_padding_other():
    row = [PAD, PAD, PAD, BOS, D, W, E, QM, W, EQ, ANS]
    assert _segments(row) == [[O, O, O, O, 0, 0, 0, Q, Q, Q, T]]


def test_segment_ids_under_an_attention_mask_make_padding_other_on_either_side():
    rows = (
        [BOS, D, W, E, QM, W, EQ, ANS, ANS, PAD, PAD],  # training's right padding
        [PAD, PAD, BOS, D, W, E, QM, W, EQ, ANS, ANS],  # generation's left padding
    )
    real = torch.tensor(rows) != PAD
    assert _segments(*rows)[0][-2:] == [T, T]  # the ids alone: right padding follows the answer
    assert segment_ids(torch.tensor(rows), B, real.long()).tolist() == [
        [O, 0, 0, 0, Q, Q, Q, T, T, O, O],
        [O, O, O, 0, 0, 0, Q, Q, Q, T, T],
    ]


def test_segment_ids_of_a_batch_with_different_layouts():
    rows = (
        [BOS, D, W, E, D, W, E, QM, W, EQ, ANS, ANS],
        [PAD, PAD, BOS, D, E, D, E, D, W, E, QM, EQ],
    )
    expected = [
        [O, 0, 0, 0, 1, 1, 1, Q, Q, Q, T, T],
        [O, O, O, 0, 0, 1, 1, 2, 2, 2, Q, Q],
    ]
    assert _segments(*rows) == expected
    assert n_passages(torch.tensor(expected)) == 3


def test_a_truncated_passage_runs_until_the_next_marker_or_the_end_of_the_row():
    assert _segments([BOS, D, W, W, D, W, QM, W, EQ, ANS]) == [[O, 0, 0, 0, 1, 1, Q, Q, Q, T]]
    assert _segments([BOS, D, W, W]) == [[O, 0, 0, 0]]


def test_closing_markers_that_close_nothing_are_other_and_all_after_the_question_is_tail():
    assert _segments([BOS, E, D, W, E, W, E, EQ, ANS]) == [[O, O, 0, 0, 0, O, O, O, O]]
    assert _segments([D, W, EQ, QM, E, W, EQ, ANS]) == [[0, 0, O, Q, Q, Q, Q, T]]
    assert _segments([QM, W, EQ, D, W, E]) == [[Q, Q, Q, T, T, T]]


def test_n_passages_without_passages_is_zero():
    assert n_passages(torch.tensor([[O, Q, Q, T]])) == 0


# --- estimator mask ------------------------------------------------------------------------------


def test_estimator_mask_is_blocked_bidirectional_with_padding_keys_masked():
    segments = torch.tensor([[O, O, 0, 0, 1, 1, Q, Q, T]])  # position 0 is left padding
    key_padding = torch.tensor([[False] + [True] * 8])
    expected = [
        [1, 0, 0, 0, 0, 0, 0, 0, 0],  # padding row: only its diagonal, never empty
        [0, 1, 0, 0, 0, 0, 0, 0, 0],  # bos: causal, the padding key removed
        [0, 0, 1, 1, 0, 0, 0, 0, 0],  # passage 0 both ways, nothing else
        [0, 0, 1, 1, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 1, 1, 0, 0, 0],  # passage 1: no cross-passage
        [0, 0, 0, 0, 1, 1, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 1, 1, 0],  # question block
        [0, 0, 0, 0, 0, 0, 1, 1, 0],
        [0, 1, 1, 1, 1, 1, 1, 1, 1],  # tail: causal over every real key
    ]
    mask = estimator_mask(segments, key_padding)
    assert mask.shape == (1, 1, 9, 9) and mask.dtype == torch.bool
    assert mask[0, 0].int().tolist() == expected
    assert estimator_mask(segments)[0, 0, 1].int().tolist() == [1, 1, 0, 0, 0, 0, 0, 0, 0]


# --- fusion bias ---------------------------------------------------------------------------------


def test_call_mask_is_the_given_mask_or_causal_aligned_to_the_last_keys():
    assert call_mask(None, 2, 4, "cpu")[0, 0].int().tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert call_mask(None, 1, 3, "cpu")[0, 0].int().tolist() == [[1, 1, 1]]
    given = torch.zeros(2, 1, 3, 3, dtype=torch.bool)
    assert call_mask(given, 3, 3, "cpu") is given


def test_fusion_bias_adds_log_alpha_for_question_and_tail_rows_and_cuts_cross_passage():
    segments = torch.tensor([[O, 0, 0, 1, 1, Q, T, T]] * 2)
    log_alpha = torch.tensor([[-0.7, 0.3], [0.5, -2.0]])
    bias = fusion_bias(segments, segments, log_alpha, call_mask(None, 8, 8, "cpu"))
    assert bias.shape == (2, 1, 8, 8)
    for b, (a0, a1) in enumerate(log_alpha.tolist()):
        expected = [
            [0, -INF, -INF, -INF, -INF, -INF, -INF, -INF],
            [0, 0, -INF, -INF, -INF, -INF, -INF, -INF],
            [0, 0, 0, -INF, -INF, -INF, -INF, -INF],
            [0, -INF, -INF, 0, -INF, -INF, -INF, -INF],  # passage 1 does not see passage 0
            [0, -INF, -INF, 0, 0, -INF, -INF, -INF],
            [0, a0, a0, a1, a1, 0, -INF, -INF],  # question: log α per passage
            [0, a0, a0, a1, a1, 0, 0, -INF],  # tail likewise
            [0, a0, a0, a1, a1, 0, 0, 0],
        ]
        assert torch.equal(bias[b, 0], torch.tensor(expected))


def test_fusion_bias_of_a_decoding_step_is_the_last_row_and_keeps_the_diagonal_at_alpha_zero():
    segments = torch.tensor([[O, 0, 0, 1, 1, Q, T, T]])
    log_alpha = torch.full((1, 2), -INF)  # α = 0 for every passage
    bias = fusion_bias(segments[:, -1:], segments, log_alpha, call_mask(None, 1, 8, "cpu"))
    assert bias[0, 0].tolist() == [[0, -INF, -INF, -INF, -INF, 0, 0, 0]]


def test_fusion_bias_rejects_a_passage_without_a_log_alpha():
    segments = torch.tensor([[0, 1, 2, Q]])
    with pytest.raises(RuntimeError):
        fusion_bias(segments, segments, torch.zeros(1, 2), call_mask(None, 4, 4, "cpu"))


# --- attention -----------------------------------------------------------------------------------

SEGMENTS = torch.tensor(
    [
        [O, 0, 0, 0, 1, 1, 1, Q, Q, T, T, T],
        [O, O, O, 0, 0, 1, 1, 2, Q, Q, T, T],  # in the padded case positions 0-2 are padding
    ]
)
N, SCALE = SEGMENTS.shape[1], 0.3


def _qkv(n=N, h=4, hkv=2, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, c, n, d, generator=g) for c in (h, hkv, hkv))
    log_alpha = torch.randn(2, 3, generator=g)
    return q, k, v, log_alpha


def _padding_mask():
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    real = torch.tensor([[True] * N, [False] * 3 + [True] * (N - 3)])
    return causal[None, None] & real[:, None, None, :]


def _materialised(q, k, v, bias, scale=SCALE):
    """softmax(q·kᵀ·s + bias)·v, KV heads repeated by hand (head h reads KV head h // 2)."""
    k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    return ((q @ k.transpose(-1, -2)) * scale + bias).softmax(-1) @ v


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("heads", [[1, 2], [0, 1, 2, 3]])
def test_fused_heads_are_the_biased_softmax_and_the_others_plain_sdpa(heads, padded):
    q, k, v, log_alpha = _qkv()
    mask = _padding_mask() if padded else None
    bias = fusion_bias(SEGMENTS, SEGMENTS, log_alpha, call_mask(mask, N, N, "cpu"))
    out = relevance_attention(q, k, v, mask, SCALE, heads, bias)
    ref = _materialised(q, k, v, bias)
    plain = sdpa(q, k, v, mask, SCALE)
    rows = slice(3, None) if padded else slice(None)  # padded query rows are don't-care
    for h in range(4):
        expected = ref if h in heads else plain
        torch.testing.assert_close(out[0, h], expected[0, h], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out[1, h, rows], expected[1, h, rows], atol=1e-5, rtol=1e-5)


def test_no_fused_heads_is_exactly_plain_sdpa():
    q, k, v, log_alpha = _qkv()
    bias = fusion_bias(SEGMENTS, SEGMENTS, log_alpha, call_mask(None, N, N, "cpu"))
    out = relevance_attention(q, k, v, None, SCALE, [], bias)
    assert torch.equal(out, sdpa(q, k, v, None, SCALE))


def test_with_alpha_one_fusion_is_causal_attention_without_the_cross_passage_blocks():
    q, k, v, _ = _qkv()
    bias = fusion_bias(SEGMENTS, SEGMENTS, torch.zeros(2, 3), call_mask(None, N, N, "cpu"))
    out = relevance_attention(q, k, v, None, SCALE, [0, 3], bias)
    allowed = torch.ones(2, 1, N, N, dtype=torch.bool).tril()
    passages = {0: [[1, 2, 3], [4, 5, 6]], 1: [[3, 4], [5, 6], [7]]}  # positions, by hand
    for b, spans in passages.items():
        for i, rows in enumerate(spans):
            for j, cols in enumerate(spans):
                if i != j:
                    allowed[b, 0, rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1] = False
    ref = sdpa(q, k, v, allowed, SCALE)
    torch.testing.assert_close(out[:, [0, 3]], ref[:, [0, 3]], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(out[:, 0], sdpa(q, k, v, None, SCALE)[:, 0], atol=1e-3)


def test_gradients_reach_q_k_v_and_log_alpha_as_through_the_materialised_softmax():
    grads = []
    for fused in (True, False):
        q, k, v, log_alpha = (t.requires_grad_(True) for t in _qkv())
        bias = fusion_bias(SEGMENTS, SEGMENTS, log_alpha, call_mask(None, N, N, "cpu"))
        if fused:
            out = relevance_attention(q, k, v, None, SCALE, [1, 2], bias)
        else:
            out = torch.cat(
                [
                    sdpa(q, k, v, None, SCALE)[:, :1],
                    _materialised(q, k, v, bias)[:, 1:3],
                    sdpa(q, k, v, None, SCALE)[:, 3:],
                ],
                dim=1,
            )
        out.square().sum().backward()
        grads.append([t.grad for t in (q, k, v, log_alpha)])
    for got, want in zip(*grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    d_log_alpha = grads[0][3]
    assert (d_log_alpha[0, :2] != 0).all() and (d_log_alpha[1] != 0).all()  # every passage's α
    assert d_log_alpha[0, 2] == 0  # row 0 has two passages: its third slot is unused


def test_last_row_is_the_last_row_of_the_materialised_probabilities():
    q, k, _, log_alpha = _qkv()
    mask = _padding_mask()
    bias = fusion_bias(SEGMENTS, SEGMENTS, log_alpha, call_mask(mask, N, N, "cpu"))
    row = relevance_last_row(q, k, mask, SCALE, [1, 2], bias)
    fused = ((q @ repeat_kv(k, 4).transpose(-1, -2)) * SCALE + bias).softmax(-1)[:, :, -1]
    plain = attention_probs(q, k, mask, SCALE)[:, :, -1]
    assert row.shape == (2, 4, N)
    torch.testing.assert_close(row[:, [1, 2]], fused[:, [1, 2]])
    torch.testing.assert_close(row[:, [0, 3]], plain[:, [0, 3]])
    assert math.isclose(row[1, 1, :3].sum().item(), 0.0)  # padding keys get no weight


def test_a_decoding_step_equals_the_last_row_of_the_prefill():
    q, k, v, log_alpha = _qkv()
    full = fusion_bias(SEGMENTS, SEGMENTS, log_alpha, call_mask(None, N, N, "cpu"))
    prefill = relevance_attention(q, k, v, None, SCALE, [1, 2], full)
    step = fusion_bias(SEGMENTS[:, -1:], SEGMENTS, log_alpha, call_mask(None, 1, N, "cpu"))
    decoded = relevance_attention(q[:, :, -1:], k, v, None, SCALE, [1, 2], step)
    torch.testing.assert_close(decoded, prefill[:, :, -1:], atol=1e-5, rtol=1e-5)


def _stand_in(q, k, v):  # any attention of the fused heads' own q, k, v
    return sdpa(q * 1.7, k, v.flip(-1))


@pytest.mark.parametrize("heads", [(1, 6), (0,), (), tuple(range(8))])
@pytest.mark.parametrize("padded", [False, True])
def test_spliced_heads_give_by_heads_values_and_gradients(heads, padded):
    torch.manual_seed(0)
    q = torch.randn(2, 8, 12, 16, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, 4, 12, 16, dtype=torch.float64, requires_grad=True) for _ in "kv")
    mask = None
    if padded:  # the second row left-padded by 3, causal
        mask = torch.ones(12, 12, dtype=torch.bool).tril()[None, None].repeat(2, 1, 1, 1)
        mask[1, :, :, :3] = False
    grad = torch.randn(2, 8, 12, 16, dtype=torch.float64)
    results = []
    for split in (by_heads, spliced_by_heads):
        out = split(q, k, v, mask, None, heads, _stand_in)
        results.append((out, *torch.autograd.grad(out, (q, k, v), grad)))
    for spliced, copied in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(spliced, copied, rtol=1e-12, atol=1e-12)
