"""Tile store: one tile of T rotated tokens of one KV head -> its channel-tile record (K 3- or
4-bit, V 2-bit, norm-balanced, e4m3 metadata; byte layout in docs/format.md, "Channel-tile format").

One program per (tile, KV head). The arithmetic is int2/tiles.py's `encode_channel_tile`, written
out: each token divided by its fp16 norm; per channel the min / max over the tile's tokens (the
first `exclude` tokens of a tile, attention sinks read in full precision, left out); the zero,
then the scale, as e4m3 under an fp16 peak per tile; codes rounded against the stored values.
e4m3 is encoded with integer operations (round to nearest even) rather than fp8 conversions,
which GPUs before sm_89 lack.

The engine (APHRODITE_INT2KV_FORMAT=tiles) calls it with the tiles that the step's new tokens
completed, gathered from the recent window and the step's K/V; records are addressed through
int2/tile_format.py's TilePages (the engine's pages hold several tiles per KV head).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from aphrodite_int2kv.int2.tile_format import V_BITS, TileLayout, TilePages

FP16_MAX = tl.constexpr(65504.0)
E4M3_MAX = tl.constexpr(448.0)
E4M3_MIN_NORMAL = tl.constexpr(0.015625)     # 2^-6; below it e4m3 steps by 2^-9


@triton.jit
def _e4m3(x):
    """fp32 x in [-448, 448] -> (the e4m3 byte as int32, its value as fp32), round to nearest even,
    as torch's x.to(torch.float8_e4m3fn)."""
    a = tl.abs(x)
    bits = a.to(tl.int32, bitcast=True)
    lsb = (bits >> 20) & 1
    rounded = bits + 0x7FFFF + lsb                        # to 3 mantissa bits, ties to even
    normal_code = (((rounded >> 23) - 120) << 3) | ((rounded >> 20) & 7)    # exponent bias 127 -> 7
    normal_value = (rounded & -1048576).to(tl.float32, bitcast=True)        # mantissa bits below 20 cleared
    q = a * 512.0                                          # subnormal steps of 2^-9
    f = tl.floor(q)
    d = q - f
    up = (d > 0.5) | ((d == 0.5) & ((f.to(tl.int32) & 1) == 1))
    sub = f + up.to(tl.float32)
    small = a < E4M3_MIN_NORMAL
    code = tl.where(small, sub.to(tl.int32), normal_code)
    value = tl.where(small, sub * (1.0 / 512.0), normal_value)
    neg = x.to(tl.int32, bitcast=True) < 0                # the sign bit: -0.0 too, as torch does
    return tl.where(neg, code | 128, code), tl.where(neg, -value, value)


@triton.jit
def _peak_e4m3(x, axis: tl.constexpr):
    """x [1, D] -> (e4m3 bytes [1, D], their values [1, D], the fp16 peak): x / (peak / 448) in e4m3."""
    peak = tl.max(tl.abs(x), axis=axis, keep_dims=True).to(tl.float16)
    pf = peak.to(tl.float32)
    unit = tl.where(pf > 0, pf / E4M3_MAX, 1.0)
    code, value = _e4m3(tl.minimum(tl.maximum(x / unit, -E4M3_MAX), E4M3_MAX))
    return code, value * unit, peak


@triton.jit
def _channel_tile(x, keep, LEVELS: tl.constexpr):
    """x [T, D] fp32, keep [T, 1] -> codes [T, D] int32, norm fp16 [T], (scale, zero) bytes and
    fp16 peaks: int2/tiles.py encode_channel_tile with 8-bit metadata."""
    x = tl.where(x == x, x, 0.0)                                          # NaN -> 0
    x = tl.minimum(tl.maximum(x, -FP16_MAX), FP16_MAX)                    # +-Inf -> +-65504
    norm = tl.minimum(tl.sqrt(tl.sum(x * x, axis=1)), FP16_MAX).to(tl.float16)
    nf = norm.to(tl.float32)[:, None]
    u = x / tl.where(nf > 0, nf, 1.0)
    big: tl.constexpr = 3.4028234663852886e38
    lo = tl.min(tl.where(keep, u, big), axis=0, keep_dims=True)
    hi = tl.max(tl.where(keep, u, -big), axis=0, keep_dims=True)
    empty = tl.sum(keep.to(tl.int32), axis=0, keep_dims=True) == 0
    lo = tl.where(empty, 0.0, lo)
    hi = tl.where(empty, 0.0, hi)
    zero_code, zero, zero_peak = _peak_e4m3(lo, 1)
    scale_code, scale, scale_peak = _peak_e4m3((hi - zero) / LEVELS, 1)
    inv = tl.where(scale > 0, 1.0 / tl.where(scale > 0, scale, 1.0), 0.0)
    codes = tl.minimum(tl.maximum(tl.floor((u - zero) * inv + 0.5), 0.0), LEVELS * 1.0).to(tl.int32)
    return codes, norm, scale_code, zero_code, scale_peak, zero_peak


@triton.jit
def _pack(codes, T: tl.constexpr, D: tl.constexpr, PLANES: tl.constexpr, BITS: tl.constexpr):
    """codes [T, D] -> bytes [T, D / PLANES]: byte j of a token holds elements j + p*D/PLANES in bits
    p*BITS .. p*BITS + BITS - 1 (planar, docs/format.md)."""
    W: tl.constexpr = D // PLANES
    planes = tl.reshape(codes, (T, PLANES, W))
    shifts = (tl.arange(0, PLANES) * BITS)[None, :, None]
    return tl.sum(planes << shifts, axis=1).to(tl.uint8)


@triton.jit
def _tile_store_kernel(
    k_ptr, v_ptr,                  # [N, H, T, D] rotated, any float dtype
    excl_ptr,                      # [N] int32: leading tokens of each tile left out of its ranges
    dest_ptr,                      # [N] int64: the record row each tile goes to, -1 = skip
    out_u8, out_f16,               # the records' memory as uint8 and as fp16 (int2/tile_format.py TilePages)
    stride_kn, stride_kh, stride_vn, stride_vh, stride_page, stride_head,
    T: tl.constexpr, D: tl.constexpr, PER_PAGE: tl.constexpr, TILE_BYTES: tl.constexpr,
    OFF_KH: tl.constexpr, OFF_V: tl.constexpr, OFF_KN: tl.constexpr, OFF_VN: tl.constexpr,
    OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr, OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr,
    OFF_PEAKS: tl.constexpr, K_BITS: tl.constexpr, V_BITS: tl.constexpr,
):
    tile = tl.program_id(0)
    head = tl.program_id(1)
    dest = tl.load(dest_ptr + tile).to(tl.int64)
    if dest < 0:
        return
    rec = (dest // PER_PAGE) * stride_page + head * stride_head + (dest % PER_PAGE) * TILE_BYTES   # its first byte
    tokens = tl.arange(0, T)
    channels = tl.arange(0, D)
    at = tokens[:, None] * D + channels[None, :]
    keep = (tokens >= tl.load(excl_ptr + tile))[:, None]
    W4: tl.constexpr = D // 4
    W8: tl.constexpr = D // 8
    low_at = tokens[:, None] * W4 + tl.arange(0, W4)[None, :]
    high_at = tokens[:, None] * W8 + tl.arange(0, W8)[None, :]

    k = tl.load(k_ptr + tile * stride_kn + head * stride_kh + at).to(tl.float32)
    codes, norm, s_code, z_code, s_peak, z_peak = _channel_tile(k, keep, (1 << K_BITS) - 1)
    tl.store(out_u8 + rec + low_at, _pack(codes & 3, T, D, 4, 2))
    if K_BITS == 3:      # the high bits: a bit plane
        tl.store(out_u8 + rec + OFF_KH + high_at, _pack(codes >> 2, T, D, 8, 1))
    else:                # the high two bits: planar, as the low ones
        tl.store(out_u8 + rec + OFF_KH + low_at, _pack(codes >> 2, T, D, 4, 2))
    tl.store(out_f16 + (rec + OFF_KN) // 2 + tokens, norm)
    tl.store(out_u8 + rec + OFF_KS + channels[None, :], s_code.to(tl.uint8))
    tl.store(out_u8 + rec + OFF_KZ + channels[None, :], z_code.to(tl.uint8))
    tl.store(out_f16 + (rec + OFF_PEAKS) // 2 + tl.zeros([1, 1], tl.int32), s_peak)
    tl.store(out_f16 + (rec + OFF_PEAKS) // 2 + 1 + tl.zeros([1, 1], tl.int32), z_peak)

    v = tl.load(v_ptr + tile * stride_vn + head * stride_vh + at).to(tl.float32)
    codes, norm, s_code, z_code, s_peak, z_peak = _channel_tile(v, keep, (1 << V_BITS) - 1)
    tl.store(out_u8 + rec + OFF_V + low_at, _pack(codes, T, D, 4, 2))
    tl.store(out_f16 + (rec + OFF_VN) // 2 + tokens, norm)
    tl.store(out_u8 + rec + OFF_VS + channels[None, :], s_code.to(tl.uint8))
    tl.store(out_u8 + rec + OFF_VZ + channels[None, :], z_code.to(tl.uint8))
    tl.store(out_f16 + (rec + OFF_PEAKS) // 2 + 2 + tl.zeros([1, 1], tl.int32), s_peak)
    tl.store(out_f16 + (rec + OFF_PEAKS) // 2 + 3 + tl.zeros([1, 1], tl.int32), z_peak)


def tile_store(k_rot: torch.Tensor, v_rot: torch.Tensor, exclude: torch.Tensor, dest: torch.Tensor,
               records: torch.Tensor | TilePages, layout: TileLayout) -> None:
    """Quantize tiles k_rot, v_rot [N, H, T, D] (rotated) into records (uint8 [R, H, tile_bytes], or
    the engine's pages as TilePages) at record indices dest [N] int64 (-1: skip); exclude [N] int32:
    leading tokens of each tile left out of its ranges. The padding bytes of a record are left as
    they are."""
    N, H, T, D = k_rot.shape
    if (T, D) != (layout.tile, layout.head_dim) or v_rot.shape != k_rot.shape:
        raise ValueError(f"tile_store: K {tuple(k_rot.shape)} / V {tuple(v_rot.shape)}, expected [N, H, "
                         f"{layout.tile}, {layout.head_dim}]")
    if isinstance(records, torch.Tensor):
        if records.dtype != torch.uint8 or records.shape[1:] != (H, layout.tile_bytes) or not records.is_contiguous():
            raise ValueError(f"tile_store: records must be contiguous uint8 [R, {H}, {layout.tile_bytes}], got "
                             f"{records.dtype} {tuple(records.shape)}")
        records = TilePages.of_records(records, layout)
    if N == 0:     # (an empty tensor's strides are arbitrary)
        return
    if k_rot.stride(-1) != 1 or k_rot.stride(-2) != D or v_rot.stride(-1) != 1 or v_rot.stride(-2) != D:
        raise ValueError("tile_store: each tile's [T, D] block must be contiguous")
    L = layout
    _tile_store_kernel[(N, H)](
        k_rot, v_rot, exclude, dest, records.flat, records.as_f16(),
        k_rot.stride(0), k_rot.stride(1), v_rot.stride(0), v_rot.stride(1), records.page_stride, records.head_stride,
        T=T, D=D, PER_PAGE=records.per_page, TILE_BYTES=L.tile_bytes, OFF_KH=L.k_high, OFF_V=L.v_codes, OFF_KN=L.k_norm, OFF_VN=L.v_norm, OFF_KS=L.k_scale,
        OFF_KZ=L.k_zero, OFF_VS=L.v_scale, OFF_VZ=L.v_zero, OFF_PEAKS=L.peaks,
        K_BITS=L.k_bits, V_BITS=V_BITS, num_warps=8)
