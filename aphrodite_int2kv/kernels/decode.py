"""Split-KV paged decode over the int2 cache, grouped for GQA.

Stage 1 (`_int2_decode_split_kernel`), grid (num_programs, num_kv_heads * TILES): the batch's int2
tiles (BLOCK_N positions of one sequence, or SHORT_N where the shares are short: share_tiles),
concatenated in batch order, are dealt evenly to the num_programs programs of each head tile, so
every program reads the same number of tiles (+-1)
whatever the mix of sequence lengths (with fewer tiles than programs, one tile each to the first
ones: `first_tile`); a share that crosses from one sequence into the next writes one partial result
for each (per query head, program p's for sequence b at slot p + b: unique, since a program's
sequences are consecutive). A program reads its KV head's tokens once, for a tile of BLOCK_H
query heads *of that KV head's group*. Head mapping, valid for every ratio of query to KV heads:

    kv_head  = pid1 // TILES                  TILES = cdiv(RATIO, BLOCK_H)
    in_group = (pid1 % TILES) * BLOCK_H + arange(BLOCK_H)
    q_head   = kv_head * RATIO + in_group     masked where in_group >= RATIO

so a tile never straddles two KV groups (aphrodite's grouped Triton decode derives the KV head
from the tile index alone and gets this wrong when RATIO > BLOCK_H and RATIO % BLOCK_H != 0).

The tail (`_int2_decode_tail_kernel`), same head mapping: the positions stage 1 leaves out, the
recent window in full precision and the uncentered K-centering sinks, in short programs of their
own (stage 1 reads int2 positions [sinks, L - R) only, so it carries neither's code nor latency).

Stage 2 (`_int2_decode_merge_kernel`), grid (batch, num_q_heads): log-sum-exp merge of the split
programs' and the tail's partial results for the sequence. Queries come in, and outputs go out, in the rotated basis (the caller rotates).
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from aphrodite_int2kv.int2.format import LLOYD_MAX_LEVELS, SlotLayout, default_group_size, slot_bytes
from aphrodite_int2kv.kernels import interpreting
from aphrodite_int2kv.kernels.common import (LOG2E, empty_state, group_heads, int2_span, next_page, query_dot_center,
                                             query_planes, window_span)
from aphrodite_int2kv.kernels.folded import folded_span, query_codes, store_partial_pairs
from aphrodite_int2kv.kernels.limits import H200, DeviceLimits, device_limits


# Integer arguments that follow the batch size (split and slot counts) or the configuration are
# not specialized: Triton would otherwise compile a new variant whenever one of them happens to be
# 1 or a multiple of 16, i.e. at the first decode of some batch size, which in the engine is often a
# mixed prefill + decode step that no CUDA-graph capture warmed up (measured on the H200: a 2-3 s
# stall in the first decode pass after start-up).
_RUNTIME_INTS = ["num_programs", "num_slots", "batch_size", "tail_base", "head_len", "window_len"]


@triton.jit(do_not_specialize=_RUNTIME_INTS)
def _int2_decode_split_kernel(
    q_ptr, stride_qb, stride_qh,                 # [B, Hq, D] rotated queries
    cache_u8, cache_f16,                         # paged cache, uint8 and fp16 views
    stride_cb, stride_cs, stride_ch,             # uint8 strides of [blocks, block_size, Hkv, slot]
    block_table_ptr, stride_bt,                  # [B, max_blocks] int32
    seq_lens_ptr,                                # [B] int32
    part_out_ptr, part_lse_ptr,                  # [Hq, num_slots, D] fp32, [Hq, num_slots] fp32
    qk_scale,                                    # softmax scale * log2(e)
    num_programs, num_slots, batch_size,         # runtime: one compiled kernel serves every batch and grid
    head_len, window_len,                        # runtime: tokens left to the tail kernel
    BLOCK_SIZE: tl.constexpr, D: tl.constexpr, G: tl.constexpr,
    RATIO: tl.constexpr, TILES: tl.constexpr, NUM_Q_HEADS: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    OFF_V: tl.constexpr, OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr,
    OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr,
    LLOYD: tl.constexpr, L0: tl.constexpr, L1: tl.constexpr, L2: tl.constexpr, L3: tl.constexpr,
    DOT: tl.constexpr, FAST: tl.constexpr,
    UPSTREAM_HEAD_MAP: tl.constexpr = False,     # test hook: aphrodite's buggy mapping, see below
    FOLD: tl.constexpr = False,                  # the folded tile (folded.py): uniform levels; 2: rows on M
    TABLE_AHEAD: tl.constexpr = False,           # block-table entries a tile ahead (common.py)
    ODD_SHIFT: tl.constexpr = 0,                 # SlotLayout.odd_shift (docs/format.md, "odd slots")
    PDL: tl.constexpr = False,                   # the merge is launched as a dependent grid (int2_decode)
    AFTER_TAIL: tl.constexpr = False,            # this launch is the tail launch's dependent
    SHORT_N: tl.constexpr = 0,                   # > 0: short shares in tiles of SHORT_N (share_tiles)
    SHORT_UNITS: tl.constexpr = 0,
    TILE_MAJOR: tl.constexpr = False,            # grid (TILES, num_programs, Hkv): see int2_decode
):
    if PDL:
        # lets the merge's programs start as this launch's programs finish (they wait in
        # gdc_wait for all of it): its launch and prologue run under this launch's last programs
        gdc_launch_dependents()
    if TILE_MAJOR:
        program = tl.program_id(1)
        kv_head, q_head, hmask = group_heads(tl.program_id(2) * TILES + tl.program_id(0), RATIO, TILES, BLOCK_H)
    elif UPSTREAM_HEAD_MAP:
        program = tl.program_id(0)
        # The mapping of aphrodite's _fwd_grouped_kernel_stage1, kept only so the tests can show
        # that they catch it (48 q / 2 kv heads: q head 24 reads KV head 0).
        VALID: tl.constexpr = BLOCK_H if RATIO > BLOCK_H else RATIO
        kv_head = tl.program_id(1) // TILES
        q_head = tl.program_id(1) * VALID + tl.arange(0, BLOCK_H)
        hmask = (q_head < (tl.program_id(1) + 1) * VALID) & (q_head < NUM_Q_HEADS)
    else:
        program = tl.program_id(0)
        kv_head, q_head, hmask = group_heads(tl.program_id(1), RATIO, TILES, BLOCK_H)

    # This launch reads int2 positions [lo, int2_len) of each sequence only (int2_positions): the
    # first head_len positions (uncentered sinks) and the last window_len (the full-precision recent
    # window) are read by the tail kernel, so no int2 program carries their code or their latency.
    # The batch's int2 tiles, concatenated in batch order, are dealt evenly to the num_programs
    # programs of this head tile; a program's share may span sequences (one partial result each).
    # Short shares (SHORT_N > 0): the wave lasts as long as its largest share, a whole tile over
    # the mean when programs hold few tiles (32K, batch 8: 10.45 tiles of 64 on average, the
    # largest 11). Where the shares average at most SHORT_UNITS tiles of SHORT_N (and at least
    # one), the launch deals tiles of SHORT_N instead (share_tiles): the same decision in every
    # program and in the merge.
    if SHORT_N > 0:
        total, short, _ = share_tiles(seq_lens_ptr, batch_size, num_programs, 0, head_len, window_len,
                                      BLOCK_N, SHORT_N, SHORT_UNITS)
        unit = tl.where(short, SHORT_N, BLOCK_N)
    else:
        total, _, _ = batch_tiles(seq_lens_ptr, batch_size, -1, 0, head_len, window_len, BLOCK_N)
        short = False       # a constexpr: only the BLOCK_N loop below is compiled
        unit = BLOCK_N
    TILE_SHORT: tl.constexpr = SHORT_N if SHORT_N > 0 else BLOCK_N
    t0 = first_tile(program, total, num_programs)
    t1 = first_tile(program + 1, total, num_programs)
    _, batch, first = batch_tiles(seq_lens_ptr, batch_size, t0, 0, head_len, window_len, BLOCK_N, SHORT_N, short)
    while first < t1:
        lo, base, int2_len, n_tiles = int2_positions(tl.load(seq_lens_ptr + batch), head_len, window_len,
                                                     BLOCK_N, SHORT_N, short)
        seg0 = tl.maximum(t0, first) - first
        seg1 = tl.minimum(t1, first + n_tiles) - first
        if seg1 > seg0:
            # tiles start on multiples of their length, positions below lo masked: a tile then
            # never crosses a page when its length divides the page size (common.py load_tile)
            start = base + seg0 * unit
            end = tl.minimum(base + seg1 * unit, int2_len)
            row = q_head * num_slots + program + batch
            table_row = block_table_ptr + batch * stride_bt
            if short:
                split_partial(q_ptr, stride_qb, stride_qh, batch, kv_head, q_head, hmask, start, end, lo, table_row,
                              kv_head * stride_ch, stride_cb, stride_cs, cache_u8, cache_f16, part_out_ptr,
                              part_lse_ptr, row, qk_scale, BLOCK_SIZE, D, G, BLOCK_H, TILE_SHORT, OFF_V, OFF_KS,
                              OFF_KZ, OFF_VS, OFF_VZ, LLOYD, L0, L1, L2, L3, DOT, FAST, FOLD, TABLE_AHEAD, ODD_SHIFT)
            else:
                split_partial(q_ptr, stride_qb, stride_qh, batch, kv_head, q_head, hmask, start, end, lo, table_row,
                              kv_head * stride_ch, stride_cb, stride_cs, cache_u8, cache_f16, part_out_ptr,
                              part_lse_ptr, row, qk_scale, BLOCK_SIZE, D, G, BLOCK_H, BLOCK_N, OFF_V, OFF_KS,
                              OFF_KZ, OFF_VS, OFF_VZ, LLOYD, L0, L1, L2, L3, DOT, FAST, FOLD, TABLE_AHEAD, ODD_SHIFT)
        first += n_tiles
        batch += 1
    if AFTER_TAIL:
        # launched while the tail launch runs (its programs overlap this launch's start): this
        # launch completes after it, so the merge, which waits for this launch, waits for both
        gdc_wait()


@triton.jit
def split_partial(q_ptr, stride_qb, stride_qh, batch, kv_head, q_head, hmask, start, end, lo, table_row, head_off,
                  stride_cb, stride_cs, cache_u8, cache_f16, part_out_ptr, part_lse_ptr, row, qk_scale,
                  BLOCK_SIZE: tl.constexpr, D: tl.constexpr, G: tl.constexpr, BLOCK_H: tl.constexpr,
                  BLOCK_N: tl.constexpr, OFF_V: tl.constexpr, OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr,
                  OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr, LLOYD: tl.constexpr, L0: tl.constexpr,
                  L1: tl.constexpr, L2: tl.constexpr, L3: tl.constexpr, DOT: tl.constexpr, FAST: tl.constexpr,
                  FOLD: tl.constexpr, TABLE_AHEAD: tl.constexpr, ODD_SHIFT: tl.constexpr):
    """One sequence's positions [start, end) (masked below lo) for one head tile, its partial
    result written to slot rows `row` [BLOCK_H]."""
    W: tl.constexpr = D // 4
    SEG: tl.constexpr = W if G > W else G
    NG: tl.constexpr = D // G
    if FOLD:
        # The first tile's block-table entries are loaded before the query, so that the two loads
        # can be in flight together (a program's start is a chain of loads: lengths -> query ->
        # table -> pages). On the H200 the first tiles finished no earlier for it (a per-program
        # timeline); the launch took 0.96-1.009x the time (32K batch 8: 0.992x), so it is kept as
        # harmless, not as a measured gain.
        page_first = next_page(table_row, start, end, tl.arange(0, BLOCK_N), BLOCK_SIZE, BLOCK_N, TABLE_AHEAD)
        # the folded tile takes q as int8 codes times a scale per row, softmax scale included
        q0, q1, q2, q3, qscale = query_codes(q_ptr, batch, stride_qb, q_head, stride_qh, hmask, W, qk_scale)
        m_i, l_i, e0, o0, e1, o1, e2, o2, e3, o3, zs = folded_span(
            q0, q1, q2, q3, qscale, start, end, lo, page_first, table_row, head_off, stride_cb, stride_cs, cache_u8,
            cache_f16, BLOCK_SIZE, BLOCK_H, BLOCK_N, W, G, NG,
            OFF_V, OFF_KS, OFF_KZ, OFF_VS, OFF_VZ, DOT, FAST, TABLE_AHEAD, ODD_SHIFT, FOLD == 2)
        if FOLD == 2:   # rows on M: the state as [ROWS, W/2] and [ROWS, NG]
            store_partial_pairs(part_out_ptr, part_lse_ptr, row, hmask, m_i, l_i, tl.trans(e0), tl.trans(o0),
                                tl.trans(e1), tl.trans(o1), tl.trans(e2), tl.trans(o2), tl.trans(e3), tl.trans(o3),
                                tl.trans(zs), D, W, G, NG, FAST)
        else:
            store_partial_pairs(part_out_ptr, part_lse_ptr, row, hmask, m_i, l_i, e0, o0, e1, o1, e2, o2, e3, o3,
                                zs, D, W, G, NG, FAST)
    else:
        q0, q1, q2, q3 = query_planes(q_ptr, batch, stride_qb, q_head, stride_qh, hmask, W, DOT)
        m_i, l_i, acc0, acc1, acc2, acc3 = empty_state(BLOCK_H, W)
        m_i, l_i, acc0, acc1, acc2, acc3 = int2_span(
            m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, start, end, lo, table_row, head_off,
            stride_cb, stride_cs, cache_u8, cache_f16, qk_scale, l_i, BLOCK_SIZE, BLOCK_H, BLOCK_N, W, G, NG, SEG,
            OFF_V, OFF_KS, OFF_KZ, OFF_VS, OFF_VZ, LLOYD, L0, L1, L2, L3, DOT, FAST, 0, TABLE_AHEAD, ODD_SHIFT)
        store_partial(part_out_ptr, part_lse_ptr, row, hmask, m_i, l_i, acc0, acc1, acc2, acc3, D, W)


@triton.jit(do_not_specialize=_RUNTIME_INTS)
def _int2_decode_tail_kernel(
    q_ptr, stride_qb, stride_qh,                 # [B, Hq, D] rotated queries
    cache_u8, cache_f16, stride_cb, stride_cs, stride_ch, block_table_ptr, stride_bt,
    seq_lens_ptr, part_out_ptr, part_lse_ptr, qk_scale,
    num_slots, tail_base,                        # runtime: slots per query head / the tail's first
    head_len, window_len,
    cen_ptr, stride_cenb, stride_cenh,           # [B or 1, Hkv, D] fp32 rotated K offsets (SINKS > 0)
    wk_ptr, wv_ptr, stride_wb, stride_ws, stride_wh,   # recent window: paged [blocks, WBS, Hkv, D] K / V
    wbt_ptr, stride_wbt,                         # its block table [B, max_blocks] (logical block -> page)
    BLOCK_SIZE: tl.constexpr, D: tl.constexpr, G: tl.constexpr,
    RATIO: tl.constexpr, TILES: tl.constexpr, NUM_Q_HEADS: tl.constexpr,
    BLOCK_H: tl.constexpr, TAIL_N: tl.constexpr,
    OFF_V: tl.constexpr, OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr,
    OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr,
    LLOYD: tl.constexpr, L0: tl.constexpr, L1: tl.constexpr, L2: tl.constexpr, L3: tl.constexpr,
    DOT: tl.constexpr, FAST: tl.constexpr, SINKS: tl.constexpr, WBS: tl.constexpr,
    ODD_SHIFT: tl.constexpr = 0,
    PDL: tl.constexpr = False,                   # the split launch is this launch's dependent
):
    """The *tail*: the positions the split launch leaves out, a few dozen per sequence. Grid
    (batch, num_kv_heads * TILES, window programs [+ 1]): window program w reads the recent-window
    positions [int2_len + w * TAIL_N, + TAIL_N) in full precision (so the window costs the latency
    of one short tile, not of R / TAIL_N tiles in a row); the last program, when SINKS > 0, reads
    the uncentered sinks [0, min(head_len, int2_len)) from int2 with their -q.c. Partial results go
    to slots tail_base + batch * tails + program, merged with the splits' by the merge kernel."""
    if PDL:
        gdc_launch_dependents()     # the split launch may start (it waits for this one at its end)
    W: tl.constexpr = D // 4
    SEG: tl.constexpr = W if G > W else G
    NG: tl.constexpr = D // G
    batch = tl.program_id(0)
    kv_head, q_head, hmask = group_heads(tl.program_id(1), RATIO, TILES, BLOCK_H)
    tail = tl.program_id(2)
    tails = tl.num_programs(2)
    window_programs = tails - (1 if SINKS > 0 else 0)

    seq_len = tl.load(seq_lens_ptr + batch)
    int2_len = tl.maximum(seq_len - window_len, 0)
    q0, q1, q2, q3 = query_planes(q_ptr, batch, stride_qb, q_head, stride_qh, hmask, W, DOT)
    m_i, l_i, acc0, acc1, acc2, acc3 = empty_state(BLOCK_H, W)
    if SINKS > 0:   # the uncentered sinks' score correction, in the int2 cache and in the window
        qc = query_dot_center(q0, q1, q2, q3, cen_ptr + batch * stride_cenb + kv_head * stride_cenh, W)
    else:
        qc = tl.zeros([BLOCK_H], tl.float32)
    if SINKS > 0 and tail == window_programs:
        m_i, l_i, acc0, acc1, acc2, acc3 = int2_span(
            m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, 0, tl.minimum(head_len, int2_len), 0,
            block_table_ptr + batch * stride_bt, kv_head * stride_ch, stride_cb, stride_cs, cache_u8, cache_f16,
            qk_scale, qc, BLOCK_SIZE, BLOCK_H, TAIL_N, W, G, NG, SEG,
            OFF_V, OFF_KS, OFF_KZ, OFF_VS, OFF_VZ, LLOYD, L0, L1, L2, L3, DOT, FAST, SINKS, ODD_SHIFT=ODD_SHIFT)
    else:
        # the last window program takes whatever is left (robust to any R / TAIL_N)
        lo = int2_len + tail * TAIL_N
        hi = seq_len if tail == window_programs - 1 else tl.minimum(lo + TAIL_N, seq_len)
        m_i, l_i, acc0, acc1, acc2, acc3 = window_span(
            m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, lo, hi,
            wbt_ptr + batch * stride_wbt, kv_head * stride_wh, stride_wb, stride_ws, wk_ptr, wv_ptr,
            qk_scale, qc, WBS, 0, BLOCK_H, TAIL_N, W, DOT, SINKS)
    store_partial(part_out_ptr, part_lse_ptr, q_head * num_slots + tail_base + batch * tails + tail,
                  hmask, m_i, l_i, acc0, acc1, acc2, acc3, D, W)


@triton.jit
def int2_positions(seq_len, head_len, window_len, BLOCK_N: tl.constexpr, SHORT_N: tl.constexpr = 0, short=False):
    """A sequence's part in the split launch: (lo, base, int2_len, tiles). It reads positions
    [lo, int2_len) (the sinks before lo and the window after int2_len are the tail's) in tiles of
    BLOCK_N -- of SHORT_N where `short` (share_tiles) -- from base, lo rounded down to a tile."""
    int2_len = tl.maximum(seq_len - window_len, 0)
    lo = tl.minimum(head_len, int2_len)
    if SHORT_N > 0:
        base = tl.where(short, (lo // SHORT_N) * SHORT_N, (lo // BLOCK_N) * BLOCK_N)
        n = tl.where(short, tl.cdiv(int2_len - base, SHORT_N), tl.cdiv(int2_len - base, BLOCK_N))
        return lo, base, int2_len, n
    base = (lo // BLOCK_N) * BLOCK_N
    return lo, base, int2_len, tl.cdiv(int2_len - base, BLOCK_N)


@triton.jit
def share_tiles(seq_lens_ptr, batch_size, num_programs, upto_seq, head_len, window_len, BLOCK_N: tl.constexpr,
                SHORT_N: tl.constexpr, SHORT_UNITS: tl.constexpr):
    """(total, short, tiles_done): the batch's int2 tiles the num_programs programs share, whether
    they are tiles of SHORT_N -- where the mean share is 1 to SHORT_UNITS of them -- or of BLOCK_N,
    and the tiles of the first `upto_seq` sequences. Computed alike by every split program and by
    the merge, from the lengths alone, in one pass (a second pass over the lengths cost the short
    batches ~1 us: a load latency)."""
    if SHORT_N > 0:
        total = 0
        units = 0
        done = 0
        units_done = 0
        for c0 in range(0, batch_size, 64):
            seqs = c0 + tl.arange(0, 64)
            seq_len = tl.load(seq_lens_ptr + seqs, mask=seqs < batch_size, other=0)
            _, _, _, n = int2_positions(seq_len, head_len, window_len, BLOCK_N)
            _, _, _, u = int2_positions(seq_len, head_len, window_len, SHORT_N)
            before = seqs < upto_seq
            total += tl.sum(n, 0)
            units += tl.sum(u, 0)
            done += tl.sum(tl.where(before, n, 0), 0)
            units_done += tl.sum(tl.where(before, u, 0), 0)
        short = (units >= num_programs) & (units <= SHORT_UNITS * num_programs)
        return tl.where(short, units, total), short, tl.where(short, units_done, done)
    total, _, done = batch_tiles(seq_lens_ptr, batch_size, -1, upto_seq, head_len, window_len, BLOCK_N)
    return total, False, done


@triton.jit
def first_tile(program, total, num_programs):
    """The first of the batch's `total` int2 tiles program p (of num_programs P) reads; it reads
    up to the next program's first. P > total: tile p (programs from `total` on read none, so
    every program a sequence's tiles span has some); else p * total // P, the inverse of
    tile_program."""
    dealt = ((program.to(tl.int64) * total) // num_programs).to(tl.int32)
    return tl.where(total < num_programs, tl.minimum(program, total), dealt)


@triton.jit
def tile_program(tile, total, num_programs):
    """The program holding tile `tile` of `total` (scalar): first_tile's inverse."""
    dealt = (((tile + 1).to(tl.int64) * num_programs - 1) // tl.maximum(total, 1)).to(tl.int32)
    return tl.where(total < num_programs, tile, dealt)


@triton.jit
def batch_tiles(seq_lens_ptr, batch_size, upto_tile, upto_seq, head_len, window_len, BLOCK_N: tl.constexpr,
                SHORT_N: tl.constexpr = 0, short=False):
    """The batch's int2 tiles concatenated in batch order: (total, done, tiles_done), where `done`
    counts the sequences whose tiles all come before tile `upto_tile` -- or, upto_tile < 0, the
    first `upto_seq` sequences -- and tiles_done is their tile count. With upto_tile = t, `done` is
    the sequence holding tile t and tiles_done its first tile. 64 sequences at a time. Tiles of
    BLOCK_N, or of SHORT_N where `short` (int2_positions)."""
    total = 0
    done = 0
    tiles_done = 0
    for c0 in range(0, batch_size, 64):
        seqs = c0 + tl.arange(0, 64)
        seq_len = tl.load(seq_lens_ptr + seqs, mask=seqs < batch_size, other=0)
        _, _, _, n = int2_positions(seq_len, head_len, window_len, BLOCK_N, SHORT_N, short)
        ends = total + tl.cumsum(n, 0)
        before = (seqs < batch_size) & ((ends <= upto_tile) | (seqs < upto_seq))
        done += tl.sum(before.to(tl.int32), 0)
        tiles_done += tl.sum(tl.where(before, n, 0), 0)
        total += tl.sum(n, 0)
    return total, done, tiles_done


@triton.jit(do_not_specialize=_RUNTIME_INTS)
def _int2_decode_merge_kernel(part_out_ptr, part_lse_ptr, seq_lens_ptr, num_programs, num_slots, batch_size,
                              tail_base, head_len, window_len, out_ptr, stride_ob, stride_oh,
                              D: tl.constexpr, CHUNK: tl.constexpr, BLOCK_N: tl.constexpr, DC: tl.constexpr,
                              PDL: tl.constexpr = False, SHORT_N: tl.constexpr = 0, SHORT_UNITS: tl.constexpr = 0):
    """Grid (batch, num_q_heads, D // DC): log-sum-exp merge of a row's partial results, CHUNK slots at a
    time (slot i holds out_i = acc_i / l_i and lse_i = m_i + log2(l_i), so it enters the running
    softmax state with weight exp2(lse_i - m)). It reads the slots the split programs holding the
    sequence's tiles wrote (program p's at p + batch) and the tail's (tail_base + batch * tails)."""
    batch = tl.program_id(0)
    head = tl.program_id(1)
    # program (b, h, c) merges columns [c * DC, (c + 1) * DC) of the row: the merge is latency-bound
    # (it starts once the split launch's last program ends), and fewer columns per program give
    # each fewer loads and a shorter reduction
    dims = tl.program_id(2) * DC + tl.arange(0, DC)
    row = head * num_slots
    total, short, first = share_tiles(seq_lens_ptr, batch_size, num_programs, batch, head_len, window_len,
                                      BLOCK_N, SHORT_N, SHORT_UNITS)      # the split launch's tiles
    _, _, _, n_tiles = int2_positions(tl.load(seq_lens_ptr + batch), head_len, window_len, BLOCK_N, SHORT_N, short)
    # The sequence's tiles are in programs p_lo..p_hi, each of which has some (first_tile). Scalar
    # divisions only: a vector of 64-bit ones compiles to a call per element (measured: 255
    # registers, spills, a 3.5x slower merge).
    p_lo = tile_program(first, total, num_programs)
    p_hi = tile_program(first + n_tiles - 1, total, num_programs)
    used = tl.where(n_tiles > 0, p_hi - p_lo + 1, 0)
    tails = (num_slots - tail_base) // batch_size
    count = used + tails
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.zeros([], tl.float32)
    acc = tl.zeros([DC], tl.float32)
    if PDL:
        gdc_wait()      # launched as a dependent grid: the split programs' results are complete from here
    for c0 in range(0, count, CHUNK):
        k = c0 + tl.arange(0, CHUNK)
        smask = k < count
        slots = tl.where(k < used, p_lo + batch + k, tail_base + batch * tails + k - used)
        lse = tl.load(part_lse_ptr + row + slots, mask=smask, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(lse, axis=0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m - m_safe)
        w = tl.exp2(lse - m_safe)
        # every slot read was written (first_tile): the parts load need not wait for the lse's
        parts = tl.load(part_out_ptr + (row + slots)[:, None] * D + dims[None, :], mask=smask[:, None], other=0.0)
        acc = acc * alpha + tl.sum(parts * w[:, None], axis=0)
        l = l * alpha + tl.sum(w, axis=0)
        m = m_new
    out = acc / tl.where(l > 0, l, 1.0)                # a sequence of length 0: all slots empty, zeros
    tl.store(out_ptr + batch * stride_ob + head * stride_oh + dims, out.to(out_ptr.dtype.element_ty))


@triton.jit
def store_partial(part_out_ptr, part_lse_ptr, row, hmask, m_i, l_i, acc0, acc1, acc2, acc3,
                  D: tl.constexpr, W: tl.constexpr):
    """Write one program's partial result to slot rows `row` [BLOCK_H]: the normalized output and
    the log2-sum-exp (-inf, zeros where the program saw no token)."""
    cols = tl.arange(0, W)
    has = l_i > 0
    inv_l = tl.where(has, 1.0 / tl.where(has, l_i, 1.0), 0.0)
    out_rows = part_out_ptr + row[:, None] * D + cols[None, :]
    tl.store(out_rows + 0 * W, acc0 * inv_l[:, None], mask=hmask[:, None])
    tl.store(out_rows + 1 * W, acc1 * inv_l[:, None], mask=hmask[:, None])
    tl.store(out_rows + 2 * W, acc2 * inv_l[:, None], mask=hmask[:, None])
    tl.store(out_rows + 3 * W, acc3 * inv_l[:, None], mask=hmask[:, None])
    lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    tl.store(part_lse_ptr + row, lse, mask=hmask)


def dot_dtype(activation_dtype: torch.dtype):
    # fp16 operands on the GPU: codes/levels are exact or near-exact in fp16, and fp16 keeps 3 more
    # mantissa bits than bf16 for q and p*scale. The interpreter only multiplies fp32/fp16 right.
    return tl.float32 if interpreting() else tl.float16


def pick_num_splits(batch: int, programs_per_seq: int, max_seq_len: int, num_sms: int = 132,
                    max_splits: int = 64, min_tokens_per_split: int = 256) -> int:
    """Enough programs to fill the GPU about twice, never splits shorter than min_tokens.
    (Used for aphrodite's own bf16 decode in the benchmark; int2 uses decode_launch_config.)"""
    want = -(-2 * num_sms // max(1, batch * programs_per_seq))
    cap = max(1, max_seq_len // min_tokens_per_split)
    return max(1, min(want, cap, max_splits))


def block_h_for(ratio: int, head_dim: int) -> int:
    """Query-head tile: the whole group when it has <= 8 heads (tl.dot pads M to the tensor-core
    tile, but softmax and accumulators stay at 8 rows), else 16; at head_dim 128, 32 when the
    whole group fits (ratios 17..32: each page read once per KV head, in two-warp programs,
    split_warps). At head_dim 256 a one-warp 32-row tile spills 2552 B per thread, a 16-row one 520
    (benchmarks/sass_report.py, triton 3.9): two tiles of 16 there. At head_dim 64 the two-warp 32-row tile
    spills on sm_120 (kernels/aot.py): tiles of 16. Timed: benchmarks/results/decode_gqa_d*_h{100,200}.json."""
    if ratio <= 8:
        return 8
    if ratio <= 16 or ratio > 32 or head_dim != 128:
        return 16
    return 32


def split_warps(head_dim: int, block_h: int) -> int:
    """Warps per split program: one (no cross-warp softmax reductions), two for the 32-row tile,
    whose one-warp form spills (sass_report.py: 1112 B at head_dim 128)."""
    return 2 if block_h >= 32 else 1


@dataclasses.dataclass(frozen=True)
class DecodeLaunch:
    num_splits: int
    block_n: int
    num_warps: int
    num_stages: int
    block_h: int
    table_ahead: bool = False
    fold: bool = True        # the tile (folded or per-code): table_ahead was chosen for it
    maxnreg: int | None = None
    chain_tail: bool = False
    short_n: int = 0         # launches with short shares read tiles of short_n (int2_decode)
    short_units: int = 0     # up to this many of them per program on average
    merge_split: int = 1     # merge programs per query row (int2_decode)
    merge_warps: int = 4
    tile_major: bool = False  # head tiles of a KV head side by side in the grid (int2_decode)
    rows_on_m: bool = False   # the folded tile with the query rows on the MMA's M (folded.int2_tile_rows)
    partial_dtype: torch.dtype = torch.float32   # the split programs' partial outputs (int2_decode)

    def kwargs(self) -> dict:
        """int2_decode's launch arguments (all but num_splits), the tile included."""
        return dict(block_n=self.block_n, num_warps=self.num_warps, num_stages=self.num_stages,
                    block_h=self.block_h, table_ahead=self.table_ahead, fold=self.fold, maxnreg=self.maxnreg,
                    chain_tail=self.chain_tail, short_n=self.short_n, short_units=self.short_units,
                    merge_split=self.merge_split, merge_warps=self.merge_warps, tile_major=self.tile_major,
                    rows_on_m=self.rows_on_m, partial_dtype=self.partial_dtype)


# The split tile's registers per thread (benchmarks/sass_report.py; the ahead-of-time check, aot.py,
# compiles each tile for every target GPU and fails where one takes more than planned here) and how
# many waves of resident programs its grid holds: the folded 8-head tile at head_dim 128 takes 168
# (capped: decode_launch_config), the per-code tile and 16-head tiles 255, head_dim 64 up to 194
# for 8 heads (sm_86 / 89 / 120; 192 on sm_90: ten programs per multiprocessor, one wave), 237 for
# 16. One wave where the programs share the batch's tiles evenly (a second no longer balances ragged
# lengths: one wave was 2-9 % faster at 4K-32K, batch 8-32, 1-2 % slower at 128K, batch 32-64); two
# for the 255-register tiles at head_dim 128, as tuned.
def split_registers(head_dim: int, block_h: int, fold: bool) -> tuple[int, int]:
    """(registers per thread, waves) of the split launch's programs (split_warps warps each)."""
    if block_h >= 32:
        return 255, 1       # two-warp 32-row programs: four per multiprocessor on the H200, one wave
    if head_dim <= 64:
        # the 16-row tile takes 224-237 (aot.py): 8 programs per multiprocessor on the H200
        return (200, 1) if block_h <= 8 else (255, 1)
    if head_dim <= 128:
        # the 16-row rows-on-M tile (rows_on_m) takes 247: one wave of 8 (two waves of it, 16
        # programs per multiprocessor, took 1.02-1.28x the time at ratios 12-16 with 1-2 KV heads:
        # twice the partial results to write and merge, H100, benchmarks/decode_ab.py)
        return (168, 1) if fold and block_h <= 8 else (255, 1) if fold else (255, 2)
    return 255, 1


def split_shared(head_dim: int, group_size: int, block_n: int, num_stages: int, block_h: int) -> int:
    """Shared memory of one split program: its pipelined tiles of slots, and 1 KB of scratch for a
    two-warp program (the 32-row rows-on-M tile takes 512 B beyond its tiles at head_dim 128; the
    ahead-of-time check fails where a compiled tile takes more than this)."""
    scratch = 1024 if split_warps(head_dim, block_h) > 1 else 0
    return num_stages * block_n * slot_bytes(head_dim, group_size) + scratch


def split_block_n(head_dim: int) -> int:
    """Tokens per split tile: 64 at head_dim <= 128, 32 at 256 (decode_launch_config)."""
    return 64 if head_dim <= 128 else 32


def register_cap(head_dim: int, block_h: int, fold: bool) -> int | None:
    """The split launch's maxnreg (None: ptxas decides). The folded 8-head tile's loop needs 168
    registers; left to itself, ptxas gives the kernel 194 (the sequence loop around it: 10 programs
    per multiprocessor instead of 12); capped, it spills a few of that loop's values, none inside
    the tile loop (benchmarks/sass_report.py). At head_dim 64, left to itself, ptxas holds the tile
    to 168 registers and spills on sm_80 and sm_120 (16-24 B); allowed 255 it takes 178-194 and
    spills nothing (aot.py)."""
    if head_dim <= 64:
        return 255
    return 168 if fold and head_dim <= 128 and block_h <= 8 else None


SPLIT_STAGES = 3    # tiles of slots in flight per split program (Triton's pipeliner; split_shared)


def programs_per_sm(head_dim: int, block_h: int, fold: bool, limits: DeviceLimits = H200,
                    group_size: int | None = None, block_n: int | None = None,
                    num_stages: int = SPLIT_STAGES) -> int:
    """Split programs per multiprocessor: `waves` whole waves of the programs resident at once on
    `limits`' GPU, by registers (split_registers), warps (split_warps) and shared memory
    (split_shared). On the H200: 10 at head_dim 64, 12 for the folded 8-head tile at 128 (16
    otherwise), 8 at 256, 4 two-warp 32-row programs."""
    regs, waves = split_registers(head_dim, block_h, fold)
    smem = split_shared(head_dim, group_size or default_group_size(head_dim), block_n or split_block_n(head_dim),
                        num_stages, block_h)
    return waves * limits.resident(regs, split_warps(head_dim, block_h), smem)


# Split launches whose shares average at most this many positions (and at least 32) deal and read
# tiles of 32 at head_dim <= 128 (folded; int2_decode short_n). Tiles of 64 cost less per position,
# but the wave waits for the largest share, a tile over the mean. On the H200 (head_dim 128,
# against 64-token tiles, benchmarks/decode_ab.py): 0.87-0.98x the time at means of 2.6-21 tiles
# of 32 (4K-32K batch 8, 16K-128K batch 2); 1.006x at 31 (48K batch 8).
SHORT_SHARE = 768


@functools.lru_cache(maxsize=1024)      # called per layer and step with a handful of distinct shapes
def decode_launch_config(batch: int, num_kv_heads: int, ratio: int, head_dim: int,
                         num_sms: int | None = None, max_seq_len: int | None = None, fold: bool = True,
                         limits: DeviceLimits = H200, group_size: int | None = None) -> DecodeLaunch:
    """Launch shape of the split-KV decode, from the H200 sweeps in benchmarks/results/
    (launch-shape sweeps on the H200): one-warp programs (no cross-warp softmax reductions; two
    warps for the 32-row tile, split_warps) of 64 tokens at head_dim <= 128, of 32 tokens at
    head_dim 256 (17 % faster than two-warp programs of 64 there). The split count gives programs_per_sm programs per
    multiprocessor, *rounded down*: a grid just past a whole number of waves pays a whole extra
    program time (17 splits at batch 32 with 4 KV heads cost 13 % over 16 once the lengths divided
    evenly, at 8 programs per wave).
    Depends only on the batch and head shapes (not on sequence lengths) unless max_seq_len is
    given, so a CUDA graph captured for a batch size replays the same grid; the num_splits * batch
    programs of a head tile then share the batch's actual int2 tiles evenly (stage 1).
    table_ahead (block-table entries a tile ahead) where the H200 measured it faster with one page
    per tile (benchmarks/decode_ab.py, 32K and 128K, batch 8-64): the folded tile
    (1.01-1.10x at head_dim 128, 1.14-1.18x at 256) and the per-code tile at head_dim 256
    (1.06-1.09x; 0.98-1.00x at 128, left off)."""
    block_h = block_h_for(ratio, head_dim)
    tiles = -(-ratio // block_h)
    programs_per_split = max(1, batch * num_kv_heads * tiles)
    block_n = split_block_n(head_dim)
    per_sm = programs_per_sm(head_dim, block_h, fold, limits, group_size, block_n, SPLIT_STAGES)
    num_sms = limits.num_sms if num_sms is None else num_sms
    splits = per_sm * num_sms // programs_per_split
    if max_seq_len is not None:
        splits = min(splits, max(1, max_seq_len // 256))
    splits = max(1, min(splits, 256))
    table_ahead = fold or head_dim > 128
    # The split launch as the tail launch's dependent (int2_decode chain_tail) where its grid fills
    # the wave (no room for one more split). With the window of 128 chaining took 0.62-0.92x the
    # time at batch >= 2 (and 4K-32K batch 1), but 1.04-1.17x at 64K-128K batch 1, whose 256 splits
    # leave a third of the slots free (H200, benchmarks/decode_ab.py; why is not known):
    # batch 1 at 4 KV heads gives up its short-context gain for no long-context loss.
    chain_tail = (splits + 1) * programs_per_split > per_sm * num_sms
    # The merge starts once the split launch's last program ends; at 32K batch 8 it took ~3 us of
    # the launch's 46 after its wait (a per-program timeline of the launch). Where there are
    # few query rows to merge (batch x heads <= 256), 8 one-warp programs per row, each merging
    # head_dim / 8 columns: 0.92-0.98x the time at head_dim 128, batch 1-8, 0.81-0.98x at 256
    # (H200, benchmarks/decode_ab.py); at batch 32-64 it was up to 1.04x slower, so
    # those keep one 4-warp program per row.
    merge = dict(merge_split=min(8, head_dim // 16), merge_warps=1) if batch * num_kv_heads * ratio <= 256 else {}
    # Head tiles of >= 16 rows (ratios above 8) at head_dim >= 128 take the folded tile with the
    # query rows on the MMA's M (folded.int2_tile_rows): with the launch below, 0.79-0.93x the time of
    # the rows-on-N tile at ratios 12-32 with 1-2 KV heads (H100, benchmarks/decode_ab.py, 32K / 128K,
    # batch 8 / 32). At head_dim 256 its partial results go out as fp16 (0.86-0.99x again there:
    # 16 KB of fp32 per 16-row program; at 128 it gained nothing, 0.98-1.04x).
    rows = fold and block_h >= 16 and head_dim >= 128
    rows_kw = dict(rows_on_m=True, partial_dtype=torch.float16 if head_dim > 128 else torch.float32) if rows else {}
    if head_dim <= 128:
        cap = register_cap(head_dim, block_h, fold)
        # short shares in tiles of 32 (int2_decode short_n): at 32K, batch 8 the programs hold
        # 10.45 tiles of 64 on average and the wave waits for those with 11 (SHORT_SHARE)
        short = dict(short_n=32, short_units=SHORT_SHARE // 32) if fold else {}
        return DecodeLaunch(splits, block_n, split_warps(head_dim, block_h), SPLIT_STAGES, block_h, table_ahead,
                            fold, cap, chain_tail, **short, **merge, **rows_kw)
    return DecodeLaunch(splits, block_n, split_warps(head_dim, block_h), SPLIT_STAGES, block_h, table_ahead, fold,
                        None, chain_tail, **merge, **rows_kw)


TAIL_N = 32     # window tokens per tail program (and the sinks' tile)


def tail_slots(sinks: int, window_len: int) -> int:
    """Partial-result slots the tail kernel adds per sequence and query head (see int2_decode)."""
    return -(-window_len // TAIL_N) + (1 if sinks else 0)


def merge_chunk(num_splits: int, tail_programs: int, columns: int, warps: int = 4) -> int:
    """Slots the merge loads per step: about a uniform batch's slots per sequence (num_splits + 1 +
    the tail's), a power of two from 16 to 4096 * warps / columns, so that a step's [slots, columns]
    fp32 tile is at most 128 values per thread (its registers; `columns` = D / merge_split, `warps`
    = merge_warps). Each step of the merge loop costs about a load latency (~1.5 us on the H200: 9
    steps of 32 slots took 18.7 us at batch 1, 32K, where 3 steps of 128 took 5.4; the loop is not
    pipelined), and lanes beyond the slots cost registers and occupancy (batch 64: 12.4 us with
    32-slot steps, 21.6 with 128). A few variants per head_dim: the ones a CUDA-graph capture of
    batch sizes 1..max compiles."""
    want = triton.next_power_of_2(num_splits + 1 + tail_programs)
    return max(16, min(want, 4096 * warps // columns))


def partial_slots(num_splits: int, sinks: int, window_len: int) -> int:
    """Partial-result slots per sequence and query head: a workspace for int2_decode holds
    B * Hq * partial_slots(...) rows (num_splits programs per sequence, one more slot per
    sequence where a program's share crosses into the next, the tail's)."""
    return num_splits + 1 + tail_slots(sinks, window_len)


def center_args(k_center, sinks: int, batch: int, num_kv_heads: int, head_dim: int, like, who: str):
    """Kernel arguments (pointer, batch stride, head stride) of the K offsets [B, Hkv, D] or
    [Hkv, D] (batch stride 0); placeholders without sinks."""
    if not sinks:
        return (like, 0, 0)
    shape = tuple(k_center.shape) if k_center is not None else None
    if shape not in ((batch, num_kv_heads, head_dim), (num_kv_heads, head_dim)) or \
            k_center.dtype != torch.float32 or k_center.stride(-1) != 1:
        raise ValueError(f"int2 {who}: sinks={sinks} needs k_center, fp32 [{batch}, {num_kv_heads}, {head_dim}] "
                         f"or [{num_kv_heads}, {head_dim}] with contiguous rows; got "
                         f"{None if k_center is None else (shape, k_center.dtype)}")
    if k_center.dim() == 2:
        return (k_center, 0, k_center.stride(0))
    return (k_center, k_center.stride(0), k_center.stride(1))


def _window_args(window, like):
    """Kernel arguments of the recent-window cache (placeholders when there is none)."""
    if not window:
        return (like, like, 0, 0, 0, like, 0)
    k_win, v_win, table, _ = window
    assert k_win.shape == v_win.shape and k_win.stride() == v_win.stride() and k_win.stride(-1) == 1
    return (k_win, v_win, k_win.stride(0), k_win.stride(1), k_win.stride(2), table, table.stride(0))


def int2_decode(q_rot: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor,
                seq_lens: torch.Tensor, layout: SlotLayout, sm_scale: float, num_splits: int,
                out: torch.Tensor | None = None, lloyd_max: bool = False,
                workspace: tuple[torch.Tensor, torch.Tensor] | None = None,
                block_n: int = 64, num_warps: int = 4, num_stages: int | None = None, block_h: int | None = None,
                k_center: torch.Tensor | None = None, sinks: int = 0, window=None, maxnreg: int | None = None,
                _upstream_head_map: bool = False, fold: bool = False, table_ahead: bool = False,
                chain_tail: bool = False, short_n: int = 0, short_units: int = 0,
                merge_split: int = 1, merge_warps: int = 4, tile_major: bool = False, rows_on_m: bool = False,
                partial_dtype: torch.dtype = torch.float32, limits: DeviceLimits | None = None) -> torch.Tensor:
    """q_rot [B, Hq, D] (one query token per sequence) -> out [B, Hq, D] in the rotated basis.

    kv_cache [num_blocks, block_size, Hkv, slot_bytes] uint8; block_table [B, max_blocks] int32
    (page ids); seq_lens [B] int32, the number of cached tokens to attend (current token included).
    `num_splits` (programs per sequence: the launch has num_splits * B per head tile, which share the
    batch's tiles evenly) is fixed by the caller so grids are identical between CUDA-graph capture
    and replay; `workspace` = (part_out [B*Hq*S*D] fp32, part_lse [B*Hq*S] fp32) preallocated
    buffers, optional (S = partial_slots(num_splits, sinks, window length)).
    K centering: with `sinks` > 0, positions < sinks hold uncentered keys (in the int2 cache and in
    the window) and q_rot . c is subtracted from their scores; `k_center` (fp32 [B, Hkv, D], each
    sequence's rotated offset, or [Hkv, D] for all) gives c, and the kernel computes q . c.
    Recent window: `window` = (k_win, v_win [blocks, window_block_size, Hkv, D] in the same rotated
    (and centered) basis, window_block_table [B, max_blocks] int32, R): the last R tokens of each
    sequence are read there in full precision.
    `fold`: the splits run the folded tile (folded.py: codes straight into the
    tensor cores, scale and zero applied to the dot products; uniform levels only), else the per-code
    tile (each code dequantized before its dot).
    `table_ahead`: the split loop loads each tile's block-table entries an iteration early, which
    lets Triton's pipeliner keep a tile's copies in flight (decode_launch_config says when it pays).
    On GPUs whose `limits` (default: q_rot's device's) allow dependent launches the merge is launched as the split launch's programmatic dependent (it starts as
    the split programs finish and waits for them before reading their results); `chain_tail`: the
    split launch, too, as the tail launch's (with a window or sinks; decode_launch_config says when).
    `short_n` > 0 (a divisor of block_n, >= 16): where the programs' shares would average 1 to
    `short_units` tiles of short_n, the launch deals and reads tiles of short_n instead of block_n
    (decode_launch_config says when).
    `merge_split`: the merge's programs per query row, each merging D / merge_split columns (a
    power of two, D / merge_split >= 16), with `merge_warps` warps.
    `tile_major`: the split grid as (head tiles, programs, KV heads), so that the head tiles of one
    KV head and share run side by side and read its pages from L2 (decode_launch_config does not
    pick it: measured, benchmarks/results/decode_tiles_ab_d128_h200.json).
    `rows_on_m`: the folded tile with the query rows on the MMA's M (folded.int2_tile_rows; head
    tiles of >= 16 rows, head_dim >= 128; decode_launch_config picks it for those).
    `partial_dtype`: the split programs' partial outputs (normalized, so V's range) as float32,
    bfloat16 or float16; the merge reads them back into fp32 (a workspace's own dtype wins).
    The split programs read positions [sinks, L - R); the tail kernel reads the sinks (one program
    per sequence) and the window (cdiv(R, TAIL_N) programs of one short tile each), side by side.
    """
    B, Hq, D = q_rot.shape
    Hkv = kv_cache.shape[2]
    if Hq % Hkv:
        raise ValueError(f"int2 decode: {Hq} query heads are not a multiple of {Hkv} KV heads")
    assert kv_cache.dtype == torch.uint8 and kv_cache.shape[-1] == layout.slot_bytes
    assert kv_cache.stride(-1) == 1 and q_rot.stride(-1) == 1 and D == layout.head_dim
    if short_n and (short_n < 16 or block_n % short_n or short_units < 0):
        raise ValueError(f"int2 decode: short_n={short_n}, short_units={short_units} with block_n={block_n}: "
                         "short_n must divide block_n and be >= 16 (the tensor cores' K), short_units >= 0; "
                         "short_n=0 turns short shares off")
    if merge_split < 1 or merge_split & (merge_split - 1) or D % merge_split or D // merge_split < 16:
        raise ValueError(f"int2 decode: merge_split={merge_split} with head_dim {D}: a power of two with "
                         "head_dim / merge_split >= 16 (1: one merge program per query row)")
    if rows_on_m and not (fold and D >= 128 and (block_h or block_h_for(Hq // Hkv, D)) >= 16):
        raise ValueError(f"int2 decode: rows_on_m needs the folded tile (fold=True), head_dim >= 128 and head "
                         f"tiles of >= 16 rows (the tensor cores' M); got fold={fold}, head_dim {D}, block_h {block_h}")
    if fold and lloyd_max:
        raise ValueError("int2 decode: the folded tile (fold=True) needs uniform levels; Lloyd-Max "
                         "codes are dequantized per code (fold=False)")
    cen = center_args(k_center, sinks, B, Hkv, D, q_rot, "decode")
    ratio = Hq // Hkv
    if block_h is None:
        block_h = 16 if _upstream_head_map else block_h_for(ratio, D)
    tiles = triton.cdiv(ratio, block_h)
    grid_heads = triton.cdiv(Hq, min(block_h, ratio)) if _upstream_head_map else Hkv * tiles
    if out is None:
        out = torch.empty_like(q_rot)
    # partial-result slots per query head: split program p's for sequence b at p + b (a program's
    # share spans consecutive sequences, so these never collide), then each sequence's tail slots
    window_len = int(window[3]) if window else 0
    tail_programs = tail_slots(sinks, window_len)
    num_programs = num_splits * B
    tail_base = num_programs + B
    num_slots = B * partial_slots(num_splits, sinks, window_len)
    if partial_dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"int2 decode: partial_dtype {partial_dtype}: float32, bfloat16 or float16")
    if workspace is None:
        part_out = torch.empty(Hq * num_slots * D, dtype=partial_dtype, device=q_rot.device)
        part_lse = torch.empty(Hq * num_slots, dtype=torch.float32, device=q_rot.device)
    else:
        part_out, part_lse = workspace
        assert part_lse.numel() >= Hq * num_slots and part_out.numel() >= Hq * num_slots * D, \
            "int2 decode: workspace smaller than B * Hq * partial_slots(...) rows"
    # Programmatic dependent launches (sm_90+; not under the interpreter): [tail ->] split -> merge,
    # each launch starting while the one before finishes, each waiting for it where it must
    # (gdc_wait: the merge before reading partial results, a chained split at its end)
    pdl = not interpreting() and (limits or device_limits(q_rot.device)).pdl
    chain = pdl and bool(chain_tail) and bool(tail_programs)
    lv = LLOYD_MAX_LEVELS
    levels = dict(LLOYD=bool(lloyd_max), L0=lv[0], L1=lv[1], L2=lv[2], L3=lv[3])
    offsets = dict(OFF_V=layout.v_codes, OFF_KS=layout.k_scale, OFF_KZ=layout.k_zero,
                   OFF_VS=layout.v_scale, OFF_VZ=layout.v_zero, ODD_SHIFT=layout.odd_shift)
    cache_args = (kv_cache, kv_cache.view(torch.float16), kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2),
                  block_table, block_table.stride(0))
    heads = dict(BLOCK_SIZE=kv_cache.shape[1], D=D, G=layout.group_size, RATIO=ratio, TILES=tiles, NUM_Q_HEADS=Hq,
                 BLOCK_H=block_h, **offsets, **levels, DOT=dot_dtype(q_rot.dtype), FAST=not interpreting())
    if tail_programs:   # first: the merge is launched right after the split launch, as its dependent
        _int2_decode_tail_kernel[(B, grid_heads, tail_programs)](
            q_rot, q_rot.stride(0), q_rot.stride(1), *cache_args, seq_lens,
            part_out, part_lse, sm_scale * LOG2E, num_slots, tail_base, int(sinks), window_len,
            *cen, *_window_args(window, q_rot),
            TAIL_N=TAIL_N, SINKS=int(sinks), WBS=window[0].shape[1] if window else 16, PDL=chain, **heads,
            num_warps=4)   # one short tile: 4 warps keep it free of spills and load it in parallel
    if tile_major and not _upstream_head_map:
        # the head tiles of one KV head and share next to each other in the launch order, so that
        # they read its pages at about the same time: all but the first from L2
        split_grid = (tiles, num_programs, Hkv)
    else:
        split_grid = (num_programs, grid_heads)
    _int2_decode_split_kernel[split_grid](
        q_rot, q_rot.stride(0), q_rot.stride(1), *cache_args, seq_lens,
        part_out, part_lse, sm_scale * LOG2E, num_programs, num_slots, B, int(sinks), window_len,
        BLOCK_N=block_n, UPSTREAM_HEAD_MAP=_upstream_head_map, FOLD=2 if rows_on_m else bool(fold),
        TABLE_AHEAD=bool(table_ahead), PDL=pdl, AFTER_TAIL=chain, SHORT_N=short_n, SHORT_UNITS=short_units,
        TILE_MAJOR=bool(tile_major) and not _upstream_head_map, **heads,
        num_warps=num_warps, **({} if num_stages is None else {"num_stages": num_stages}),
        **({} if maxnreg is None else {"maxnreg": maxnreg}), **({"launch_pdl": True} if chain else {}))
    merge_columns = D // merge_split
    _int2_decode_merge_kernel[(B, Hq, merge_split)](
        part_out, part_lse, seq_lens, num_programs, num_slots, B, tail_base, int(sinks), window_len,
        out, out.stride(0), out.stride(1), D=D, CHUNK=merge_chunk(num_splits, tail_programs, merge_columns, merge_warps),
        BLOCK_N=block_n, PDL=pdl, SHORT_N=short_n, SHORT_UNITS=short_units, DC=merge_columns, num_warps=merge_warps,
        **({"launch_pdl": True} if pdl else {}))
    return out
