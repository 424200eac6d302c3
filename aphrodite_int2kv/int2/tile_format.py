"""Byte layout of one token tile of the channel-tile format (K 3- or 4-bit, V 2-bit; int2/tiles.py),
for one KV head, and its exact encode / decode in plain torch: what a store kernel writes when a
tile of `tile` tokens leaves the recent window, and what a decode kernel reads.

The layout is documented once, in docs/format.md ("Channel-tile format"): K codes (low 2-bit
plane, then the high plane: one bit, or with 4-bit keys two bits, per code), V codes, K and V norms (fp16 per token), K scale / zero and V
scale / zero (e4m3 per channel), their four fp16 peaks, padding to 16 bytes.

Element e of token t reads back as ``norm[t] * (code[t, e] * scale[e] + zero[e])`` in the rotated
basis. In a decode step the scales fold into the query once per tile (q' = q * k_scale) and the
zeros give one scalar q . k_zero per tile, so a score is ``k_norm[t] * (q' . code[t] + q . k_zero)``;
P.V takes p * v_norm and applies V's scale and zero once per tile and channel.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from aphrodite_int2kv.int2.format import PLANES, Int2ConfigError
from aphrodite_int2kv.int2.quantizer import pack_planar, unpack_planar
from aphrodite_int2kv.int2.tiles import _meta, decode_channel_tile, encode_channel_tile

TILES = (32, 64)
HEAD_DIMS = (64, 128, 256)
ALIGN = 16       # bytes: 16-byte vector loads; a record is also a whole number of bytes per token
K_BITS = (3, 4)  # key bits: 3 (the default) or 4 (APHRODITE_INT2KV_K_BITS)
V_BITS = 2


@dataclasses.dataclass(frozen=True)
class TileLayout:
    head_dim: int
    tile: int
    k_bits: int = 3

    def __post_init__(self):
        if self.k_bits not in K_BITS:
            raise Int2ConfigError(f"int2 tile format: {self.k_bits}-bit keys are not one of {K_BITS}")
        if self.head_dim not in HEAD_DIMS:
            raise Int2ConfigError(f"int2 tile format: head_dim {self.head_dim} is not one of {HEAD_DIMS}")
        if self.tile not in TILES:
            raise Int2ConfigError(f"int2 tile format: a tile of {self.tile} tokens is not one of {TILES}")

    @property
    def k_low(self) -> int:
        return 0

    @property
    def k_high(self) -> int:
        return self.tile * self.head_dim // 4

    @property
    def high_bits(self) -> int:
        """Bits per K code in the high plane: 1 (3-bit keys, a bit plane) or 2 (4-bit, planar)."""
        return self.k_bits - 2

    @property
    def v_codes(self) -> int:
        return self.k_high + self.tile * self.head_dim * self.high_bits // 8

    @property
    def k_norm(self) -> int:
        return self.v_codes + self.tile * self.head_dim // 4

    @property
    def v_norm(self) -> int:
        return self.k_norm + 2 * self.tile

    @property
    def k_scale(self) -> int:
        return self.v_norm + 2 * self.tile

    @property
    def k_zero(self) -> int:
        return self.k_scale + self.head_dim

    @property
    def v_scale(self) -> int:
        return self.k_zero + self.head_dim

    @property
    def v_zero(self) -> int:
        return self.v_scale + self.head_dim

    @property
    def peaks(self) -> int:
        return self.v_zero + self.head_dim

    @property
    def used_bytes(self) -> int:
        return self.peaks + 8

    @property
    def tile_bytes(self) -> int:
        """The record padded to a multiple of 16 bytes and of the tile's tokens, so that a page of
        whole tiles is a whole number of bytes per token (what the engine sizes pages by)."""
        unit = math.lcm(ALIGN, self.tile)
        return -(-self.used_bytes // unit) * unit

    @property
    def token_bytes(self) -> int:
        """Bytes per token and KV head, as the engine counts a page of whole tiles."""
        return self.tile_bytes // self.tile

    def bits_per_element(self) -> float:
        """Stored bits per K or V element, everything in the record counted (padding too)."""
        return 8 * self.tile_bytes / (2 * self.tile * self.head_dim)

    def ratio_vs(self, elem_bytes: int = 2) -> float:
        return 2 * self.tile * self.head_dim * elem_bytes / self.tile_bytes


@dataclasses.dataclass(frozen=True)
class TilePages:
    """Where tile records lie: record r of KV head h begins at byte
    ``(r // per_page) * page_stride + h * head_stride + (r % per_page) * tile_bytes`` of `flat`
    (uint8, 1-D, even-aligned so that the fp16 fields read through an fp16 view of it).
    Standalone records [R, H, tile_bytes] are pages of one record each (`of_records`); the engine's
    int2 cache holds block_size / T records per page and KV head, heads first (`of_cache`)."""
    flat: torch.Tensor
    page_stride: int
    head_stride: int
    per_page: int
    layout: "TileLayout"

    @classmethod
    def of_records(cls, records: torch.Tensor, layout: "TileLayout") -> "TilePages":
        if records.dtype != torch.uint8 or records.dim() != 3 or records.shape[2] != layout.tile_bytes or \
                not records.is_contiguous():
            raise ValueError(f"tile records must be contiguous uint8 [R, H, {layout.tile_bytes}], got "
                             f"{records.dtype} {tuple(records.shape)}")
        return cls(records.view(-1), records.stride(0), records.stride(1), 1, layout)

    @classmethod
    def of_cache(cls, cache: torch.Tensor, layout: "TileLayout") -> "TilePages":
        """cache: the engine's pages as [blocks, block_size, kv_heads, token_bytes] uint8, each page
        heads first (a head's block_size tokens are one run of bytes, so its tiles are whole records)."""
        blocks, bs, heads, tb = cache.shape
        if cache.dtype != torch.uint8 or tb != layout.token_bytes or bs % layout.tile or \
                cache.stride(1) != tb or cache.stride(2) != bs * tb or cache.stride(0) < heads * bs * tb:
            raise ValueError(f"int2 tile format: the cache {cache.dtype} {tuple(cache.shape)} strides {cache.stride()} "
                             f"is not pages of whole {layout.tile}-token tiles ({layout.token_bytes} B per token), "
                             f"heads first")
        flat = torch.as_strided(cache, (blocks * cache.stride(0),), (1,))
        return cls(flat, cache.stride(0), cache.stride(2), bs // layout.tile, layout)

    def as_f16(self) -> torch.Tensor:
        return self.flat.view(torch.float16)


def pack_bit_plane(bits: torch.Tensor) -> torch.Tensor:
    """bits [..., D] (0/1) -> bytes [..., D/8]; byte j holds elements j + p*D/8 in bit p."""
    D = bits.shape[-1]
    planes = bits.to(torch.uint8).reshape(*bits.shape[:-1], 8, D // 8)
    out = torch.zeros(planes.shape[:-2] + planes.shape[-1:], dtype=torch.uint8, device=bits.device)
    for p in range(8):
        out |= planes[..., p, :] << p
    return out


def unpack_bit_plane(packed: torch.Tensor) -> torch.Tensor:
    return torch.cat([(packed >> p) & 1 for p in range(8)], dim=-1)


def _bytes(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.uint8).reshape(*x.shape[:-1], -1)


def encode_tile(k_rot: torch.Tensor, v_rot: torch.Tensor, layout: TileLayout,
                exclude: torch.Tensor | None = None) -> torch.Tensor:
    """Rotated K, V [..., T, D] of one tile -> tile records uint8 [..., tile_bytes]. Tokens marked
    in `exclude` [T] (attention sinks, read in full precision) take no part in the ranges."""
    T, D = layout.tile, layout.head_dim
    if k_rot.shape[-2:] != (T, D) or v_rot.shape != k_rot.shape:
        raise ValueError(f"encode_tile: K {tuple(k_rot.shape)} / V {tuple(v_rot.shape)}, expected [..., {T}, {D}]")
    k = encode_channel_tile(k_rot, layout.k_bits, exclude)
    v = encode_channel_tile(v_rot, V_BITS, exclude)
    lead = k_rot.shape[:-2]
    high = pack_bit_plane(k["codes"] >> 2) if layout.high_bits == 1 else pack_planar(k["codes"] >> 2)
    parts = [pack_planar(k["codes"] & 3).reshape(*lead, -1), high.reshape(*lead, -1),
             pack_planar(v["codes"]).reshape(*lead, -1), _bytes(k["norm"].squeeze(-1)), _bytes(v["norm"].squeeze(-1)),
             _bytes(k["scale"].squeeze(-2)), _bytes(k["zero"].squeeze(-2)),
             _bytes(v["scale"].squeeze(-2)), _bytes(v["zero"].squeeze(-2)),
             _bytes(torch.cat([k["scale_peak"], k["zero_peak"], v["scale_peak"], v["zero_peak"]], -1).squeeze(-2))]
    record = torch.cat(parts, dim=-1)
    assert record.shape[-1] == layout.used_bytes, (record.shape, layout.used_bytes)
    return torch.nn.functional.pad(record, (0, layout.tile_bytes - layout.used_bytes))


def _field(record, start, count, dtype, shape):
    itemsize = torch.empty(0, dtype=dtype).element_size()
    raw = record[..., start:start + count * itemsize].contiguous()
    return raw.view(dtype).reshape(*record.shape[:-1], *shape)


def decode_tile(records: torch.Tensor, layout: TileLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """Tile records uint8 [..., tile_bytes] -> (K, V) in the rotated basis, fp32 [..., T, D]."""
    return decode_channel_tile(_fields(records, layout, "k")), decode_channel_tile(_fields(records, layout, "v"))


def _fields(records: torch.Tensor, layout: TileLayout, which: str) -> dict:
    """One tensor's stored fields of tile records [..., tile_bytes] (codes as uint8 0..2^b-1)."""
    T, D = layout.tile, layout.head_dim
    lead = records.shape[:-1]
    peaks = _field(records, layout.peaks, 4, torch.float16, (1, 4))
    e4m3 = torch.float8_e4m3fn
    if which == "k":
        low = unpack_planar(records[..., :layout.k_high].reshape(*lead, T, D // PLANES))
        raw = records[..., layout.k_high:layout.v_codes]
        high = (unpack_bit_plane(raw.reshape(*lead, T, D // 8)) if layout.high_bits == 1 else
                unpack_planar(raw.reshape(*lead, T, D // PLANES)))
        return dict(codes=low | (high << 2), norm=_field(records, layout.k_norm, T, torch.float16, (T, 1)),
                    scale=_field(records, layout.k_scale, D, e4m3, (1, D)),
                    zero=_field(records, layout.k_zero, D, e4m3, (1, D)),
                    scale_peak=peaks[..., 0:1], zero_peak=peaks[..., 1:2])
    return dict(codes=unpack_planar(records[..., layout.v_codes:layout.k_norm].reshape(*lead, T, D // PLANES)),
                norm=_field(records, layout.v_norm, T, torch.float16, (T, 1)),
                scale=_field(records, layout.v_scale, D, e4m3, (1, D)),
                zero=_field(records, layout.v_zero, D, e4m3, (1, D)),
                scale_peak=peaks[..., 2:3], zero_peak=peaks[..., 3:4])


def folded_scores(q: torch.Tensor, records: torch.Tensor, layout: TileLayout) -> torch.Tensor:
    """q [..., R, D] (rotated queries, R rows per tile) against tile records [..., tile_bytes] ->
    scores [..., R, T] as a decode tile computes them: the K scales folded into the query once per
    tile, the codes' dot, one q . zero per row and tile, times each token's norm."""
    f = _fields(records, layout, "k")
    scale, zero = _meta(f)                                                  # [..., 1, D]
    q_folded = q * scale                                                    # once per tile
    dots = q_folded @ f["codes"].float().transpose(-1, -2)                  # [..., R, T]
    return (dots + (q * zero).sum(-1, keepdim=True)) * f["norm"].float().transpose(-1, -2)


def folded_pv(p: torch.Tensor, records: torch.Tensor, layout: TileLayout) -> torch.Tensor:
    """p [..., R, T] (attention weights) times the tile's V -> [..., R, D], V's scale and zero
    applied once per tile: scale * (p * norm) . codes + zero * sum(p * norm)."""
    f = _fields(records, layout, "v")
    scale, zero = _meta(f)
    pn = p * f["norm"].float().transpose(-1, -2)                            # [..., R, T]
    return scale * (pn @ f["codes"].float()) + zero * pn.sum(-1, keepdim=True)
