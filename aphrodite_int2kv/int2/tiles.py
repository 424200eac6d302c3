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


def _e4m3_unit(peak: torch.Tensor) -> torch.Tensor:
    """The value of one e4m3 step of 1 under an fp16 peak: peak / 448 (1 where the peak is 0)."""
    peak = peak.float()
    return torch.where(peak > 0, peak / 448.0, torch.ones_like(peak))


def encode_channel_tile(x: torch.Tensor, bits: int, exclude: torch.Tensor | None = None,
                        norm_balance: bool = True, meta_bits: int = 8) -> dict:
    """x [..., T, D] (rotated; one tile of T tokens per leading index) -> the stored fields:
    codes uint8 [..., T, D], norm fp16 [..., T, 1], scale and zero [..., 1, D] (e4m3 under the
    fp16 peaks scale_peak / zero_peak [..., 1, 1] with 8-bit metadata, fp16 with 16-bit), as
    `channel_tiles` describes. `exclude` [..., T] bool: tokens left out of the ranges."""
    _check_bits(bits)
    if meta_bits not in (8, 16):
        raise ValueError(f"tile quantizer: {meta_bits}-bit metadata is not 16 or 8")
    x = sanitize(x)
    ones = torch.ones(*x.shape[:-1], 1, device=x.device)
    norm = _fp16(x.norm(dim=-1, keepdim=True).clamp(max=FP16_MAX)).half() if norm_balance else ones.half()
    u = x / torch.where(norm.float() > 0, norm.float(), ones)
    keep = (torch.ones(x.shape[:-1], dtype=torch.bool, device=x.device) if exclude is None
            else ~exclude.expand(x.shape[:-1]))[..., None]
    big = torch.finfo(torch.float32).max
    lo = torch.where(keep, u, big).amin(-2, keepdim=True)
    hi = torch.where(keep, u, -big).amax(-2, keepdim=True)
    empty = ~keep.any(-2, keepdim=True)                     # a tile of sinks only: nothing to range over
    lo, hi = torch.where(empty, 0.0, lo), torch.where(empty, 0.0, hi)
    levels = 2 ** bits - 1
    f = dict(norm=norm, scale_peak=None, zero_peak=None)
    if meta_bits == 16:
        f["scale"], f["zero"] = ((hi - lo) / levels).half(), lo.half()
    else:   # the zero first; the scale then spans what the stored zero leaves of the range
        f["zero_peak"] = lo.abs().amax(-1, keepdim=True).half()
        f["zero"] = (lo / _e4m3_unit(f["zero_peak"])).clamp(-448, 448).to(torch.float8_e4m3fn)
        step = (hi - f["zero"].float() * _e4m3_unit(f["zero_peak"])) / levels
        f["scale_peak"] = step.abs().amax(-1, keepdim=True).half()
        f["scale"] = (step / _e4m3_unit(f["scale_peak"])).clamp(-448, 448).to(torch.float8_e4m3fn)
    scale, zero = _meta(f)
    inv = torch.where(scale > 0, 1.0 / scale, torch.zeros_like(scale))
    f["codes"] = torch.floor((u - zero) * inv + 0.5).clamp(0, levels).to(torch.uint8)
    return f


def _meta(f: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, zero) as fp32 values from the stored fields."""
    if f["scale_peak"] is None:
        return f["scale"].float(), f["zero"].float()
    return f["scale"].float() * _e4m3_unit(f["scale_peak"]), f["zero"].float() * _e4m3_unit(f["zero_peak"])


def decode_channel_tile(f: dict) -> torch.Tensor:
    """The stored fields of `encode_channel_tile` -> fp32 [..., T, D]: norm * (code * scale + zero)."""
    scale, zero = _meta(f)
    return (f["codes"].float() * scale + zero) * f["norm"].float()


def channel_tiles(x: torch.Tensor, tile: int, bits: int, norm_balance: bool = True,
                  exclude: torch.Tensor | None = None, meta_bits: int = 16) -> torch.Tensor:
    """x [T, H, D] (rotated) -> what the cache reads back, fp32 [T, H, D].

    Per tile of `tile` tokens and per (head, channel): u = x / fp16(norm) under `norm_balance`
    (else u = x); lo / hi = the channel's min / max over the tile's tokens not in `exclude` [T]
    bool; zero = lo and scale = (hi - lo) / (2^b - 1), stored as fp16 (`meta_bits` 16) or as e4m3
    under an fp16 peak per tile and head (8: the scale then spans hi - the stored zero); code =
    clamp(round((u - zero) / scale), 0, 2^b - 1). A last, partial tile is quantized over the tokens
    it has (the engine quantizes a tile only once it is full; the harness's window masks make that
    difference unobservable)."""
    T, H, D = x.shape
    pad = (-T) % tile
    keep_pad = torch.cat([torch.zeros(T, dtype=torch.bool) if exclude is None else exclude,
                          torch.ones(pad, dtype=torch.bool)])
    xp = torch.cat([x, x.new_zeros(pad, H, D)]).reshape(-1, tile, H, D).transpose(1, 2)     # [n, H, tile, D]
    f = encode_channel_tile(xp, bits, keep_pad.reshape(-1, 1, tile), norm_balance, meta_bits)
    return decode_channel_tile(f).transpose(1, 2).reshape(-1, H, D)[:T]


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
