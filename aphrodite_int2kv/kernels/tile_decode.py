"""Tile decode: the query rows of one KV head against a sequence's channel-tile records (K 3-bit,
V 2-bit; docs/format.md, "Channel-tile format"), with the scales folded as int2/tile_format.py's
`folded_scores` / `folded_pv` compute them. Returns the output and the log-sum-exp of the scores,
so that a caller merges it with the recent window's part as the split decode merges its splits.

One program per (sequence, KV head), walking the sequence's tiles in order with an online softmax.
Per tile: the K scales fold into the queries once (q' = q * scale), the codes meet q' in one dot,
one q . zero per row is added, and each column is multiplied by its token's norm; for V, p times
each token's norm meets the codes in one dot, and V's scale and zero apply once per channel.

A first, untuned form (fp32 dots, no split over the sequence): the correctness reference for the
engine's kernel to come. Not yet called by the engine. It compiles for every target, but at
head_dim 256 with tiles of 64 it needs 128 KB of shared memory, more than RTX parts allow
(`python -m aphrodite_int2kv.kernels.aot --tile-format`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from aphrodite_int2kv.int2.tile_format import TileLayout, TilePages


@triton.jit
def _e4m3_value(code):
    """e4m3 byte (int32 0..255) -> fp32 value."""
    exp = (code >> 3) & 15
    man = (code & 7).to(tl.float32)
    normal = (1.0 + man * 0.125) * tl.exp2((exp - 7).to(tl.float32))
    value = tl.where(exp == 0, man * (1.0 / 512.0), normal)
    return tl.where((code & 128) != 0, -value, value)


@triton.jit
def _meta(rec_u8, rec_f16, rec, OFF: tl.constexpr, PEAK: tl.constexpr, OFF_PEAKS: tl.constexpr, D: tl.constexpr):
    """A tile's per-channel e4m3 field at byte OFF, as fp32 [1, D] (times its fp16 peak / 448)."""
    code = tl.load(rec_u8 + rec + OFF + tl.arange(0, D)[None, :]).to(tl.int32)
    peak = tl.load(rec_f16 + (rec + OFF_PEAKS) // 2 + PEAK).to(tl.float32)
    unit = tl.where(peak > 0, peak / 448.0, 1.0)
    return _e4m3_value(code) * unit


@triton.jit
def _unpack(rec_u8, base, T: tl.constexpr, D: tl.constexpr, PLANES: tl.constexpr, BITS: tl.constexpr):
    """Codes [T, D] int32 from T tokens' planar bytes [T, D / PLANES] at `base`."""
    W: tl.constexpr = D // PLANES
    e = tl.arange(0, D)
    byte = tl.load(rec_u8 + base + tl.arange(0, T)[:, None] * W + (e % W)[None, :]).to(tl.int32)
    return (byte >> ((e // W) * BITS)[None, :]) & ((1 << BITS) - 1)


@triton.jit
def _tile_decode_kernel(
    q_ptr,                       # [B, Hkv, R, D] fp32 rotated queries (R rows per KV head, padded)
    rec_u8, rec_f16,             # the records' memory as uint8 and fp16 (int2/tile_format.py TilePages)
    table_ptr,                   # [B, MAX_TILES] int32: each sequence's record rows, in order
    ntok_ptr,                    # [B] int32: tokens of each sequence held in tiles
    out_ptr, lse_ptr,            # [B, Hkv, R, D] fp32, [B, Hkv, R] fp32
    stride_qb, stride_qh, stride_page, stride_head, stride_tb, stride_ob, stride_oh, stride_lb, stride_lh,
    sm_scale,
    R: tl.constexpr, T: tl.constexpr, D: tl.constexpr, PER_PAGE: tl.constexpr, TILE_BYTES: tl.constexpr,
    OFF_KH: tl.constexpr, OFF_V: tl.constexpr, OFF_KN: tl.constexpr, OFF_VN: tl.constexpr,
    OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr, OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr,
    OFF_PEAKS: tl.constexpr, SINKS: tl.constexpr = 0,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    rows = tl.arange(0, R)
    cols = tl.arange(0, D)
    toks = tl.arange(0, T)
    q = tl.load(q_ptr + seq * stride_qb + head * stride_qh + rows[:, None] * D + cols[None, :])
    n = tl.load(ntok_ptr + seq)
    m = tl.full([R], float("-inf"), tl.float32)
    l = tl.zeros([R], tl.float32)
    acc = tl.zeros([R, D], tl.float32)
    for i in range(0, tl.cdiv(n, T)):
        r = tl.load(table_ptr + seq * stride_tb + i).to(tl.int64)
        rec = (r // PER_PAGE) * stride_page + head * stride_head + (r % PER_PAGE) * TILE_BYTES
        k_codes = _unpack(rec_u8, rec, T, D, 4, 2) | (_unpack(rec_u8, rec + OFF_KH, T, D, 8, 1) << 2)
        k_norm = tl.load(rec_f16 + (rec + OFF_KN) // 2 + toks).to(tl.float32)
        k_scale = _meta(rec_u8, rec_f16, rec, OFF_KS, 0, OFF_PEAKS, D)
        k_zero = _meta(rec_u8, rec_f16, rec, OFF_KZ, 1, OFF_PEAKS, D)
        dots = tl.dot(q * k_scale, tl.trans(k_codes.to(tl.float32)), input_precision="ieee")     # [R, T]
        s = (dots + tl.sum(q * k_zero, axis=1)[:, None]) * k_norm[None, :] * sm_scale
        pos = i * T + toks
        s = tl.where(((pos < n) & (pos >= SINKS))[None, :], s, float("-inf"))   # sinks: read in full precision
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        v_codes = _unpack(rec_u8, rec + OFF_V, T, D, 4, 2).to(tl.float32)
        v_norm = tl.load(rec_f16 + (rec + OFF_VN) // 2 + toks).to(tl.float32)
        pn = p * v_norm[None, :]
        pv = tl.dot(pn, v_codes, input_precision="ieee")                                          # [R, D]
        v_scale = _meta(rec_u8, rec_f16, rec, OFF_VS, 2, OFF_PEAKS, D)
        v_zero = _meta(rec_u8, rec_f16, rec, OFF_VZ, 3, OFF_PEAKS, D)
        acc = acc * alpha[:, None] + pv * v_scale + tl.sum(pn, axis=1)[:, None] * v_zero
        m = m_new
    safe = tl.where(l > 0, l, 1.0)
    tl.store(out_ptr + seq * stride_ob + head * stride_oh + rows[:, None] * D + cols[None, :], acc / safe[:, None])
    tl.store(lse_ptr + seq * stride_lb + head * stride_lh + rows, tl.where(l > 0, m + tl.log(safe), float("-inf")))


def tile_decode(q_rot: torch.Tensor, records: torch.Tensor | TilePages, tile_table: torch.Tensor, tokens: torch.Tensor,
                layout: TileLayout, sm_scale: float, sinks: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """q_rot [B, Hkv, R, D] (rotated queries, R rows per KV head, a power of 2 >= 16); records
    [NR, Hkv, tile_bytes] uint8; tile_table [B, max_tiles] int32 (each sequence's record rows in
    order); tokens [B] int32 (each sequence's tokens held in tiles); the first `sinks` positions
    are left to the caller, who reads them in full precision -> (out [B, Hkv, R, D] fp32, lse
    [B, Hkv, R] fp32; -inf where a sequence has no token here)."""
    B, H, R, D = q_rot.shape
    if D != layout.head_dim or R < 16 or R & (R - 1):
        raise ValueError(f"tile_decode: queries {tuple(q_rot.shape)}: head_dim {layout.head_dim} and a power-of-2 "
                         f"number of rows >= 16 (pad the query heads of a KV head)")
    if isinstance(records, torch.Tensor):
        if records.dtype != torch.uint8 or records.shape[1:] != (H, layout.tile_bytes) or not records.is_contiguous():
            raise ValueError(f"tile_decode: records must be contiguous uint8 [N, {H}, {layout.tile_bytes}]")
        records = TilePages.of_records(records, layout)
    q = q_rot.float().contiguous()
    out = torch.empty_like(q)
    lse = torch.empty(B, H, R, dtype=torch.float32, device=q.device)
    L = layout
    _tile_decode_kernel[(B, H)](
        q, records.flat, records.as_f16(), tile_table, tokens, out, lse,
        q.stride(0), q.stride(1), records.page_stride, records.head_stride, tile_table.stride(0),
        out.stride(0), out.stride(1), lse.stride(0), lse.stride(1), sm_scale,
        R=R, T=L.tile, D=D, PER_PAGE=records.per_page, TILE_BYTES=L.tile_bytes, OFF_KH=L.k_high, OFF_V=L.v_codes, OFF_KN=L.k_norm, OFF_VN=L.v_norm, OFF_KS=L.k_scale,
        OFF_KZ=L.k_zero, OFF_VS=L.v_scale, OFF_VZ=L.v_zero, OFF_PEAKS=L.peaks, SINKS=sinks, num_warps=4)
    return out, lse
