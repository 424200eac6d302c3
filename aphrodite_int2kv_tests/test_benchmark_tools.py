"""Helpers the GPU benchmarks share (benchmarks/decode_attention.py), checked on CPU."""
import math

import pytest

from benchmarks.decode_attention import ragged_lengths, window_pages


@pytest.mark.parametrize("batch,max_len,R,wbs", [(3, 1000, 128, 48), (2, 100, 128, 48), (1, 48, 1, 48), (4, 4096, 96, 48)])
def test_window_pages_give_the_last_R_positions_their_own_pages(batch, max_len, R, wbs):
    """Every logical window block holding one of a sequence's last R positions points at a page of
    its own (no two sequences or blocks share one, page 0 excluded); blocks more than one before
    them point at page 0."""
    k_win, v_win, table, r = window_pages(batch, max_len, 2, 64, R, wbs, device="cpu")
    assert r == R and k_win.shape == v_win.shape and k_win.shape[1:] == (wbs, 2, 64)
    nlog = math.ceil(max_len / wbs)
    assert tuple(table.shape) == (batch, nlog)
    first = max(0, max_len - R) // wbs          # first logical block holding a window position
    used = table[:, first:]
    assert (used >= 1).all() and (used < k_win.shape[0]).all()
    assert used.flatten().unique().numel() == used.numel()
    assert (table[:, :max(0, first - 1)] == 0).all()


@pytest.mark.parametrize("S,B", [(32768, 11), (4096, 2), (131072, 64), (1000, 1)])
def test_ragged_lengths_spread_around_the_mean(S, B):
    """decode_ab --ragged / e2e_throughput --mixed: B lengths from S/8 to 15S/8, evenly spaced, mean
    S (within rounding), the same for the same (S, B), shuffled."""
    lens = ragged_lengths(S, B)
    assert len(lens) == B and lens == ragged_lengths(S, B)
    assert abs(sum(lens) / B - S) <= 1
    if B > 1:
        assert min(lens) == round(S / 8) and max(lens) == round(15 * S / 8)
        steps = sorted(lens)
        assert max(b - a for a, b in zip(steps, steps[1:])) - min(b - a for a, b in zip(steps, steps[1:])) <= 1


def test_decode_timeline_patches_the_kernels_it_traces():
    """benchmarks/decode_timeline.py stamps a copy of the kernels at text anchors of their source
    (each must occur once): a kernel edit that moves an anchor stops the GPU run, so catch it here.
    The traced copy imports, holds every stamp, and the product's kernels are untouched."""
    import inspect

    from benchmarks.decode_timeline import traced_package
    from aphrodite_int2kv.kernels import decode, folded

    traced = traced_package(0, 0)
    split = inspect.getsource(traced._int2_decode_split_kernel.fn)
    merge = inspect.getsource(traced._int2_decode_merge_kernel.fn)
    span = inspect.getsource(inspect.getmodule(traced.folded_span.fn).folded_span.fn)
    assert "t_entry = _now(program)" in split and "_smid(program)" in split
    assert "t_wait = _now(batch)" in merge and "tl.store(trace + 2, _now(batch))" in merge
    assert "t_first = tl.where(n0 == lo, _now(n0), t_first)" in span
    assert "_now(" not in inspect.getsource(decode) and "_now(" not in inspect.getsource(folded)


def test_decode_floor_replaces_only_the_tile():
    """benchmarks/decode_floor.py (and decode_timeline.py --floor) swap the folded tile for one
    that keeps a fraction of its math; the rest of the launch, the timeline's stamps included, is
    the shipped one, and the product's tile is untouched."""
    import inspect

    from benchmarks.decode_timeline import traced_package
    from aphrodite_int2kv.kernels import folded

    traced = traced_package(0, 0, floor=True)
    tiles = inspect.getmodule(traced.folded_span.fn)
    tile = inspect.getsource(tiles.int2_tile_folded.fn)
    span = inspect.getsource(tiles.folded_span.fn)
    assert "benchmarks/decode_floor.py: one of the tile" in tile and "tl.exp2" not in tile
    assert "t_first = tl.where(n0 == lo, _now(n0), t_first)" in span
    assert "tl.exp2" in inspect.getsource(folded.int2_tile_folded.fn)


@pytest.mark.parametrize("programs,block,words", [(3, 16, 96), (1, 64, 64), (5, 32, 301), (4, 16, 7)])
def test_read_floor_kernel_reads_every_word_once(programs, block, words):
    """benchmarks/read_floor.py's streaming read (its floor for a launch reading N bytes) must read
    each word of its buffer exactly once, shares uneven or not: per-program sums of distinct words
    match torch's over the same contiguous shares."""
    import torch

    from aphrodite_int2kv.kernels import interpreting
    if not interpreting():
        pytest.skip("CPU check under TRITON_INTERPRET=1 (the GPU runs it in read_floor.py itself)")
    from benchmarks.read_floor import read_once

    src = torch.arange(words, dtype=torch.int32)
    out = torch.full((programs,), -1, dtype=torch.int32)
    read_once(src, out, programs, block, warps=1, stages=1)
    share = -(-words // programs)
    assert out.tolist() == [int(src[p * share:(p + 1) * share].sum()) for p in range(programs)]
