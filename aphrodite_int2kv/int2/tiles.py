"""Token-tile quantizers (plain torch, fp32 math): the candidate long-context formats measured by
`aphrodite-int2kv longctx`, written as exact reference arithmetic so that a store kernel can
implement them bit for bit.

Two layouts of n-bit uniform codes over a rotated head vector x [T, H, D] (after the Hadamard
rotation of `rotation.py`):

- **channel tiles** (keys): tokens are grouped in tiles of `tile` consecutive positions; inside a
  tile each channel (element of the head vector) has its own fp16 scale and zero, taken over the
  tile's tokens. With `norm_balance`, every token is first divided by its own L2 norm (kept in
  fp16): without it, a few tokens of unusual norm (attention sinks, delimiters) set every
  channel's range in their tile. A token is read back as ``norm * (code * scale + zero)``.
  Folded into a decode step: the query is multiplied by the tile's scales once per tile, and the
  zeros give one scalar ``q . zero`` per tile, so a score is ``norm * (q' . codes + q . zero)``.
- **token groups** (values, as the first int2 format): each token's vector in groups of G
  consecutive elements, one fp16 scale and zero per group, uniform levels over the group's
  mean +- (2^b - 1) / 2 * step * std (`std` levels, `step` the optimal uniform step for a
  standard normal with 2^b levels) or over its min/max.

Positions marked in `exclude` (attention sinks kept in full precision elsewhere) take no part in
a tile's ranges; their own codes are still written (and never read).
"""

from __future__ import annotations

import torch

from aphrodite_int2kv.int2.quantizer import FP16_MAX, sanitize

# Step of the minimum-MSE uniform quantizer of a standard normal with 2^b levels (Max 1960).
GAUSSIAN_UNIFORM_STEP = {1: 1.5958, 2: 0.9957, 3: 0.5860, 4: 0.3352}
BITS = (2, 3, 4)


def _check_bits(bits: int) -> None:
    if bits not in BITS:
        raise ValueError(f"tile quantizer: {bits} bits is not one of {BITS}")


def _fp16(x: torch.Tensor) -> torch.Tensor:
    return x.half().float()


def _e4m3_relative(x: torch.Tensor, dim: int) -> torch.Tensor:
    """x stored as fp8 e4m3 relative to an fp16 absmax over `dim` (one per tile and head): the
    8-bit metadata layout, 16 bits per channel and tile for scale and zero together."""
    peak = _fp16(x.abs().amax(dim, keepdim=True))
    unit = torch.where(peak > 0, peak / 448.0, torch.ones_like(peak))
    return (x / unit).clamp(-448, 448).to(torch.float8_e4m3fn).float() * unit


def channel_tiles(x: torch.Tensor, tile: int, bits: int, norm_balance: bool = True,
                  exclude: torch.Tensor | None = None, meta_bits: int = 16) -> torch.Tensor:
    """x [T, H, D] (rotated) -> what the cache reads back, fp32 [T, H, D].

    Per tile of `tile` tokens and per (head, channel): scale = fp16((hi - lo) / (2^b - 1)),
    zero = fp16(lo) over the tile's tokens not in `exclude` [T] bool; code = clamp(round((u - zero)
    / scale), 0, 2^b - 1) with u = x / fp16(norm) under `norm_balance`, else u = x. A last, partial
    tile is quantized over the tokens it has (the engine quantizes a tile only once it is full; the
    harness's window masks make that difference unobservable)."""
    _check_bits(bits)
    T, H, D = x.shape
    x = sanitize(x)
    norm = _fp16(x.norm(dim=-1, keepdim=True).clamp(max=FP16_MAX)) if norm_balance else torch.ones(T, H, 1)
    u = x / torch.where(norm > 0, norm, torch.ones_like(norm))
    pad = (-T) % tile
    keep = torch.ones(T, dtype=torch.bool) if exclude is None else ~exclude
    u_p = torch.cat([u, u.new_zeros(pad, H, D)]).reshape(-1, tile, H, D)
    k_p = torch.cat([keep, keep.new_zeros(pad)]).reshape(-1, tile, 1, 1)
    big = torch.finfo(torch.float32).max
    lo = torch.where(k_p, u_p, torch.full_like(u_p, big)).amin(1, keepdim=True)
    hi = torch.where(k_p, u_p, torch.full_like(u_p, -big)).amax(1, keepdim=True)
    empty = ~k_p.any(1, keepdim=True)                       # a tile of sinks only: nothing to range over
    lo, hi = torch.where(empty, 0.0, lo), torch.where(empty, 0.0, hi)
    levels = 2 ** bits - 1
    if meta_bits == 16:
        scale, zero = _fp16((hi - lo) / levels), _fp16(lo)
    elif meta_bits == 8:   # scale rounded up, so the stored range still covers the tile
        zero = _e4m3_relative(lo, dim=3)
        scale = _e4m3_relative((hi - zero) / levels, dim=3)
    else:
        raise ValueError(f"tile quantizer: {meta_bits}-bit metadata is not 16 or 8")
    inv = torch.where(scale > 0, 1.0 / scale, torch.zeros_like(scale))
    codes = torch.floor((u_p - zero) * inv + 0.5).clamp(0, levels)
    rec = (codes * scale + zero).reshape(-1, H, D)[:T]
    return rec * norm


def token_groups(x: torch.Tensor, group: int, bits: int, levels: str = "std") -> torch.Tensor:
    """x [..., D] (rotated) -> what the cache reads back, fp32: per group of `group` consecutive
    elements, uniform 2^b levels over mean +- (2^b - 1)/2 * step * std (`std`) or min/max
    (`minmax`), fp16 scale and zero."""
    _check_bits(bits)
    D = x.shape[-1]
    g = sanitize(x).reshape(*x.shape[:-1], D // group, group)
    n = 2 ** bits - 1
    if levels == "std":
        mean = g.mean(-1, keepdim=True)
        std = ((g - mean) ** 2).mean(-1, keepdim=True).sqrt()
        step = GAUSSIAN_UNIFORM_STEP[bits]
        scale, zero = _fp16(step * std), _fp16(mean - (n / 2) * step * std)
    elif levels == "minmax":
        lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
        scale, zero = _fp16((hi - lo) / n), _fp16(lo)
    else:
        raise ValueError(f"token groups: levels {levels!r} is not 'std' or 'minmax'")
    inv = torch.where(scale > 0, 1.0 / scale, torch.zeros_like(scale))
    codes = torch.floor((g - zero) * inv + 0.5).clamp(0, n)
    return (codes * scale + zero).reshape(x.shape)


def channel_tile_bits(bits: int, tile: int, head_dim: int, norm_balance: bool = True, meta_bits: int = 16) -> float:
    """Stored bits per element of the channel-tile layout: codes, scale + zero per channel per tile
    (fp16 each, or e4m3 each with two fp16 peaks per tile and head), fp16 norm per token."""
    meta = 32 / tile if meta_bits == 16 else 16 / tile + 32 / (tile * head_dim)
    return bits + meta + (16 / head_dim if norm_balance else 0.0)


def token_group_bits(bits: int, group: int) -> float:
    return bits + 32 / group
