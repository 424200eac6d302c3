"""Split decode over the channel-tile cache (APHRODITE_INT2KV_FORMAT=tiles; byte layout in
docs/format.md, "Channel-tile format"), grouped for GQA: one query token per sequence.

Stage 1 (`_tile_split_kernel`), grid (num_splits + 1, num_kv_heads * TILES, batch): program
(s, g, b) reads, for the BLOCK_H query heads of head tile g (common.group_heads: a tile of one KV
group's query heads, masked past the group), an even share of sequence b's tile records before
its recent window -- split s < num_splits holds tiles [s * per, (s + 1) * per), per =
cdiv(tiles, num_splits) -- so a KV head's records are read once for all of its query heads. The
last program (s = num_splits) reads the recent window in full precision and the token itself
(from the step's K/V). Each writes its partial result (normalised output and log2-sum-exp) to slot
b * (num_splits + 1) + s of its query heads.

Stage 2 (`_tile_merge_kernel`), grid (batch, num_q_heads): log-sum-exp merge of a sequence's
num_splits + 1 slots, 8 at a time (up to 65 slots at head_dim 256 stay in registers).

num_splits depends on the batch size and the GPU only (never on sequence lengths), so a CUDA graph
captured for a batch size replays for any lengths. Inputs and output are in the rotated basis.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from aphrodite_int2kv.int2.tile_format import TilePages
from aphrodite_int2kv.kernels import interpreting
from aphrodite_int2kv.kernels.common import LOG2E, empty_state, fp_tile, group_heads, query_planes, window_span
from aphrodite_int2kv.kernels.decode import _window_args, dot_dtype, store_partial
from aphrodite_int2kv.kernels.tile_attention import record_args, record_constants, sinks_arg, tile_span


@triton.jit(do_not_specialize=["num_splits"])
def _tile_split_kernel(
    q_ptr, stride_qb, stride_qh,                 # [B, Hq, D] rotated queries, one token per sequence
    k_ptr, v_ptr, stride_kb, stride_kh, stride_vb, stride_vh,   # [B, Hkv, D] the tokens' own K / V
    rec_u8, rec_f16, stride_page, stride_head,   # the tile records (int2/tile_format.py TilePages)
    block_table_ptr, stride_bt, seq_lens_ptr,
    part_out_ptr, part_lse_ptr,                  # [Hq, B * (num_splits + 1), D] fp32, [Hq, ...] fp32
    qk_scale, num_splits,
    wk_ptr, wv_ptr, stride_wb, stride_ws, stride_wh, wbt_ptr, stride_wbt,   # recent window (decode.py)
    BLOCK_SIZE: tl.constexpr, T: tl.constexpr, D: tl.constexpr, RATIO: tl.constexpr, TILES: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, TILE_BYTES: tl.constexpr,
    OFF_KH: tl.constexpr, OFF_V: tl.constexpr, OFF_KN: tl.constexpr, OFF_VN: tl.constexpr,
    OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr, OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr,
    OFF_PEAKS: tl.constexpr, K_BITS: tl.constexpr, DOT: tl.constexpr, FAST: tl.constexpr, WINDOW: tl.constexpr,
    WBS: tl.constexpr, RING: tl.constexpr, SINKS: tl.constexpr,
):
    W: tl.constexpr = D // 4
    split = tl.program_id(0)
    kv_head, q_head, hmask = group_heads(tl.program_id(1), RATIO, TILES, BLOCK_H)
    batch = tl.program_id(2)
    slots = tl.num_programs(2) * (num_splits + 1)
    row = q_head * slots + batch * (num_splits + 1) + split

    seq_len = tl.load(seq_lens_ptr + batch)
    # the token is at seq_len - 1; its window is the WINDOW - 1 positions before it
    win_start = tl.maximum(seq_len - WINDOW, 0)
    q0, q1, q2, q3 = query_planes(q_ptr, batch, stride_qb, q_head, stride_qh, hmask, W, DOT)
    m_i, l_i, acc0, acc1, acc2, acc3 = empty_state(BLOCK_H, W)
    if split < num_splits:
        tiles = tl.cdiv(win_start, T)
        per = tl.cdiv(tiles, num_splits)
        t0 = split * per
        t1 = tl.minimum(t0 + per, tiles)
        m_i, l_i, acc0, acc1, acc2, acc3 = tile_span(
            m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, t0, t1, SINKS, win_start,
            block_table_ptr + batch * stride_bt, kv_head * stride_head, stride_page, rec_u8, rec_f16, qk_scale,
            BLOCK_SIZE, T, D, W, TILE_BYTES, OFF_KH, OFF_V, OFF_KN, OFF_VN, OFF_KS, OFF_KZ, OFF_VS, OFF_VZ,
            OFF_PEAKS, K_BITS, DOT, FAST)
    else:
        no_center = tl.zeros([BLOCK_H], tl.float32)
        # the sinks (the first SINKS positions, left out of tile 0's record), then the window
        m_i, l_i, acc0, acc1, acc2, acc3 = window_span(
            m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, 0, tl.minimum(win_start, SINKS),
            wbt_ptr + batch * stride_wbt, kv_head * stride_wh, stride_wb, stride_ws, wk_ptr, wv_ptr,
            qk_scale, no_center, WBS, RING, BLOCK_H, BLOCK_N, W, DOT, 0)
        m_i, l_i, acc0, acc1, acc2, acc3 = window_span(
            m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, win_start, seq_len - 1,
            wbt_ptr + batch * stride_wbt, kv_head * stride_wh, stride_wb, stride_ws, wk_ptr, wv_ptr,
            qk_scale, no_center, WBS, RING, BLOCK_H, BLOCK_N, W, DOT, 0)
        # the token itself: one valid row of a BLOCK_N-row tile (the dot's smallest shape)
        own = tl.arange(0, BLOCK_N) < tl.minimum(seq_len, 1)
        k_own = k_ptr + batch * stride_kb + kv_head * stride_kh + tl.zeros([BLOCK_N], tl.int64)
        v_own = v_ptr + batch * stride_vb + kv_head * stride_vh + tl.zeros([BLOCK_N], tl.int64)
        m_i, l_i, acc0, acc1, acc2, acc3 = fp_tile(
            m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, k_own, v_own, own, qk_scale,
            tl.arange(0, BLOCK_N), no_center, BLOCK_H, BLOCK_N, W, DOT, 0)
    store_partial(part_out_ptr, part_lse_ptr, row, hmask, m_i, l_i, acc0, acc1, acc2, acc3, D, W)


@triton.jit(do_not_specialize=["num_splits"])
def _tile_merge_kernel(part_out_ptr, part_lse_ptr, num_splits, out_ptr, stride_ob, stride_oh, sink_ptr,
                       D: tl.constexpr, CHUNK: tl.constexpr, HAS_SINK: tl.constexpr):
    """Grid (batch, num_q_heads): the log-sum-exp merge of one row's num_splits + 1 slots, CHUNK
    at a time (slot i holds out_i = acc_i / l_i and lse_i = m_i + log2 l_i, so it enters the running
    softmax state with weight exp2(lse_i - m)); then, with HAS_SINK, the head's learned sink logit
    (log2 units, sink_ptr[head]) as one more score with a zero value."""
    batch = tl.program_id(0)
    head = tl.program_id(1)
    n = num_splits + 1
    row = head * (tl.num_programs(0) * n) + batch * n
    dims = tl.arange(0, D)
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.zeros([], tl.float32)
    acc = tl.zeros([D], tl.float32)
    for c0 in range(0, n, CHUNK):
        k = c0 + tl.arange(0, CHUNK)
        smask = k < n
        lse = tl.load(part_lse_ptr + row + k, mask=smask, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(lse, axis=0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m - m_safe)
        w = tl.exp2(lse - m_safe)
        parts = tl.load(part_out_ptr + (row + k)[:, None] * D + dims[None, :], mask=smask[:, None], other=0.0)
        acc = acc * alpha + tl.sum(parts * w[:, None], axis=0)
        l = l * alpha + tl.sum(w, axis=0)
        m = m_new
    if HAS_SINK:
        sink = tl.load(sink_ptr + head)
        m_new = tl.maximum(m, sink)
        alpha = tl.exp2(m - m_new)
        acc = acc * alpha
        l = l * alpha + tl.exp2(sink - m_new)
    out = acc / tl.where(l > 0, l, 1.0)
    tl.store(out_ptr + batch * stride_ob + head * stride_oh + dims, out.to(out_ptr.dtype.element_ty))


def tile_decode_splits(batch: int, head_programs: int, num_sms: int) -> int:
    """Record splits per sequence: about 16 programs per SM (each walks its tiles one after another,
    waiting on every record's loads, so it takes many programs in flight to keep the memory busy),
    at most 64; from the batch size and the GPU only (CUDA graphs)."""
    return max(1, min(64, -(-16 * num_sms // max(1, batch * head_programs))))


def tile_split_decode(q_rot, k_rot, v_rot, pages: TilePages, block_table, seq_lens, sm_scale: float, window,
                out=None, num_splits: int | None = None, sinks: int = 0, ring: bool = False,
                block_h: int = 16, block_n: int = 16, sinks_log2=None):
    """q_rot [B, Hq, D] (one token per sequence, the last of its seq_lens[b]), k_rot / v_rot
    [B, Hkv, D] the tokens' own K / V -> out [B, Hq, D], all rotated. The prefix before the token's
    recent window is read from the tile records through block_table's pages; the window
    `window` = (k_win, v_win, table, R) after it and the first `sinks` positions from the window
    (paged, or a `ring`), as tile_attention reads a decode. sinks_log2: [Hq] learned attention-sink
    logits (gpt-oss) as sink_log2 gives them, merged in as one more score per query head with a
    zero value."""
    B, Hq, D = q_rot.shape
    Hkv = k_rot.shape[1]
    L = pages.layout
    if Hq % Hkv or D != L.head_dim:
        raise ValueError(f"tile decode: {Hq} query heads, {Hkv} KV heads, head_dim {D} (records: {L.head_dim})")
    if not window or window[3] < L.tile:
        raise ValueError(f"tile decode needs the recent window, of at least {L.tile} tokens")
    if out is None:
        out = torch.empty_like(q_rot)
    if B == 0:
        return out
    ratio = Hq // Hkv
    tiles = triton.cdiv(ratio, block_h)
    if num_splits is None:
        from aphrodite_int2kv.kernels.limits import device_limits

        num_splits = tile_decode_splits(B, Hkv * tiles, device_limits(q_rot.device).num_sms)
    slots = B * (num_splits + 1)
    part_out = torch.empty(Hq, slots, D, dtype=torch.float32, device=q_rot.device)
    part_lse = torch.empty(Hq, slots, dtype=torch.float32, device=q_rot.device)
    _tile_split_kernel[(num_splits + 1, Hkv * tiles, B)](
        q_rot, q_rot.stride(0), q_rot.stride(1),
        k_rot, v_rot, k_rot.stride(0), k_rot.stride(1), v_rot.stride(0), v_rot.stride(1),
        *record_args(pages), block_table, block_table.stride(0), seq_lens, part_out, part_lse,
        sm_scale * LOG2E, num_splits,
        *_window_args(window, q_rot),
        RATIO=ratio, TILES=tiles, BLOCK_H=block_h, BLOCK_N=block_n, DOT=dot_dtype(q_rot.dtype), FAST=not interpreting(),
        num_warps=4, **record_constants(pages, window, sinks, ring),
    )
    _tile_merge_kernel[(B, Hq)](part_out, part_lse, num_splits, out, out.stride(0), out.stride(1),
                                sinks_arg(sinks_log2, Hq, part_lse), D=D, CHUNK=8,
                                HAS_SINK=sinks_log2 is not None, num_warps=4)
    return out
