"""Store: quantize + pack rotated K/V of new tokens into the paged int2 cache.

One program per (token, KV head). Rotation happens before (a matmul in the caller); this kernel
is the quantizer of int2/quantizer.py, bit for bit, written straight into the slot.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from aphrodite_int2kv.int2.format import LLOYD_MAX_THRESHOLDS, STD_STEP, SlotLayout
from aphrodite_int2kv.kernels.common import slot_parts

FP16_MAX = tl.constexpr(65504.0)  # a constexpr: kernels may only read constexpr globals


@dataclasses.dataclass(frozen=True)
class Centering:
    """K centering at store time: keys are stored as K - c, c = `center` (fp32, rotated basis)
    [B, H, D] per request (`requests` [T] int32: each token's row) or [H, D] for every token;
    tokens at positions < `sinks` (`positions` [T] int32) stay uncentered. center None: the
    offsets are not known yet (data-free centering's first pass, which writes the sinks only)."""
    center: torch.Tensor | None
    requests: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    sinks: int = 0

    @staticmethod
    def args(c: "Centering | None", T: int, H: int, D: int, like):
        if c is None:
            return (like, 0, 0, like, like)
        if c.sinks > 0 and (c.positions is None or c.positions.shape[0] < T):
            raise ValueError(f"int2 store: centering with sinks needs the positions of the {T} tokens")
        pos = c.positions if c.sinks > 0 else like
        if c.center is None:
            return (like, 0, 0, like, pos)
        per_seq = c.center.dim() == 3
        if c.center.dtype != torch.float32 or c.center.shape[-2:] != (H, D) or c.center.stride(-1) != 1:
            raise ValueError(f"int2 store: the K offsets must be fp32 [..., {H}, {D}] with contiguous rows, "
                             f"got {c.center.dtype} {tuple(c.center.shape)}")
        if per_seq and (c.requests is None or c.requests.shape[0] < T):
            raise ValueError(f"int2 store: per-request K offsets need the request index of the {T} tokens")
        return (c.center, c.center.stride(0) if per_seq else 0, c.center.stride(-2),
                c.requests if per_seq else like, pos)

    @staticmethod
    def flags(c: "Centering | None"):
        if c is None:
            return dict(CENTER=False, SINKS=0, PER_SEQ=False)
        return dict(CENTER=c.center is not None, SINKS=int(c.sinks),
                    PER_SEQ=c.center is not None and c.center.dim() == 3)


@triton.jit
def _quantize_group_rows(x, CLIP: tl.constexpr, LLOYD: tl.constexpr, G: tl.constexpr,
                         T0: tl.constexpr, T1: tl.constexpr, T2: tl.constexpr,
                         STD: tl.constexpr = False, STEP: tl.constexpr = 0.9957):
    """x [NG, G] fp32 -> (codes [NG, G] int32, scale [NG] fp16, zero [NG] fp16)."""
    x = tl.where(x != x, 0.0, x)                              # NaN -> 0
    x = tl.minimum(tl.maximum(x, -FP16_MAX), FP16_MAX)        # +-Inf -> +-fp16 max
    if STD:   # uniform levels over mean +- 1.5 STEP std (quantizer.py); decoded like min/max
        mean = tl.sum(x, axis=1) / G
        d = x - mean[:, None]
        std = tl.sqrt(tl.sum(d * d, axis=1) / G)
        scale = (STEP * std).to(tl.float16)
        zero = (mean - (1.5 * STEP) * std).to(tl.float16)
        sf = scale.to(tl.float32)
        inv = tl.where(sf > 0, 1.0 / tl.where(sf > 0, sf, 1.0), 0.0)
        t = (x - zero.to(tl.float32)[:, None]) * inv[:, None]
        codes = tl.minimum(tl.maximum(tl.floor(t + 0.5), 0.0), 3.0).to(tl.int32)
    elif LLOYD:
        mean = tl.sum(x, axis=1) / G
        d = x - mean[:, None]
        std = tl.sqrt(tl.sum(d * d, axis=1) / G)
        zero = mean.to(tl.float16)
        scale = std.to(tl.float16)
        sf = scale.to(tl.float32)
        inv = tl.where(sf > 0, 1.0 / tl.where(sf > 0, sf, 1.0), 0.0)
        t = (x - zero.to(tl.float32)[:, None]) * inv[:, None]
        codes = (t > T0).to(tl.int32) + (t > T1).to(tl.int32) + (t > T2).to(tl.int32)
    else:
        lo = tl.min(x, axis=1)
        hi = tl.max(x, axis=1)
        mid = (hi + lo) * 0.5
        half = (hi - lo) * (0.5 * CLIP)
        lo = mid - half
        hi = mid + half
        scale = ((hi - lo) / 3.0).to(tl.float16)
        zero = lo.to(tl.float16)
        sf = scale.to(tl.float32)
        inv = tl.where(sf > 0, 1.0 / tl.where(sf > 0, sf, 1.0), 0.0)
        t = (x - zero.to(tl.float32)[:, None]) * inv[:, None]
        codes = tl.minimum(tl.maximum(tl.floor(t + 0.5), 0.0), 3.0).to(tl.int32)
    return codes, scale, zero


@triton.jit
def _pack_planar(codes, D: tl.constexpr, W: tl.constexpr):
    """codes [NG, G] (row-major = element order) -> bytes [W]; byte j = sum_p code[j + p*W] << 2p."""
    planes = tl.reshape(codes, (4, W))
    shifts = (tl.arange(0, 4) * 2)[:, None]
    return tl.sum(planes << shifts, axis=0).to(tl.uint8)


@triton.jit
def _centered_key(k, token, head, cols, cen_ptr, stride_cenb, stride_cenh, req_ptr, pos_ptr,
                  SINKS: tl.constexpr, PER_SEQ: tl.constexpr):
    """K centering: k - c of the token's sequence (PER_SEQ) or of the layer, except at positions
    < SINKS, which stay uncentered (docs/format.md, K centering)."""
    if PER_SEQ:
        row = tl.load(req_ptr + token).to(tl.int64) * stride_cenb + head * stride_cenh
    else:
        row = head * stride_cenh
    c = tl.load(cen_ptr + row + cols)
    if SINKS > 0:
        c = tl.where(tl.load(pos_ptr + token) < SINKS, 0.0, c)
    return k - c


@triton.jit
def _int2_store_kernel(
    k_ptr, v_ptr,                       # [T, H, D] rotated, any float dtype
    slot_ptr,                           # [T] int64 slot ids (block * block_size + offset), -1 = pad
    cache_u8, cache_f16,                # the same paged cache as uint8 and as fp16 views
    stride_kt, stride_kh, stride_vt, stride_vh,
    stride_cb, stride_cs, stride_ch,    # uint8 strides of [num_blocks, block_size, H, slot]
    cen_ptr, stride_cenb, stride_cenh,  # K centering (CENTER): offsets [B or 1, H, D] fp32
    req_ptr, pos_ptr,                   # [T] int32 request index / position of each token
    BLOCK_SIZE: tl.constexpr, D: tl.constexpr, G: tl.constexpr, NG: tl.constexpr,
    K_CLIP: tl.constexpr, V_CLIP: tl.constexpr, LLOYD: tl.constexpr,
    T0: tl.constexpr, T1: tl.constexpr, T2: tl.constexpr,
    OFF_V: tl.constexpr, OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr,
    OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr, ODD_SHIFT: tl.constexpr,
    STD: tl.constexpr = False, STEP: tl.constexpr = 0.9957,
    CENTER: tl.constexpr = False, SINKS: tl.constexpr = 0, PER_SEQ: tl.constexpr = False,
    ONLY: tl.constexpr = 0,             # with SINKS: 1 = write the sink positions only, 2 = the others only
):
    token = tl.program_id(0)
    head = tl.program_id(1)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    if slot < 0:                       # padded token: the engine fills these with -1
        return
    if ONLY != 0:
        is_sink = tl.load(pos_ptr + token) < SINKS
        if (ONLY == 1) != is_sink:
            return
    block = slot // BLOCK_SIZE
    offset = slot % BLOCK_SIZE
    base = block * stride_cb + offset * stride_cs + head * stride_ch   # bytes; even (16-aligned slots)
    # a token at an odd page offset: its slot rotated by ODD_SHIFT (docs/format.md, "odd slots")
    codes_at, meta_at = slot_parts(base, offset % 2, OFF_KS, ODD_SHIFT)

    W: tl.constexpr = D // 4
    rows = tl.arange(0, NG)[:, None] * G + tl.arange(0, G)[None, :]    # element index, [NG, G]
    groups = tl.arange(0, NG)
    bytes_w = tl.arange(0, W)

    k = tl.load(k_ptr + token * stride_kt + head * stride_kh + rows).to(tl.float32)
    if CENTER:
        k = _centered_key(k, token, head, rows, cen_ptr, stride_cenb, stride_cenh, req_ptr, pos_ptr, SINKS, PER_SEQ)
    codes, scale, zero = _quantize_group_rows(k, K_CLIP, LLOYD, G, T0, T1, T2, STD, STEP)
    tl.store(cache_u8 + codes_at + bytes_w, _pack_planar(codes, D, W))
    tl.store(cache_f16 + (meta_at + OFF_KS) // 2 + groups, scale)
    tl.store(cache_f16 + (meta_at + OFF_KZ) // 2 + groups, zero)

    v = tl.load(v_ptr + token * stride_vt + head * stride_vh + rows).to(tl.float32)
    codes, scale, zero = _quantize_group_rows(v, V_CLIP, LLOYD, G, T0, T1, T2, STD, STEP)
    tl.store(cache_u8 + codes_at + OFF_V + bytes_w, _pack_planar(codes, D, W))
    tl.store(cache_f16 + (meta_at + OFF_VS) // 2 + groups, scale)
    tl.store(cache_f16 + (meta_at + OFF_VZ) // 2 + groups, zero)


def int2_store(k_rot: torch.Tensor, v_rot: torch.Tensor, slot_mapping: torch.Tensor,
               kv_cache: torch.Tensor, layout: SlotLayout, k_clip: float = 1.0,
               v_clip: float = 1.0, lloyd_max: bool = False, std_range: bool = False,
               centering: "Centering | None" = None, only: int = 0) -> None:
    """Write rotated K/V [T, H, D] into kv_cache [num_blocks, block_size, H, slot_bytes] (uint8,
    last dim contiguous) at slot_mapping [T]; slots < 0 are skipped.
    `centering`: K is stored as K - c (Centering's docstring); `only` = 1 / 2 writes just the
    tokens at positions < sinks / >= sinks (data-free offsets are read back between the two)."""
    T, H, D = k_rot.shape
    assert D == layout.head_dim and kv_cache.dtype == torch.uint8
    assert kv_cache.shape[-1] == layout.slot_bytes and kv_cache.stride(-1) == 1
    assert k_rot.stride(-1) == 1 and v_rot.stride(-1) == 1
    if T == 0:
        return
    if lloyd_max and std_range:   # the kernel would silently take one; options are validated at start-up
        raise ValueError("int2_store: lloyd_max and std_range are two level modes; pick one")
    th = LLOYD_MAX_THRESHOLDS
    if only not in (0, 1, 2) or (only and (centering is None or not centering.sinks)):
        raise ValueError(f"int2_store: only={only}: 1 / 2 select the sink / other positions of a centering "
                         f"with sinks, 0 writes every token")
    if only != 1 and centering is not None and centering.center is None:
        raise ValueError("int2_store: centering without offsets can only write the sinks (only=1)")
    _int2_store_kernel[(T, H)](
        k_rot, v_rot, slot_mapping, kv_cache, kv_cache.view(torch.float16),
        k_rot.stride(0), k_rot.stride(1), v_rot.stride(0), v_rot.stride(1),
        kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2),
        *Centering.args(centering, T, H, D, k_rot),
        BLOCK_SIZE=kv_cache.shape[1], D=D, G=layout.group_size, NG=layout.num_groups,
        K_CLIP=float(k_clip), V_CLIP=float(v_clip), LLOYD=bool(lloyd_max),
        T0=th[0], T1=th[1], T2=th[2],
        OFF_V=layout.v_codes, OFF_KS=layout.k_scale, OFF_KZ=layout.k_zero,
        OFF_VS=layout.v_scale, OFF_VZ=layout.v_zero, ODD_SHIFT=layout.odd_shift, STD=bool(std_range), STEP=STD_STEP,
        **Centering.flags(centering), ONLY=int(only),
    )


@triton.jit
def _window_store_kernel(
    k_ptr, v_ptr, stride_kt, stride_kh,          # [T, Hkv, D] new keys / values (activation dtype)
    wk_ptr, wv_ptr, stride_wb, stride_ws, stride_wh,   # window cache K / V pages [blocks, WBS, Hkv, D]
    slot_ptr,                                    # [T] window slot (page * WBS + offset); -1 = padding
    cen_ptr, stride_cenb, stride_cenh, req_ptr, pos_ptr,   # K centering, as in _int2_store_kernel
    WBS: tl.constexpr, D: tl.constexpr,
    CENTER: tl.constexpr = False, SINKS: tl.constexpr = 0, PER_SEQ: tl.constexpr = False,
):
    token = tl.program_id(0)
    head = tl.program_id(1)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    if slot >= 0:
        cols = tl.arange(0, D)
        src = token * stride_kt + head * stride_kh + cols
        dst = (slot // WBS) * stride_wb + (slot % WBS) * stride_ws + head * stride_wh + cols
        k = tl.load(k_ptr + src)
        if CENTER:   # the window holds what the int2 cache holds: sinks uncentered, the rest K - c
            k = _centered_key(k.to(tl.float32), token, head, cols, cen_ptr, stride_cenb, stride_cenh,
                              req_ptr, pos_ptr, SINKS, PER_SEQ)
        tl.store(wk_ptr + dst, k.to(wk_ptr.dtype.element_ty))
        tl.store(wv_ptr + dst, tl.load(v_ptr + src).to(wv_ptr.dtype.element_ty))


def window_store(k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor,
                 k_win: torch.Tensor, v_win: torch.Tensor, centering: "Centering | None" = None) -> None:
    """Copy the new tokens' rotated K/V [T, Hkv, D] (K centered by `centering`, as int2_store
    does) into the full-precision recent-window
    cache (k_win/v_win [blocks, window_block_size, Hkv, D], same strides) at `slot_mapping` (the
    window group's slots; -1 skips). A fixed grid and no host sync, so CUDA graphs capture it."""
    T, H, D = k.shape
    assert v.shape == k.shape and k.stride() == v.stride() and k.stride(-1) == 1
    assert k_win.stride() == v_win.stride() and k_win.stride(-1) == 1 and k_win.shape[2:] == (H, D)
    if T == 0:
        return
    _window_store_kernel[(T, H)](
        k, v, k.stride(0), k.stride(1), k_win, v_win, k_win.stride(0), k_win.stride(1), k_win.stride(2),
        slot_mapping, *Centering.args(centering, T, H, D, k), WBS=k_win.shape[1], D=D, **Centering.flags(centering))
