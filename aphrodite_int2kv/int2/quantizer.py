"""Reference quantizer (plain torch, fp32 math): the exact arithmetic the Triton store kernel
implements, used by the tests and by `aphrodite-int2kv eval`.

Per group of G consecutive elements (after rotation):
  uniform:   lo/hi = group min/max, shrunk about their midpoint by `clip`;
             scale = fp16((hi - lo) / 3), zero = fp16(lo); code = clamp(floor((x - zero) / scale + 0.5), 0, 3)
  std_range: uniform levels over mean +- 1.5 * STD_STEP * std (the engine default):
             scale = fp16(STD_STEP * std), zero = fp16(mean - 1.5 * STD_STEP * std); code as uniform
  lloyd_max: zero = fp16(mean), scale = fp16(std); code = number of LLOYD_MAX_THRESHOLDS below (x - zero) / scale
Dequantized: level(code) * scale + zero, level(c) = c (uniform, both ranges) or LLOYD_MAX_LEVELS[c].

Exact cases: a constant group (scale 0) decodes to its value rounded to fp16; padded slots
(slot_mapping < 0) are never written. Non-finite input: NaN is stored as 0 and +-Inf as +-65504
(the fp16 limit) before quantization, so a cache never holds NaN and one bad token cannot
poison later queries (documented in docs/format.md).
"""

from __future__ import annotations

import torch

from aphrodite_int2kv.int2.format import (LLOYD_MAX_LEVELS, LLOYD_MAX_THRESHOLDS, PLANES, STD_STEP,
                                          Int2ConfigError, SlotLayout)

FP16_MAX = 65504.0


def check_options(clip: float, lloyd_max: bool, what: str = "", std_range: bool = False) -> None:
    if not (0.5 <= clip <= 1.0):
        raise Int2ConfigError(f"int2 KV: {what}clip ratio {clip} is outside [0.5, 1.0]; "
                              f"1.0 means no clipping")
    if lloyd_max and std_range:
        raise Int2ConfigError(f"int2 KV: {what}Lloyd-Max levels and the std range are two level "
                              f"modes; pick one")
    if (lloyd_max or std_range) and clip != 1.0:
        mode = "Lloyd-Max" if lloyd_max else "the std range"
        raise Int2ConfigError(f"int2 KV: {what}clip ratio {clip} cannot be combined with {mode} "
                              f"(its levels already fit a standard normal); clipping applies to the "
                              f"min/max range only")


def sanitize(x: torch.Tensor) -> torch.Tensor:
    x = x.float()
    return torch.nan_to_num(x, nan=0.0, posinf=FP16_MAX, neginf=-FP16_MAX).clamp(-FP16_MAX, FP16_MAX)


def quantize_groups(x: torch.Tensor, group_size: int, clip: float = 1.0, lloyd_max: bool = False,
                    std_range: bool = False):
    """x [..., D] -> codes uint8 [..., D] in 0..3, scale fp16 [..., NG], zero fp16 [..., NG]."""
    check_options(clip, lloyd_max, std_range=std_range)
    D = x.shape[-1]
    g = sanitize(x).reshape(*x.shape[:-1], D // group_size, group_size)
    if std_range:
        mean = g.mean(-1)
        std = ((g - mean[..., None]) ** 2).mean(-1).sqrt()
        scale, zero = (STD_STEP * std).half(), (mean - (1.5 * STD_STEP) * std).half()
        inv = torch.where(scale > 0, 1.0 / scale.float(), torch.zeros_like(scale, dtype=torch.float32))
        t = (g - zero.float()[..., None]) * inv[..., None]
        codes = torch.floor(t + 0.5).clamp(0, 3).to(torch.uint8)
    elif lloyd_max:
        mean = g.mean(-1)
        std = ((g - mean[..., None]) ** 2).mean(-1).sqrt()
        zero, scale = mean.half(), std.half()
        inv = torch.where(scale > 0, 1.0 / scale.float(), torch.zeros_like(scale, dtype=torch.float32))
        t = (g - zero.float()[..., None]) * inv[..., None]
        codes = sum((t > th).to(torch.uint8) for th in LLOYD_MAX_THRESHOLDS)
    else:
        lo, hi = g.amin(-1), g.amax(-1)
        mid, half = (hi + lo) * 0.5, (hi - lo) * (0.5 * clip)
        lo, hi = mid - half, mid + half
        scale, zero = ((hi - lo) / 3.0).half(), lo.half()
        inv = torch.where(scale > 0, 1.0 / scale.float(), torch.zeros_like(scale, dtype=torch.float32))
        t = (g - zero.float()[..., None]) * inv[..., None]
        codes = torch.floor(t + 0.5).clamp(0, 3).to(torch.uint8)
    return codes.reshape(x.shape), scale, zero


def levels(codes: torch.Tensor, lloyd_max: bool) -> torch.Tensor:
    if lloyd_max:
        return torch.tensor(LLOYD_MAX_LEVELS, dtype=torch.float32, device=codes.device)[codes.long()]
    return codes.float()


def dequantize_groups(codes, scale, zero, group_size: int, lloyd_max: bool = False) -> torch.Tensor:
    D = codes.shape[-1]
    lv = levels(codes, lloyd_max).reshape(*codes.shape[:-1], D // group_size, group_size)
    return (lv * scale.float()[..., None] + zero.float()[..., None]).reshape(codes.shape)


def fake_quantize(x, group_size: int, clip: float = 1.0, lloyd_max: bool = False,
                  std_range: bool = False) -> torch.Tensor:
    """quantize -> dequantize, in x's shape, fp32."""
    return dequantize_groups(*quantize_groups(x, group_size, clip, lloyd_max, std_range), group_size, lloyd_max)


def pack_planar(codes: torch.Tensor) -> torch.Tensor:
    """codes [..., D] (0..3) -> bytes [..., D/4]; byte j holds elements j + p*D/4 in bits 2p..2p+1."""
    D = codes.shape[-1]
    planes = codes.to(torch.uint8).reshape(*codes.shape[:-1], PLANES, D // PLANES)
    out = torch.zeros(planes.shape[:-2] + planes.shape[-1:], dtype=torch.uint8, device=codes.device)
    for p in range(PLANES):
        out |= planes[..., p, :] << (2 * p)
    return out


def unpack_planar(packed: torch.Tensor) -> torch.Tensor:
    return torch.cat([(packed >> (2 * p)) & 3 for p in range(PLANES)], dim=-1)


def encode_slots(k_rot, v_rot, layout: SlotLayout, k_clip=1.0, v_clip=1.0, lloyd_max=False, std_range=False):
    """Rotated K, V [..., D] -> slot bytes [..., slot_bytes] (docs/format.md)."""
    G = layout.group_size
    kc, ks, kz = quantize_groups(k_rot, G, k_clip, lloyd_max, std_range)
    vc, vs, vz = quantize_groups(v_rot, G, v_clip, lloyd_max, std_range)
    parts = [pack_planar(kc), pack_planar(vc)] + [m.contiguous().view(torch.uint8) for m in (ks, kz, vs, vz)]
    slot = torch.cat(parts, dim=-1)
    pad = layout.slot_bytes - slot.shape[-1]
    return torch.nn.functional.pad(slot, (0, pad)) if pad else slot


def _decode_half(slots: torch.Tensor, layout: SlotLayout, codes: int, scale: int, zero: int, lloyd_max):
    """The K or V half of slot bytes [..., slot_bytes] (byte offsets of its codes, scales, zeros)
    -> fp32 [..., D] in the rotated basis."""
    NG = layout.num_groups

    def meta(off):
        return slots[..., off:off + 2 * NG].contiguous().view(torch.float16)

    return dequantize_groups(unpack_planar(slots[..., codes:codes + layout.code_bytes]),
                             meta(scale), meta(zero), layout.group_size, lloyd_max)


def decode_keys(slots: torch.Tensor, layout: SlotLayout, lloyd_max=False):
    """slot bytes [..., slot_bytes] -> K in the rotated basis, fp32 [..., D] (the V half untouched)."""
    return _decode_half(slots, layout, layout.k_codes, layout.k_scale, layout.k_zero, lloyd_max)


def decode_slots(slots: torch.Tensor, layout: SlotLayout, lloyd_max=False):
    """slot bytes [..., slot_bytes] -> (K, V) in the rotated basis, fp32 [..., D]."""
    return (decode_keys(slots, layout, lloyd_max),
            _decode_half(slots, layout, layout.v_codes, layout.v_scale, layout.v_zero, lloyd_max))
