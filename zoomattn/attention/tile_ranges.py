"""The mask as the fused Triton kernels take it (rectification's, OpAmp's), which tiles their
programs visit under it, and the tile a call of a few queries takes (``tiles_for``).

A mask ``[B, 1, L, S]`` may rule out whole tiles of the score matrix: the upper triangle of a causal
mask, the rows and columns of left padding, the cross-passage blocks of a structured mask. A
program of the kernel loops over a contiguous span of tiles (the keys of its query tile, or the
query rows of its key tile); this module finds, per program, the smallest such span that holds
every (row, key) the mask allows in its tile. A tile outside it holds no allowed pair, so its
probabilities are all 0 and skipping it changes nothing. Torch only: computed on the mask's device
before the launch (a few reductions over the mask, which the kernels read anyway).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

DECODE_QUERIES = 16  # calls of at most this many queries run the forward on the ``decode`` tile


def tiles_for(tiles: dict, n_q: int) -> dict:
    """A kernel's tile table for a call of ``n_q`` queries: with a ``decode`` tile, that as the
    forward's for a call of a few queries (a decoding step), which would use one row of a
    prefill tile."""
    if n_q <= DECODE_QUERIES and "decode" in tiles:
        return {**tiles, "forward": tiles["decode"]}
    return tiles


def check_mask(mask, bsz: int, n_q: int, n_k: int) -> torch.Tensor | None:
    """The boolean mask as ``[B, 1, L, S]`` (a batch of one broadcast), checked."""
    if mask is None:
        return None
    if mask.dtype != torch.bool or mask.dim() != 4 or mask.shape[1] != 1:
        raise ValueError(f"mask: boolean [B, 1, L, S], got {mask.dtype} {tuple(mask.shape)}")
    if tuple(mask.shape[2:]) != (n_q, n_k) or mask.shape[0] not in (1, bsz):
        raise ValueError(f"mask: shape {tuple(mask.shape)} does not fit B={bsz}, L={n_q}, S={n_k}")
    return mask.expand(bsz, 1, n_q, n_k)


def mask_arg(mask) -> torch.Tensor | None:
    """The mask as the kernels read it: bytes, unit stride along the keys."""
    if mask is None:
        return None
    return (mask if mask.stride(-1) == 1 else mask.contiguous()).view(torch.uint8)


def padding_spans(mask) -> torch.Tensor | None:
    """Each batch row's real keys as ``[B, 2]`` int32 (the first, and one past the last), where
    ``mask`` (checked, ``[B, 1, L, S]``) is exactly padding under causal (queries aligned to the
    last keys): left padding (generation's prompts), right padding (training's batches, whose
    padded rows see every real key) or both. Then the kernels test ``first ≤ key < end`` and
    ``key ≤ row + S − L`` instead of loading the mask's bytes. None for any other mask. One
    comparison over the mask (a host sync)."""
    allowed = mask[:, 0]
    n_q, n_k = allowed.shape[1:]
    real = allowed.any(1)  # [B, S]: the keys some row sees
    as_bytes = real.view(torch.uint8)
    first = as_bytes.argmax(-1)
    end = n_k - as_bytes.flip(-1).argmax(-1)
    keys = torch.arange(n_k, device=mask.device)
    last = torch.arange(n_q, device=mask.device)[:, None] + (n_k - n_q)
    inside = (keys >= first[:, None]) & (keys < end[:, None])
    padded_causal = inside[:, None, :] & (keys <= last)
    spans = torch.stack([first, end], dim=-1).to(torch.int32)
    return spans if torch.equal(padded_causal, allowed) else None


def launch_arg(tensor, placeholder):
    """``tensor``, or where absent a pointer the kernel never reads (its constexpr is off)."""
    return placeholder if tensor is None else tensor


def _allowed_bounds(allowed: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Along ``dim`` of ``allowed`` ``[B, L, S]``: each row's (dim −1) or column's (dim −2) first
    allowed index and last one + 1; (n, 0) where none is allowed."""
    n = allowed.shape[dim]
    as_bytes = allowed.view(torch.uint8)  # argmax gives the first maximal index
    some = allowed.any(dim)
    first = torch.where(some, as_bytes.argmax(dim), n)
    last = torch.where(some, n - as_bytes.flip(dim).argmax(dim), 0)
    return first, last


def _tile_bounds(first, last, n: int, tile: int, align: int) -> torch.Tensor:
    """``[B, tiles, 2]`` int32: per tile of ``tile`` consecutive rows, the smallest first index
    (rounded down to a multiple of ``align``, the step of the kernel's loop) and the largest
    last, indices being < n; an empty range (start ≥ end) where no row of the tile allows
    anything."""
    bsz, rows = first.shape
    pad = -rows % tile
    first = F.pad(first, (0, pad), value=n)  # a missing row allows nothing
    last = F.pad(last, (0, pad), value=0)
    start = first.view(bsz, -1, tile).amin(-1) // align * align
    end = last.view(bsz, -1, tile).amax(-1)
    return torch.stack([start, end], dim=-1).to(torch.int32).contiguous()


def tile_ranges(mask, tiles: dict) -> dict[str, torch.Tensor]:
    """What each kernel's program loops over under a mask: for the forward and dQ kernels (one
    program per query tile) the keys, for the dK/dV kernel (one per key tile) the query rows, each
    the span of the tiles that hold an allowed (row, key) of the program's tile. Causal masks
    skip the tiles above the diagonal, with left padding (generation's prompts) the padding's
    rows and keys too, with right padding (training's batches) the padding's keys; a skipped
    tile holds no allowed pair, so its probabilities are all 0 and nothing changes."""
    allowed = mask[:, 0]
    n_q, n_k = allowed.shape[1:]
    row_first, row_last = _allowed_bounds(allowed, -1)
    col_first, col_last = _allowed_bounds(allowed, -2)
    ranges = {}
    for name in ("forward", "q"):
        block_m, block_n = tiles[name][:2]
        ranges[name] = _tile_bounds(row_first, row_last, n_k, block_m, block_n)
    block_m, block_n = tiles["kv"][:2]
    ranges["kv"] = _tile_bounds(col_first, col_last, n_q, block_n, block_m)
    return ranges
