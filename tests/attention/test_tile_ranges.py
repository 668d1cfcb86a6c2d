"""Which tiles the fused Triton kernels visit under a mask (zoomattn/attention/tile_ranges.py):
every allowed (row, key) inside the span, nothing skipped that the mask allows. Torch only; the
kernel itself is held to the formula under such masks in test_triton_kernel.py."""

import torch

from tests.methods.rectify.test_kernel import left_padding_mask, right_padding_mask
from zoomattn.attention.tile_ranges import DECODE_QUERIES, padding_spans, tile_ranges, tiles_for


def scattered_mask(n_q, n_k, seed=0):
    """[2, 1, L, S]: sparse random pairs, with an empty row, a whole query tile (rows 16-23 of
    the second sequence) and a whole key tile (keys 16-23 of the first) that allow nothing."""
    allowed = torch.rand(2, 1, n_q, n_k, generator=torch.Generator().manual_seed(seed)) < 0.2
    allowed[0, :, 3] = False
    allowed[1, :, 16:] = False
    allowed[0, :, :, 16:] = False
    return allowed


def test_tile_ranges_cover_every_allowed_pair_and_skip_the_rest():
    """For each kernel's programs, the range spans every (row, key) the mask allows in its tile,
    starts on the loop's step, and is empty where the tile allows nothing."""
    mask = scattered_mask(40, 40)
    tiles = {"forward": (16, 8, 1, 1), "q": (8, 16, 1, 1), "kv": (16, 8, 1, 1)}
    ranges = tile_ranges(mask, tiles)
    by_keys = {name: (tiles[name][0], tiles[name][1], mask[:, 0]) for name in ("forward", "q")}
    by_rows = {"kv": (tiles["kv"][1], tiles["kv"][0], mask[:, 0].transpose(1, 2))}
    for name, (tile, step, allowed) in {**by_keys, **by_rows}.items():
        for b in range(2):
            for t, (start, end) in enumerate(ranges[name][b].tolist()):
                inside = allowed[b, t * tile : (t + 1) * tile]
                assert start % step == 0, (name, b, t)
                assert not inside[:, :start].any() and not inside[:, end:].any(), (name, b, t)
                assert (start < end) == bool(inside.any()), (name, b, t)
    start, end = ranges["forward"][1, 1].tolist()  # rows 16-31 of sequence 2 allow nothing
    assert start >= end == 0
    start, end = ranges["kv"][0, 2].tolist()  # keys 16-23 of sequence 1: no row reads them
    assert start >= end == 0


def test_tile_ranges_of_a_causal_left_padded_batch_skip_the_padding_and_the_upper_triangle():
    mask = left_padding_mask([64, 40], 64)  # 24 padding positions in the second sequence
    tile = (16, 16, 1, 1)
    ranges = tile_ranges(mask, {"forward": tile, "q": tile, "kv": tile})
    visited = (ranges["forward"][..., 1] - ranges["forward"][..., 0]).clamp(min=0) // 16
    assert visited.tolist() == [[1, 2, 3, 4], [0, 1, 2, 3]]  # of 4 key tiles per query tile
    assert ranges["forward"][1].tolist() == [[64, 0], [16, 32], [16, 48], [16, 64]]


def test_padding_spans_are_each_rows_real_keys_for_padding_under_causal_only():
    spans = [[0, 24], [11, 24], [23, 24]]
    mask = left_padding_mask([24, 13, 1], 24)  # 0, 11 and 23 padding positions
    assert padding_spans(mask).tolist() == spans
    assert padding_spans(mask).dtype == torch.int32
    assert padding_spans(mask[:, :, -1:]).tolist() == spans  # a decoding step's row
    assert padding_spans(mask[:, :, -5:]).tolist() == spans  # a chunk over the cache
    right = right_padding_mask([24, 13, 1], 24)  # training's batches
    assert padding_spans(right).tolist() == [[0, 24], [0, 13], [0, 1]]
    both = left_padding_mask([24, 20], 24) & right_padding_mask([24, 18], 24)
    assert padding_spans(both).tolist() == [[0, 24], [4, 18]]
    for padded in (mask, right):
        holed = padded.clone()
        holed[1, 0, -1, 12] = False  # one more key hidden from one row: not padding
        assert padding_spans(holed) is None
    assert padding_spans(scattered_mask(24, 24)) is None
    assert padding_spans(torch.ones(1, 1, 24, 24, dtype=torch.bool)) is None  # not causal
    assert padding_spans(torch.zeros(1, 1, 24, 24, dtype=torch.bool)) is None  # no real key


def test_a_call_of_a_few_queries_takes_the_decode_tile_as_its_forward_and_no_other():
    table = {"forward": (64, 32, 4, 3), "kv": (16, 32, 4, 2), "q": (64, 16, 4, 2),
             "decode": (16, 64, 4, 2)}  # fmt: skip
    assert tiles_for(table, 1) == {**table, "forward": (16, 64, 4, 2)}
    assert tiles_for(table, DECODE_QUERIES + 1) == table
    without = {k: v for k, v in table.items() if k != "decode"}
    assert tiles_for(without, 1) == without
