import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from zoomattn.data import tasks
from zoomattn.evaluation import head_patterns as hp
from zoomattn.evaluation.head_patterns import (
    CLASSES,
    classify_row,
    classify_rows,
    head_patterns,
)
from zoomattn.training.batching import encode_prompt


def _row(head, middle, tail):
    """An attention row in float64 from its three regions (exact binary fractions where a test
    sits on a threshold)."""
    return torch.tensor([*head, *middle, *tail], dtype=torch.float64)


def _spread(total, n):
    return [total / n] * n


# Each row: (expected class, row). The head and tail are 3 keys each.
ROWS = {
    "edge: sink plus recent keys": (
        "edge",
        _row([0.5, 0.1, 0.0], _spread(0.1, 10), [0.0, 0.1, 0.2]),  # head + tail 0.9
    ),
    "edge mass exactly 0.75 is not edge": (
        "other",
        _row([0.25, 0.25, 0.0], _spread(0.25, 5), [0.0, 0.0, 0.25]),
    ),
    "edge mass just above 0.75": (
        "edge",
        _row([0.25, 0.25, 0.0], [0.2, 0.04, 0.0, 0.0, 0.0], [0.0, 0.0, 0.26]),
    ),
    "uniform: 94 middle keys just above 1/S": (
        "uniform",
        _row([0.005] * 3, _spread(0.97, 94), [0.005] * 3),  # S = 100, middle 0.97, max 0.0103
    ),
    "exactly uniform has no key above 1/S": (
        "other",
        _row([1 / 128] * 3, [1 / 128] * 122, [1 / 128] * 3),  # middle 122/128 > 0.9
    ),
    "uniform needs more than 40% of keys above 1/S": (
        "other",  # S = 100: 40 keys at 0.02 (exactly 40%), 54 at 0.0011...: no key > 0.10
        _row([0.0] * 3, [0.02] * 40 + _spread(0.2, 54), [0.0] * 3),
    ),
    "41% of keys above 1/S is uniform": (
        "uniform",
        _row([0.0] * 3, [0.02] * 41 + _spread(0.18, 53), [0.0] * 3),
    ),
    "a key of exactly 0.10 still allows uniform": (
        "uniform",  # S = 100: 46 keys above 0.01 (0.10 and 45 at 0.0195), 48 near 0
        _row([0.0] * 3, [0.1] + [0.0195] * 45 + _spread(0.0225, 48), [0.0] * 3),
    ),
    "one key at 0.31 concentrates the middle": (
        "middle",
        _row([0.01, 0.0, 0.0], [0.31] + _spread(0.67, 20), [0.0, 0.0, 0.01]),
    ),
    "two keys above 0.30": ("middle", _row([0.0] * 3, [0.45, 0.45, 0.1], [0.0] * 3)),
    "three keys at 0.11 scatter the middle": (
        "middle",
        _row([0.02, 0.0, 0.0], [0.11] * 3 + _spread(0.65, 20), [0.0, 0.0, 0.0]),
    ),
    "two keys at 0.30 are neither concentrated nor scattered": (
        "other",  # 0.30 is not > 0.30, and two keys > 0.10 are fewer than three
        _row([0.0] * 3, [0.30, 0.30] + _spread(0.4, 10), [0.0] * 3),
    ),
    "middle mass exactly 0.90 is not middle": (
        "other",
        _row([0.0625, 0.0, 0.0], [0.45, 0.45], [0.0, 0.0, 0.0375]),
    ),
    "middle mass below 0.90 with a peak": (
        "other",
        _row([0.1, 0.0, 0.0], [0.5, 0.3], [0.0, 0.0, 0.1]),  # middle 0.8, edge 0.2
    ),
}


@pytest.mark.parametrize("want, row", ROWS.values(), ids=ROWS.keys())
def test_classify_row_applies_the_strict_thresholds_of_app_d(want, row):
    assert classify_row(row) == want
    assert CLASSES[int(classify_rows(row))] == want


def test_exact_boundary_rows_really_sit_on_the_threshold():
    row = ROWS["edge mass exactly 0.75 is not edge"][1]
    assert float(row[:3].sum() + row[-3:].sum()) == 0.75
    row = ROWS["middle mass exactly 0.90 is not middle"][1]
    assert float(row[3:-3].sum()) == 0.9


def test_head_and_tail_sizes_change_the_regions():
    row = _row([0.0, 0.0, 0.8], [0.05, 0.05, 0.05], [0.05, 0.0, 0.0])
    assert classify_row(row) == "edge"  # the 0.8 key is in the head
    assert classify_row(row, head_tokens=2, tail_tokens=1) == "middle"  # now a middle peak


def test_classify_rows_agrees_with_classify_row_on_many_random_rows():
    gen = torch.Generator().manual_seed(0)
    seen = set()
    for s in (7, 8, 13, 40, 100, 160):
        temperature = torch.rand(64, 4, 1, generator=gen, dtype=torch.float64) * 6
        logits = torch.randn(64, 4, s, generator=gen, dtype=torch.float64) * temperature
        edge_bias = torch.randn(64, 4, 1, generator=gen, dtype=torch.float64) * 4
        logits[..., :3] += edge_bias
        logits[..., -3:] += edge_bias
        rows = torch.softmax(logits, -1)
        got = classify_rows(rows)
        assert got.shape == (64, 4) and got.dtype == torch.long
        want = [[CLASSES.index(classify_row(r)) for r in head] for head in rows]
        assert got.tolist() == want
        seen |= set(got.ravel().tolist())
    assert seen == set(range(len(CLASSES)))  # every class was compared


def test_rows_too_short_for_head_middle_and_tail_are_rejected():
    with pytest.raises(ValueError, match="6 keys"):
        classify_row([1 / 6] * 6)
    with pytest.raises(ValueError, match="6 keys"):
        classify_rows(torch.full((2, 6), 1 / 6))
    assert classify_row([0.0] * 3 + [1.0] + [0.0] * 3) == "middle"  # 7 keys suffice


def _model(base_dir, attn="zoomattn"):
    """The small base with larger random attention weights: at its init scale every head spreads
    its attention almost evenly (all "other"); at this scale the heads differ."""
    model = AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation=attn).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in model.model.layers:
            a = layer.self_attn
            for proj in (a.q_proj, a.k_proj, a.v_proj, a.o_proj):
                proj.weight.copy_(torch.randn(proj.weight.shape, generator=gen) * 0.5)
    return model


def _records(sampler, n):
    recs = [tasks.distractor_qa(sampler, "multihop", 2) for _ in range(n)]
    for i, rec in enumerate(recs):
        rec["id"] = f"r-{i}"
    return recs


def _eager_rows(base_dir, tokenizer, rec) -> torch.Tensor:
    """The last prompt token's row of every head from the full eager attention matrices."""
    with torch.no_grad():
        out = _model(base_dir, "eager")(
            input_ids=torch.tensor([encode_prompt(tokenizer, rec)]), output_attentions=True
        )
    return torch.stack(out.attentions)[:, 0, :, -1].to(torch.float64)  # [layers, heads, S]


def test_head_patterns_match_the_eager_attention_classified_row_by_row(
    base_dir, tokenizer, sampler
):
    recs = _records(sampler, 5)
    got = head_patterns(_model(base_dir), tokenizer, recs, examples=4)
    assert json.loads(json.dumps(got)) == got

    counts = np.zeros((4, 4, 4))  # [layers, heads, classes], from the eager rows
    mass = np.zeros(3)
    for rec in recs[:4]:  # examples=4: the fifth record is not used
        rows = _eager_rows(base_dir, tokenizer, rec)
        for layer in range(4):
            for head in range(4):
                row = rows[layer, head].tolist()
                counts[layer, head, CLASSES.index(classify_row(row))] += 1
                mass += [sum(row[:3]), sum(row[3:-3]), sum(row[-3:])]
    head_class = [[CLASSES[int(np.argmax(c))] for c in layer] for layer in counts]

    assert (got["examples"], got["layers"], got["heads"]) == (4, 4, 4)
    assert (got["head_tokens"], got["tail_tokens"]) == (3, 3)
    assert got["classes"] == ["edge", "uniform", "middle", "other"]
    assert got["thresholds"]["edge_mass"] == 0.75 and got["thresholds"]["middle_mass"] == 0.9
    np.testing.assert_allclose(got["class_share"], counts / 4)
    assert got["head_class"] == head_class
    flat = [c for layer in head_class for c in layer]
    assert got["distribution"] == {c: flat.count(c) / 16 for c in CLASSES}
    assert got["example_distribution"] == pytest.approx(
        {c: counts[..., i].sum() / 64 for i, c in enumerate(CLASSES)}
    )
    assert got["mean_mass"] == pytest.approx(
        dict(zip(("head", "middle", "tail"), mass / 64, strict=True))
    )
    assert sum(got["mean_mass"].values()) == pytest.approx(1.0)
    assert got["middle_heads"] == [
        [i, j] for i in range(4) for j in range(4) if head_class[i][j] == "middle"
    ]
    assert len(set(flat)) >= 2 and got["middle_heads"]  # the heads differ: the checks bite


def test_a_tie_between_classes_goes_to_the_earlier_class(base_dir, tokenizer, sampler, monkeypatch):
    """Two examples: every head edge on one and middle on the other is called edge."""
    calls = iter([CLASSES.index("middle"), CLASSES.index("edge")])
    monkeypatch.setattr(
        hp, "classify_rows", lambda rows: torch.full(rows.shape[:-1], next(calls), dtype=torch.long)
    )
    got = head_patterns(_model(base_dir), tokenizer, _records(sampler, 2), examples=2)
    assert got["head_class"] == [["edge"] * 4] * 4
    assert got["class_share"][0][0] == [0.5, 0.0, 0.5, 0.0]
    assert got["distribution"] == {"edge": 1.0, "uniform": 0.0, "middle": 0.0, "other": 0.0}
    assert got["example_distribution"] == {"edge": 0.5, "uniform": 0.0, "middle": 0.5, "other": 0.0}
    assert got["middle_heads"] == []


def test_a_prompt_too_short_to_split_is_rejected_by_record_id(
    base_dir, tokenizer, sampler, monkeypatch
):
    recs = _records(sampler, 2)
    real = hp.encode_prompt
    monkeypatch.setattr(hp, "encode_prompt", lambda tok, rec: real(tok, rec)[-6:])
    with pytest.raises(ValueError, match="record r-0: 6 keys"):
        head_patterns(_model(base_dir), tokenizer, recs, examples=2)


def test_head_patterns_need_a_record(base_dir, tokenizer):
    with pytest.raises(ValueError, match="at least one record"):
        head_patterns(_model(base_dir), tokenizer, [], examples=3)
