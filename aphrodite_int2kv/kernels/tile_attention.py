"""Attention over the channel-tile cache (APHRODITE_INT2KV_FORMAT=tiles; byte layout in
docs/format.md, "Channel-tile format"): new query tokens attend to their sequence's tile records
(the prefix before the recent window), to the recent window in full precision, and causally to
the chunk's own K/V in full precision. Prefill chunks and decodes (chunks of one token) alike.

Grid (cdiv(max_query_len, BLOCK_M), num_q_heads, batch); one program = BLOCK_M query tokens of
one query head; its KV head is q_head // RATIO. Inputs and output are in the rotated basis.

Per tile of T tokens: K's per-channel scales fold into the query (q' = q * scale, one quarter of
the head at a time), the 3- or 4-bit codes meet q' in one dot, one q . zero per row is added, and each
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
from aphrodite_int2kv.kernels.common import (LOG2E, chunk_queries, chunk_span, empty_state, magic_bits, softmax_step,
                                             store_chunk_rows, window_span, with_sink_logit)
from aphrodite_int2kv.kernels import interpreting
from aphrodite_int2kv.kernels.decode import _window_args, dot_dtype


# The codes enter the tensor cores as exact fp16 (the magic-number trick of common.py): a tile's
# K low-plane, K high-plane and V bytes are each loaded once, and channel quarter c is unpacked
# from them by 3 (K) or 1.75 (V) instructions per code instead of shifts, masks and an integer to
# float conversion per code. K: the two low bits sit at bits 2c, 2c + 1 of the low byte; the high
# bit, once the tile's high bytes are shifted per column (k_high_bytes), at bit 2c; spread into
# fp16 halves (PRMT), the high bit moved to bit 2c + 2 (SHL), both OR-ed into the mantissa of
# M_c = 2**(10 - 2c) (LOP3), whose unit in the last place is 4**-c, so the half reads M_c + code.
# 4-bit keys: the high plane is planar like the low one (bits 2c, 2c + 1 of the same column), so
# the same instructions with a two-bit mask put it at bits 2c + 2, 2c + 3 (at most bit 9 of the
# 10-bit mantissa, for c = 3).
_K_ASM = """{{
.reg .b32 lo, hi, a, b, m;
prmt.b32 lo, $2, 0, 0x5140;
prmt.b32 hi, $2, 0, 0x5342;
prmt.b32 a, $3, 0, 0x5140;
prmt.b32 b, $3, 0, 0x5342;
shl.b32 a, a, 2;
shl.b32 b, b, 2;
lop3.b32 lo, lo, {mask}, {magic}, 0xEA;
lop3.b32 hi, hi, {mask}, {magic}, 0xEA;
lop3.b32 lo, a, {high}, lo, 0xEA;
lop3.b32 hi, b, {high}, hi, 0xEA;
mov.b32 m, {magic};
sub.f16x2 $0, lo, m;
sub.f16x2 $1, hi, m;
}}
"""
_V2_ASM = """{{
.reg .b32 lo, hi, m;
prmt.b32 lo, $2, 0, 0x5140;
prmt.b32 hi, $2, 0, 0x5342;
lop3.b32 lo, lo, {mask}, {magic}, 0xEA;
lop3.b32 hi, hi, {mask}, {magic}, 0xEA;
mov.b32 m, {magic};
sub.f16x2 $0, lo, m;
sub.f16x2 $1, hi, m;
}}
"""


def _k_asm(c: int, high_bits: int) -> str:
    mask = (1 << high_bits) - 1
    return _K_ASM.format(**magic_bits(c), high=hex(((mask << 16 | mask) << (2 * c + 2)) & 0xFFFFFFFF))


K3_ASM_0 = tl.constexpr(_k_asm(0, 1))
K3_ASM_1 = tl.constexpr(_k_asm(1, 1))
K3_ASM_2 = tl.constexpr(_k_asm(2, 1))
K3_ASM_3 = tl.constexpr(_k_asm(3, 1))
K4_ASM_0 = tl.constexpr(_k_asm(0, 2))
K4_ASM_1 = tl.constexpr(_k_asm(1, 2))
K4_ASM_2 = tl.constexpr(_k_asm(2, 2))
K4_ASM_3 = tl.constexpr(_k_asm(3, 2))
V2_ASM_0 = tl.constexpr(_V2_ASM.format(**magic_bits(0)))
V2_ASM_1 = tl.constexpr(_V2_ASM.format(**magic_bits(1)))
V2_ASM_2 = tl.constexpr(_V2_ASM.format(**magic_bits(2)))
V2_ASM_3 = tl.constexpr(_V2_ASM.format(**magic_bits(3)))


@triton.jit
def _e4m3_scaled(code):
    """e4m3 bytes (int32 0..255) -> their values / 256 as fp16, exactly and in 3 integer operations:
    the exponent and mantissa bits moved into fp16's (whose exponent bias, 15 instead of 7, makes
    the 2**-8; e4m3's subnormals land on fp16's) by a shift of 7, which puts the sign at bit 14:
    adding the sign bit to itself first carries it to bit 15."""
    bits = (code + (code & 0x80)) << 7
    return bits.to(tl.uint16).to(tl.float16, bitcast=True)


@triton.jit
def _unit(rec_f16, rec, OFF_PEAKS: tl.constexpr, which: tl.constexpr):
    """256 times the value of one e4m3 step of a record's field `which` (K scale, K zero, V scale,
    V zero): its fp16 peak / 448 (1 where the peak is 0), times 256 for _e4m3_scaled."""
    peak = tl.load(rec_f16 + (rec + OFF_PEAKS) // 2 + which).to(tl.float32)
    return tl.where(peak > 0, peak * (256.0 / 448.0), 256.0)


@triton.jit
def _quarter_meta(rec_u8, rec, OFF: tl.constexpr, unit, c: tl.constexpr, W: tl.constexpr):
    """Channels [c W, (c + 1) W) of a per-channel e4m3 field at byte OFF of a record, fp32 [1, W]."""
    code = tl.load(rec_u8 + rec + OFF + c * W + tl.arange(0, W)).to(tl.int32)
    return (_e4m3_scaled(code).to(tl.float32) * unit)[None, :]


@triton.jit
def _plane_bytes(rec_u8, base, T: tl.constexpr, W: tl.constexpr):
    """The T tokens' planar bytes [T, W] at `base`: byte j of a token holds channel j + c W in bits
    2c, 2c + 1 (c = 0..3)."""
    return tl.load(rec_u8 + base + tl.arange(0, T)[:, None] * W + tl.arange(0, W)[None, :])


@triton.jit
def k_high_bytes(rec_u8, rec, T: tl.constexpr, D: tl.constexpr, W: tl.constexpr, OFF_KH: tl.constexpr,
                 K_BITS: tl.constexpr):
    """K's high bits as [T, W] bytes aligned with the low plane: the high bit(s) of channel j + c W
    from bit 2c of column j. 3-bit keys: the record's byte j % (D/8) holds channel j + c W's at bit
    2c + j // (D/8); 4-bit keys: the high plane is planar, as the low one."""
    if K_BITS == 4:
        return _plane_bytes(rec_u8, rec + OFF_KH, T, W)
    D8: tl.constexpr = D // 8
    cols = tl.arange(0, W)
    high = tl.load(rec_u8 + rec + OFF_KH + tl.arange(0, T)[:, None] * D8 + (cols % D8)[None, :])
    return high >> (cols // D8).to(tl.uint8)[None, :]


@triton.jit
def k_codes(low, high, c: tl.constexpr, K_BITS: tl.constexpr, DOT: tl.constexpr, FAST: tl.constexpr):
    """Quarter c's 3- or 4-bit K codes [T, W] as DOT, from the low-plane and aligned high bytes."""
    if FAST and DOT == tl.float16:
        if c == 0:
            asm: tl.constexpr = K4_ASM_0 if K_BITS == 4 else K3_ASM_0
        elif c == 1:
            asm: tl.constexpr = K4_ASM_1 if K_BITS == 4 else K3_ASM_1
        elif c == 2:
            asm: tl.constexpr = K4_ASM_2 if K_BITS == 4 else K3_ASM_2
        else:
            asm: tl.constexpr = K4_ASM_3 if K_BITS == 4 else K3_ASM_3
        return tl.inline_asm_elementwise(asm, "=r,=r,r,r", [low, high], dtype=tl.float16, is_pure=True, pack=4)
    else:
        high_mask: tl.constexpr = (1 << (K_BITS - 2)) - 1
        code = ((low.to(tl.int32) >> (2 * c)) & 3) | (((high.to(tl.int32) >> (2 * c)) & high_mask) << 2)
        return code.to(DOT)


@triton.jit
def v_codes(vbytes, c: tl.constexpr, DOT: tl.constexpr, FAST: tl.constexpr):
    """Quarter c's 2-bit V codes [T, W] as DOT."""
    if FAST and DOT == tl.float16:
        if c == 0:
            asm: tl.constexpr = V2_ASM_0
        elif c == 1:
            asm: tl.constexpr = V2_ASM_1
        elif c == 2:
            asm: tl.constexpr = V2_ASM_2
        else:
            asm: tl.constexpr = V2_ASM_3
        return tl.inline_asm_elementwise(asm, "=r,=r,r", [vbytes], dtype=tl.float16, is_pure=True, pack=4)
    else:
        return ((vbytes.to(tl.int32) >> (2 * c)) & 3).to(DOT)


@triton.jit
def _k_quarter(q, low, high, rec_u8, rec, ks_unit, kz_unit, c: tl.constexpr, W: tl.constexpr,
               OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr, K_BITS: tl.constexpr, DOT: tl.constexpr,
               FAST: tl.constexpr):
    """One quarter of the head's channels: (q' . codes [ROWS, T], q . zero [ROWS])."""
    qf = q.to(tl.float32)
    scale = _quarter_meta(rec_u8, rec, OFF_KS, ks_unit, c, W)
    zero = _quarter_meta(rec_u8, rec, OFF_KZ, kz_unit, c, W)
    dots = tl.dot((qf * scale).to(DOT), tl.trans(k_codes(low, high, c, K_BITS, DOT, FAST)))
    return dots, tl.sum(qf * zero, axis=1)


@triton.jit
def _v_quarter(acc, alpha, pn, pn_sum, vbytes, rec_u8, rec, vs_unit, vz_unit, c: tl.constexpr, W: tl.constexpr,
               OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr, DOT: tl.constexpr, FAST: tl.constexpr):
    pv = tl.dot(pn, v_codes(vbytes, c, DOT, FAST))
    return (acc * alpha[:, None] + pv * _quarter_meta(rec_u8, rec, OFF_VS, vs_unit, c, W)
            + pn_sum[:, None] * _quarter_meta(rec_u8, rec, OFF_VZ, vz_unit, c, W))


@triton.jit
def tile_span(m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, t0, t1, lo, hi, table_row, head_off, stride_page,
              rec_u8, rec_f16, qk_scale, BLOCK_SIZE: tl.constexpr, T: tl.constexpr, D: tl.constexpr,
              W: tl.constexpr, TILE_BYTES: tl.constexpr, OFF_KH: tl.constexpr, OFF_V: tl.constexpr,
              OFF_KN: tl.constexpr, OFF_VN: tl.constexpr, OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr,
              OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr, OFF_PEAKS: tl.constexpr, K_BITS: tl.constexpr,
              DOT: tl.constexpr, FAST: tl.constexpr):
    """Tiles [t0, t1) of one sequence from its tile records, positions outside [lo, hi) masked (lo:
    the sinks, read from the window, left out of tile 0's record): tile i of the
    sequence is record (i T % BLOCK_SIZE) / T of page table_row[i T / BLOCK_SIZE]. Rows are query
    rows of one KV head: a chunk's tokens (prefill) or a KV group's query heads (split decode).
    Each of a record's code planes is loaded once (16-byte loads) and its four quarters unpacked
    from the same registers."""
    toks = tl.arange(0, T)
    for i in range(t0, t1):
        first = i * T
        page = tl.load(table_row + first // BLOCK_SIZE).to(tl.int64)
        rec = page * stride_page + head_off + ((first % BLOCK_SIZE) // T) * TILE_BYTES
        ks_unit = _unit(rec_f16, rec, OFF_PEAKS, 0)
        kz_unit = _unit(rec_f16, rec, OFF_PEAKS, 1)
        vs_unit = _unit(rec_f16, rec, OFF_PEAKS, 2)
        vz_unit = _unit(rec_f16, rec, OFF_PEAKS, 3)
        low = _plane_bytes(rec_u8, rec, T, W)
        high = k_high_bytes(rec_u8, rec, T, D, W, OFF_KH, K_BITS)
        d0, z0 = _k_quarter(q0, low, high, rec_u8, rec, ks_unit, kz_unit, 0, W, OFF_KS, OFF_KZ, K_BITS,
                            DOT, FAST)
        d1, z1 = _k_quarter(q1, low, high, rec_u8, rec, ks_unit, kz_unit, 1, W, OFF_KS, OFF_KZ, K_BITS,
                            DOT, FAST)
        d2, z2 = _k_quarter(q2, low, high, rec_u8, rec, ks_unit, kz_unit, 2, W, OFF_KS, OFF_KZ, K_BITS,
                            DOT, FAST)
        d3, z3 = _k_quarter(q3, low, high, rec_u8, rec, ks_unit, kz_unit, 3, W, OFF_KS, OFF_KZ, K_BITS,
                            DOT, FAST)
        k_norm = tl.load(rec_f16 + (rec + OFF_KN) // 2 + toks).to(tl.float32)
        s = (d0 + d1 + d2 + d3 + (z0 + z1 + z2 + z3)[:, None]) * k_norm[None, :]
        s = tl.where(((first + toks >= lo) & (first + toks < hi))[None, :], s * qk_scale, float("-inf"))
        m_i, l_i, alpha, p = softmax_step(m_i, l_i, s)
        pn = p * tl.load(rec_f16 + (rec + OFF_VN) // 2 + toks).to(tl.float32)[None, :]
        pn_sum = tl.sum(pn, axis=1)
        pn = pn.to(DOT)
        vbytes = _plane_bytes(rec_u8, rec + OFF_V, T, W)
        acc0 = _v_quarter(acc0, alpha, pn, pn_sum, vbytes, rec_u8, rec, vs_unit, vz_unit, 0, W, OFF_VS, OFF_VZ, DOT, FAST)
        acc1 = _v_quarter(acc1, alpha, pn, pn_sum, vbytes, rec_u8, rec, vs_unit, vz_unit, 1, W, OFF_VS, OFF_VZ, DOT, FAST)
        acc2 = _v_quarter(acc2, alpha, pn, pn_sum, vbytes, rec_u8, rec, vs_unit, vz_unit, 2, W, OFF_VS, OFF_VZ, DOT, FAST)
        acc3 = _v_quarter(acc3, alpha, pn, pn_sum, vbytes, rec_u8, rec, vs_unit, vz_unit, 3, W, OFF_VS, OFF_VZ, DOT, FAST)
    return m_i, l_i, acc0, acc1, acc2, acc3


@triton.jit(do_not_specialize_on_alignment=["block_table_ptr", "seq_lens_ptr", "query_start_ptr", "wbt_ptr"])
def _tile_attention_kernel(
    q_ptr, stride_qt, stride_qh,                 # [T, Hq, D] rotated queries
    k_ptr, v_ptr, stride_kt, stride_kh, stride_vt, stride_vh,   # [T, Hkv, D] rotated chunk K/V
    out_ptr, stride_ot, stride_oh,               # [T, Hq, D]
    rec_u8, rec_f16, stride_page, stride_head,   # the tile records (int2/tile_format.py TilePages)
    block_table_ptr, stride_bt, query_start_ptr, seq_lens_ptr,
    qk_scale, sink_ptr,                          # sink_ptr: [Hq] learned sink logits, log2 units (HAS_SINK)
    wk_ptr, wv_ptr, stride_wb, stride_ws, stride_wh, wbt_ptr, stride_wbt,   # recent window (decode.py)
    BLOCK_SIZE: tl.constexpr, T: tl.constexpr, D: tl.constexpr, RATIO: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TILE_BYTES: tl.constexpr,
    OFF_KH: tl.constexpr, OFF_V: tl.constexpr, OFF_KN: tl.constexpr, OFF_VN: tl.constexpr,
    OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr, OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr,
    OFF_PEAKS: tl.constexpr, K_BITS: tl.constexpr, DOT: tl.constexpr, FAST: tl.constexpr, WINDOW: tl.constexpr,
    WBS: tl.constexpr, RING: tl.constexpr, SINKS: tl.constexpr, HAS_SINK: tl.constexpr,
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
        OFF_KH, OFF_V, OFF_KN, OFF_VN, OFF_KS, OFF_KZ, OFF_VS, OFF_VZ, OFF_PEAKS, K_BITS, DOT, FAST)
    m_i, l_i, acc0, acc1, acc2, acc3 = window_span(
        m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, win_start, prefix_len,
        wbt_ptr + batch * stride_wbt, kv_head * stride_wh, stride_wb, stride_ws, wk_ptr, wv_ptr,
        qk_scale, no_center, WBS, RING, BLOCK_M, BLOCK_N, W, DOT, 0)
    # The chunk itself in full precision, causal.
    m_i, l_i, acc0, acc1, acc2, acc3 = chunk_span(
        m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, rows, tl.minimum(q_len, (q_block + 1) * BLOCK_M),
        k_ptr + q_start * stride_kt + kv_head * stride_kh, v_ptr + q_start * stride_vt + kv_head * stride_vh,
        stride_kt, stride_vt, qk_scale, BLOCK_N, W, DOT)
    if HAS_SINK:
        m_i, l_i, acc0, acc1, acc2, acc3 = with_sink_logit(m_i, l_i, acc0, acc1, acc2, acc3,
                                                           tl.load(sink_ptr + q_head))

    store_chunk_rows(out_ptr, q_start, rows, rmask, q_head, stride_ot, stride_oh, l_i, acc0, acc1, acc2, acc3, W)


def sink_log2(sink_logits):
    """[Hq] learned attention-sink logits (gpt-oss) -> the kernels' `sinks_log2` argument: fp32 in
    log2 units. Made once per set of weights by the caller (the layer's parameter is fixed after
    loading), not at every launch."""
    return sink_logits.float() * LOG2E


def sinks_arg(sinks_log2, num_q_heads: int, like):
    """The kernels' sink pointer: `sinks_log2` checked ([Hq] fp32), or a placeholder pointer when
    there are none (HAS_SINK=False)."""
    if sinks_log2 is None:
        return like
    if sinks_log2.shape != (num_q_heads,) or sinks_log2.dtype != torch.float32:
        raise ValueError(f"tile kernels: {tuple(sinks_log2.shape)} {sinks_log2.dtype} sink logits for {num_q_heads} "
                         f"query heads (expected [{num_q_heads}] float32 from sink_log2)")
    return sinks_log2


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
                OFF_KZ=L.k_zero, OFF_VS=L.v_scale, OFF_VZ=L.v_zero, OFF_PEAKS=L.peaks, K_BITS=L.k_bits,
                WINDOW=int(window[3]), WBS=wbs, RING=wbs - sinks if ring else 0, SINKS=sinks)


def tile_attention(q_rot, k_rot, v_rot, pages: TilePages, block_table, query_start_loc, seq_lens,
                   max_query_len: int, sm_scale: float, window, out=None, sinks: int = 0, ring: bool = False,
                   block_m: int | None = None, block_n: int = 32, sinks_log2=None):
    """q_rot [N, Hq, D], k_rot/v_rot [N, Hkv, D] (the step's new tokens, rotated) -> out [N, Hq, D]
    (rotated). Request b's new tokens are query_start_loc[b] .. [b+1], the last of its seq_lens[b];
    its prefix is read from its tile records (through block_table's pages) up to the window of the
    chunk's first token, and from the recent window `window` = (k_win, v_win, table, R) after it;
    its first `sinks` positions from the window too (paged, or a `ring`: kernels/common.py window_slot).
    Decodes are chunks of one token (their own K/V come in k_rot / v_rot). sinks_log2: [Hq] learned
    attention-sink logits (gpt-oss) as sink_log2 gives them, one more softmax score per query head
    with a zero value."""
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
        sm_scale * LOG2E, sinks_arg(sinks_log2, Hq, q_rot),
        *_window_args(window, q_rot),
        RATIO=Hq // Hkv, BLOCK_M=block_m, BLOCK_N=block_n, DOT=dot_dtype(q_rot.dtype), FAST=not interpreting(),
        HAS_SINK=sinks_log2 is not None, num_warps=4,
        **record_constants(pages, window, sinks, ring),
    )
    return out
