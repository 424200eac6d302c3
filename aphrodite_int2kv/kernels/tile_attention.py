"""Attention over the channel-tile cache (APHRODITE_INT2KV_FORMAT=tiles; byte layout in
docs/format.md, "Channel-tile format"): new query tokens attend to their sequence's tile records
(the prefix before the recent window), to the recent window in full precision, and causally to
the chunk's own K/V in full precision. Prefill chunks and decodes (chunks of one token) alike.

Grid (cdiv(max_query_len, BLOCK_M), num_q_heads, batch); one program = BLOCK_M query tokens of
one query head; its KV head is q_head // RATIO. Inputs and output are in the rotated basis.

Per tile of T tokens: K's per-channel scales fold into the query (q' = q * scale, one quarter of
the head at a time), the 3-bit codes meet q' in one dot, one q . zero per row is added, and each
column is multiplied by its token's norm; for V, p times each token's norm meets the 2-bit codes
in one dot, and V's scale and zero apply once per channel and tile.

A first form, correct and untuned: every query head reads its KV head's records (a decode reads
them once per query head, not once per KV head), and there is no split over the sequence.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from aphrodite_int2kv.int2.tile_format import TilePages
from aphrodite_int2kv.kernels.common import (LOG2E, chunk_queries, chunk_span, empty_state, softmax_step,
                                             store_chunk_rows, window_span)
from aphrodite_int2kv.kernels.decode import _window_args, dot_dtype
from aphrodite_int2kv.kernels.tile_decode import _e4m3_value


@triton.jit
def _unit(rec_f16, rec, OFF_PEAKS: tl.constexpr, which: tl.constexpr):
    """The value of one e4m3 step of a record's field `which` (K scale, K zero, V scale, V zero):
    its fp16 peak / 448 (1 where the peak is 0)."""
    peak = tl.load(rec_f16 + (rec + OFF_PEAKS) // 2 + which).to(tl.float32)
    return tl.where(peak > 0, peak / 448.0, 1.0)


@triton.jit
def _quarter_meta(rec_u8, rec, OFF: tl.constexpr, unit, c: tl.constexpr, W: tl.constexpr):
    """Channels [c W, (c + 1) W) of a per-channel e4m3 field at byte OFF of a record, fp32 [1, W]."""
    code = tl.load(rec_u8 + rec + OFF + c * W + tl.arange(0, W)).to(tl.int32)
    return (_e4m3_value(code) * unit)[None, :]


@triton.jit
def _planar_quarter(rec_u8, base, c: tl.constexpr, T: tl.constexpr, W: tl.constexpr):
    """2-bit codes [T, W] of channels [c W, (c + 1) W): byte j of a token holds channel j + c W in
    bits 2c, 2c + 1 (planar)."""
    byte = tl.load(rec_u8 + base + tl.arange(0, T)[:, None] * W + tl.arange(0, W)[None, :]).to(tl.int32)
    return (byte >> (2 * c)) & 3


@triton.jit
def _k_quarter(q, rec_u8, rec, ks_unit, kz_unit, c: tl.constexpr, T: tl.constexpr, D: tl.constexpr,
               W: tl.constexpr, OFF_KH: tl.constexpr, OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr,
               DOT: tl.constexpr):
    """One quarter of the head's channels: (q' . codes [ROWS, T], q . zero [ROWS])."""
    D8: tl.constexpr = D // 8
    e = c * W + tl.arange(0, W)                                # the quarter's channels
    high = tl.load(rec_u8 + rec + OFF_KH + tl.arange(0, T)[:, None] * D8 + (e % D8)[None, :]).to(tl.int32)
    codes = _planar_quarter(rec_u8, rec, c, T, W) | (((high >> (e // D8)[None, :]) & 1) << 2)
    qf = q.to(tl.float32)
    scale = _quarter_meta(rec_u8, rec, OFF_KS, ks_unit, c, W)
    zero = _quarter_meta(rec_u8, rec, OFF_KZ, kz_unit, c, W)
    dots = tl.dot((qf * scale).to(DOT), tl.trans(codes.to(DOT)))
    return dots, tl.sum(qf * zero, axis=1)


@triton.jit
def _v_quarter(acc, alpha, pn, pn_sum, rec_u8, rec, vs_unit, vz_unit, c: tl.constexpr, T: tl.constexpr,
               W: tl.constexpr, OFF_V: tl.constexpr, OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr, DOT: tl.constexpr):
    codes = _planar_quarter(rec_u8, rec + OFF_V, c, T, W)
    pv = tl.dot(pn, codes.to(DOT))
    return (acc * alpha[:, None] + pv * _quarter_meta(rec_u8, rec, OFF_VS, vs_unit, c, W)
            + pn_sum[:, None] * _quarter_meta(rec_u8, rec, OFF_VZ, vz_unit, c, W))


@triton.jit
def tile_span(m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, t0, t1, lo, hi, table_row, head_off, stride_page,
              rec_u8, rec_f16, qk_scale, BLOCK_SIZE: tl.constexpr, T: tl.constexpr, D: tl.constexpr,
              W: tl.constexpr, TILE_BYTES: tl.constexpr, OFF_KH: tl.constexpr, OFF_V: tl.constexpr,
              OFF_KN: tl.constexpr, OFF_VN: tl.constexpr, OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr,
              OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr, OFF_PEAKS: tl.constexpr, DOT: tl.constexpr):
    """Tiles [t0, t1) of one sequence from its tile records, positions outside [lo, hi) masked (lo:
    the sinks, read from the window, left out of tile 0's record): tile i of the
    sequence is record (i T % BLOCK_SIZE) / T of page table_row[i T / BLOCK_SIZE]. Rows are query
    rows of one KV head: a chunk's tokens (prefill) or a KV group's query heads (split decode)."""
    toks = tl.arange(0, T)
    for i in range(t0, t1):
        first = i * T
        page = tl.load(table_row + first // BLOCK_SIZE).to(tl.int64)
        rec = page * stride_page + head_off + ((first % BLOCK_SIZE) // T) * TILE_BYTES
        ks_unit = _unit(rec_f16, rec, OFF_PEAKS, 0)
        kz_unit = _unit(rec_f16, rec, OFF_PEAKS, 1)
        vs_unit = _unit(rec_f16, rec, OFF_PEAKS, 2)
        vz_unit = _unit(rec_f16, rec, OFF_PEAKS, 3)
        d0, z0 = _k_quarter(q0, rec_u8, rec, ks_unit, kz_unit, 0, T, D, W, OFF_KH, OFF_KS, OFF_KZ, DOT)
        d1, z1 = _k_quarter(q1, rec_u8, rec, ks_unit, kz_unit, 1, T, D, W, OFF_KH, OFF_KS, OFF_KZ, DOT)
        d2, z2 = _k_quarter(q2, rec_u8, rec, ks_unit, kz_unit, 2, T, D, W, OFF_KH, OFF_KS, OFF_KZ, DOT)
        d3, z3 = _k_quarter(q3, rec_u8, rec, ks_unit, kz_unit, 3, T, D, W, OFF_KH, OFF_KS, OFF_KZ, DOT)
        k_norm = tl.load(rec_f16 + (rec + OFF_KN) // 2 + toks).to(tl.float32)
        s = (d0 + d1 + d2 + d3 + (z0 + z1 + z2 + z3)[:, None]) * k_norm[None, :]
        s = tl.where(((first + toks >= lo) & (first + toks < hi))[None, :], s * qk_scale, float("-inf"))
        m_i, l_i, alpha, p = softmax_step(m_i, l_i, s)
        pn = p * tl.load(rec_f16 + (rec + OFF_VN) // 2 + toks).to(tl.float32)[None, :]
        pn_sum = tl.sum(pn, axis=1)
        pn = pn.to(DOT)
        acc0 = _v_quarter(acc0, alpha, pn, pn_sum, rec_u8, rec, vs_unit, vz_unit, 0, T, W, OFF_V, OFF_VS, OFF_VZ, DOT)
        acc1 = _v_quarter(acc1, alpha, pn, pn_sum, rec_u8, rec, vs_unit, vz_unit, 1, T, W, OFF_V, OFF_VS, OFF_VZ, DOT)
        acc2 = _v_quarter(acc2, alpha, pn, pn_sum, rec_u8, rec, vs_unit, vz_unit, 2, T, W, OFF_V, OFF_VS, OFF_VZ, DOT)
        acc3 = _v_quarter(acc3, alpha, pn, pn_sum, rec_u8, rec, vs_unit, vz_unit, 3, T, W, OFF_V, OFF_VS, OFF_VZ, DOT)
    return m_i, l_i, acc0, acc1, acc2, acc3


@triton.jit(do_not_specialize_on_alignment=["block_table_ptr", "seq_lens_ptr", "query_start_ptr", "wbt_ptr"])
def _tile_attention_kernel(
    q_ptr, stride_qt, stride_qh,                 # [T, Hq, D] rotated queries
    k_ptr, v_ptr, stride_kt, stride_kh, stride_vt, stride_vh,   # [T, Hkv, D] rotated chunk K/V
    out_ptr, stride_ot, stride_oh,               # [T, Hq, D]
    rec_u8, rec_f16, stride_page, stride_head,   # the tile records (int2/tile_format.py TilePages)
    block_table_ptr, stride_bt, query_start_ptr, seq_lens_ptr,
    qk_scale,
    wk_ptr, wv_ptr, stride_wb, stride_ws, stride_wh, wbt_ptr, stride_wbt,   # recent window (decode.py)
    BLOCK_SIZE: tl.constexpr, T: tl.constexpr, D: tl.constexpr, RATIO: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TILE_BYTES: tl.constexpr,
    OFF_KH: tl.constexpr, OFF_V: tl.constexpr, OFF_KN: tl.constexpr, OFF_VN: tl.constexpr,
    OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr, OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr,
    OFF_PEAKS: tl.constexpr, DOT: tl.constexpr, WINDOW: tl.constexpr, WBS: tl.constexpr, RING: tl.constexpr,
    SINKS: tl.constexpr,
):
    W: tl.constexpr = D // 4
    q_block = tl.program_id(0)
    q_head = tl.program_id(1)
    batch = tl.program_id(2)
    kv_head = q_head // RATIO

    q_start = tl.load(query_start_ptr + batch)
    q_len = tl.load(query_start_ptr + batch + 1) - q_start
    if q_block * BLOCK_M >= q_len:
        return
    prefix_len = tl.load(seq_lens_ptr + batch) - q_len

    rows = q_block * BLOCK_M + tl.arange(0, BLOCK_M)          # position within the chunk
    rmask = rows < q_len
    q0, q1, q2, q3 = chunk_queries(q_ptr, q_start, rows, rmask, q_head, stride_qt, stride_qh, W, DOT)
    m_i, l_i, acc0, acc1, acc2, acc3 = empty_state(BLOCK_M, W)

    # The prefix: the first SINKS positions from the window, tiles up to the window of the chunk's
    # first token, its last WINDOW - 1 tokens from the window (later tokens of the chunk see at
    # least that much in full precision).
    win_start = tl.maximum(prefix_len - (WINDOW - 1), 0)
    no_center = tl.zeros([BLOCK_M], tl.float32)
    m_i, l_i, acc0, acc1, acc2, acc3 = window_span(
        m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, 0, tl.minimum(win_start, SINKS),
        wbt_ptr + batch * stride_wbt, kv_head * stride_wh, stride_wb, stride_ws, wk_ptr, wv_ptr,
        qk_scale, no_center, WBS, RING, BLOCK_M, BLOCK_N, W, DOT, 0)
    m_i, l_i, acc0, acc1, acc2, acc3 = tile_span(
        m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, 0, tl.cdiv(win_start, T), SINKS, win_start,
        block_table_ptr + batch * stride_bt,
        kv_head * stride_head, stride_page, rec_u8, rec_f16, qk_scale, BLOCK_SIZE, T, D, W, TILE_BYTES,
        OFF_KH, OFF_V, OFF_KN, OFF_VN, OFF_KS, OFF_KZ, OFF_VS, OFF_VZ, OFF_PEAKS, DOT)
    m_i, l_i, acc0, acc1, acc2, acc3 = window_span(
        m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, win_start, prefix_len,
        wbt_ptr + batch * stride_wbt, kv_head * stride_wh, stride_wb, stride_ws, wk_ptr, wv_ptr,
        qk_scale, no_center, WBS, RING, BLOCK_M, BLOCK_N, W, DOT, 0)
    # The chunk itself in full precision, causal.
    m_i, l_i, acc0, acc1, acc2, acc3 = chunk_span(
        m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, rows, tl.minimum(q_len, (q_block + 1) * BLOCK_M),
        k_ptr + q_start * stride_kt + kv_head * stride_kh, v_ptr + q_start * stride_vt + kv_head * stride_vh,
        stride_kt, stride_vt, qk_scale, BLOCK_N, W, DOT)

    store_chunk_rows(out_ptr, q_start, rows, rmask, q_head, stride_ot, stride_oh, l_i, acc0, acc1, acc2, acc3, W)


def record_args(pages: TilePages):
    """The tile records' pointer and stride arguments, in the kernels' order."""
    return pages.flat, pages.as_f16(), pages.page_stride, pages.head_stride


def record_constants(pages: TilePages, window, sinks: int, ring: bool) -> dict:
    """The byte layout (docs/format.md) and the window's shape as the kernels' constexprs: the
    first `sinks` positions of each sequence read from the window (left out of tile 0's record),
    the window paged or a ring (kernels/common.py window_slot)."""
    L = pages.layout
    wbs = window[0].shape[1]
    if sinks >= L.tile or (ring and wbs - sinks < window[3]):
        raise ValueError(f"tile kernels: {sinks} sinks with tiles of {L.tile} and a {'ring' if ring else 'paged'} "
                         f"window of {window[3]} in pages of {wbs}")
    return dict(BLOCK_SIZE=pages.per_page * L.tile, T=L.tile, D=L.head_dim, TILE_BYTES=L.tile_bytes,
                OFF_KH=L.k_high, OFF_V=L.v_codes, OFF_KN=L.k_norm, OFF_VN=L.v_norm, OFF_KS=L.k_scale,
                OFF_KZ=L.k_zero, OFF_VS=L.v_scale, OFF_VZ=L.v_zero, OFF_PEAKS=L.peaks,
                WINDOW=int(window[3]), WBS=wbs, RING=wbs - sinks if ring else 0, SINKS=sinks)


def tile_attention(q_rot, k_rot, v_rot, pages: TilePages, block_table, query_start_loc, seq_lens,
                   max_query_len: int, sm_scale: float, window, out=None, sinks: int = 0, ring: bool = False,
                   block_m: int | None = None, block_n: int = 32):
    """q_rot [N, Hq, D], k_rot/v_rot [N, Hkv, D] (the step's new tokens, rotated) -> out [N, Hq, D]
    (rotated). Request b's new tokens are query_start_loc[b] .. [b+1], the last of its seq_lens[b];
    its prefix is read from its tile records (through block_table's pages) up to the window of the
    chunk's first token, and from the recent window `window` = (k_win, v_win, table, R) after it;
    its first `sinks` positions from the window too (paged, or a `ring`: kernels/common.py window_slot).
    Decodes are chunks of one token (their own K/V come in k_rot / v_rot)."""
    N, Hq, D = q_rot.shape
    Hkv = k_rot.shape[1]
    L = pages.layout
    if Hq % Hkv or D != L.head_dim:
        raise ValueError(f"tile attention: {Hq} query heads, {Hkv} KV heads, head_dim {D} (records: {L.head_dim})")
    if not window or window[3] < L.tile:
        raise ValueError(f"tile attention needs the recent window, of at least {L.tile} tokens")
    if out is None:
        out = torch.empty_like(q_rot)
    B = seq_lens.shape[0]
    if N == 0 or B == 0:
        return out
    # prefill rows: 64 at head_dim 64, 32 above (64 rows spill at 128 and need 105 KB of shared
    # memory at 256, over the 99 KB of RTX parts: `python -m aphrodite_int2kv.kernels.aot --tile-format`)
    block_m = block_m or (16 if max_query_len <= 16 else 64 if D <= 64 else 32)
    grid = (triton.cdiv(max_query_len, block_m), Hq, B)
    _tile_attention_kernel[grid](
        q_rot, q_rot.stride(0), q_rot.stride(1),
        k_rot, v_rot, k_rot.stride(0), k_rot.stride(1), v_rot.stride(0), v_rot.stride(1),
        out, out.stride(0), out.stride(1),
        *record_args(pages), block_table, block_table.stride(0), query_start_loc, seq_lens,
        sm_scale * LOG2E,
        *_window_args(window, q_rot),
        RATIO=Hq // Hkv, BLOCK_M=block_m, BLOCK_N=block_n, DOT=dot_dtype(q_rot.dtype), num_warps=4,
        **record_constants(pages, window, sinks, ring),
    )
    return out
