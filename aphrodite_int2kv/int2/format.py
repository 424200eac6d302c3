"""Byte layout of one int2 cache slot (one token, one KV head). See docs/format.md.

A slot holds K and V of one token for one KV head::

    offset                     size          content
    0                          D/4           K codes, 4 per byte, "planar" (below)
    D/4                        D/4           V codes, same packing
    D/2                        2*NG          K scale, fp16, one per group
    D/2 + 2*NG                 2*NG          K zero,  fp16
    D/2 + 4*NG                 2*NG          V scale, fp16
    D/2 + 6*NG                 2*NG          V zero,  fp16
    D/2 + 8*NG                 pad           zeros up to a multiple of 16 bytes

with D = head_dim, G = group size, NG = D // G. Planar packing: byte ``j`` (0 <= j < D/4) holds
the codes of elements ``j, j + D/4, j + D/2, j + 3D/4`` in bits 0-1, 2-3, 4-5, 6-7. Unpacking
plane ``p`` of a whole byte vector is one shift and one mask and yields D/4 *consecutive*
elements, which is what the kernels' tensor-core dots want.

Dequantized value of element e: ``level(code) * scale[e // G] + zero[e // G]`` where
``level(c) = c`` (uniform min/max) or a standard-normal Lloyd-Max level (``lloyd_max``).

A page (one block of ``block_size`` tokens) holds its slots *heads first*: KV head h's slots of
the page's tokens are one contiguous run, ``page + (h * block_size + token) * slot_bytes``
(``pages_heads_first``).
"""

from __future__ import annotations

import dataclasses

import torch

GROUP_SIZES = (32, 64, 128, 256)
HEAD_DIMS = (64, 128, 256)
SLOT_ALIGN = 16   # bytes: lets kernels use 16-byte vector loads on every slot
META_BYTES = 2    # fp16 scale and zero (see docs/format.md for the measurement behind it)
PLANES = 4        # 2-bit codes per byte

# 4-level Lloyd-Max quantizer for a standard normal: reconstruction levels and the decision
# thresholds between them (midpoints). Max (1960) / Lloyd (1982).
LLOYD_MAX_LEVELS = (-1.5104, -0.4528, 0.4528, 1.5104)
LLOYD_MAX_THRESHOLDS = (-0.9816, 0.0, 0.9816)
# Uniform levels sized from the group's standard deviation: the step of the optimal *uniform*
# 4-level quantizer for a standard normal (Max 1960: MSE 0.1188 vs Lloyd-Max's 0.1175), so levels
# sit at mean + (code - 1.5) * STD_STEP * std and decode with the plain uniform formula.
STD_STEP = 0.9957


class Int2ConfigError(ValueError):
    """A setting the int2 cache cannot honour; the message names it and the fix."""


@dataclasses.dataclass(frozen=True)
class SlotLayout:
    head_dim: int
    group_size: int

    def __post_init__(self):
        D, G = self.head_dim, self.group_size
        if D % PLANES or D < 16:
            raise Int2ConfigError(f"int2 KV: head_dim {D} must be a multiple of 4 and >= 16")
        if G not in GROUP_SIZES:
            raise Int2ConfigError(f"int2 KV: group size {G} is not one of {GROUP_SIZES}; "
                                  f"set APHRODITE_INT2KV_GROUP_SIZE to one of them")
        if D % G:
            raise Int2ConfigError(f"int2 KV: group size {G} does not divide head_dim {D}; "
                                  f"choose a group size that divides {D}")

    @property
    def num_groups(self) -> int:
        return self.head_dim // self.group_size

    @property
    def code_bytes(self) -> int:          # per tensor (K or V)
        return self.head_dim // PLANES

    @property
    def k_codes(self) -> int:
        return 0

    @property
    def v_codes(self) -> int:
        return self.code_bytes

    @property
    def k_scale(self) -> int:
        return 2 * self.code_bytes

    @property
    def k_zero(self) -> int:
        return self.k_scale + META_BYTES * self.num_groups

    @property
    def v_scale(self) -> int:
        return self.k_zero + META_BYTES * self.num_groups

    @property
    def v_zero(self) -> int:
        return self.v_scale + META_BYTES * self.num_groups

    @property
    def used_bytes(self) -> int:
        return self.v_zero + META_BYTES * self.num_groups

    @property
    def slot_bytes(self) -> int:
        return -(-self.used_bytes // SLOT_ALIGN) * SLOT_ALIGN

    @property
    def odd_shift(self) -> int:
        """Bytes by which the slot of a token at an odd offset in its page is rotated, 0 for none
        (docs/format.md, "odd slots"). Where a slot is an odd number of 16-byte units (80 B at
        head_dim 128, G = 64), an odd token's slot starts 16 bytes into a 32-byte sector; rotated
        by its metadata block (slot - D/2 bytes) it starts with that block, and its K and V codes
        start on sector boundaries like an even token's: a pair of tokens fills whole sectors."""
        if self.head_dim % 64 == 0 and self.slot_bytes % 32 == 16:
            return self.slot_bytes - 2 * self.code_bytes
        return 0

    def bits_per_element(self, padded: bool = True) -> float:
        """Bits per cached K or V element, codes and scale/zero included."""
        return 8 * (self.slot_bytes if padded else self.used_bytes) / (2 * self.head_dim)

    def ratio_vs(self, elem_bytes: int = 2) -> float:
        """How many times fewer bytes than a cache of `elem_bytes` per element (bf16: 2)."""
        return 2 * self.head_dim * elem_bytes / self.slot_bytes


def slot_bytes(head_dim: int, group_size: int) -> int:
    return SlotLayout(head_dim, group_size).slot_bytes


def default_group_size(head_dim: int) -> int:
    """The group size used when none is set: 64, unless 32 costs no extra bytes (head_dim 64: both
    pad to a 48-byte slot). Measured on SmolLM2 with std levels and the recent window (one group
    per 64-dim head, harsher than 64 of 128 or 256 dims): +4.3 % PPL with G = 64 vs +4.2 % with
    32 on Moby-Dick, +5.0 % vs +3.1 % on State of the Union; G = 64 stores 6.4x fewer bytes
    than bf16 at head_dim 128 and 256 (G = 32: 5.33x) and decodes faster (docs/quality.md)."""
    if head_dim % 64 or slot_bytes(head_dim, 32) == slot_bytes(head_dim, 64):
        return 32
    return 64


def pages_heads_first(cache: torch.Tensor) -> torch.Tensor:
    """The engine's int2 page tensor, handed as [blocks, block_size, Hkv, slot] with each page's
    interior contiguous (0.21-0.23; a page may be padded, stride(0) >= its bytes) -> the same memory
    as the kernels index it, [blocks, block_size, Hkv, slot] with each page's slots heads first.
    Why heads first: a decode program reads one KV head, so its tile is one contiguous run; with
    a token's heads side by side, 80-byte slots (head_dim 128) straddle 32-byte sectors and a
    program fetched ~1.6x its bytes from L2 (measured on the H200)."""
    nb, bs, heads, slot = cache.shape
    if tuple(cache.stride()[1:]) != (heads * slot, slot, 1):
        raise ValueError(f"int2 KV: the engine handed a cache of shape {tuple(cache.shape)} with strides "
                         f"{tuple(cache.stride())}; expected each page's [block_size, Hkv, slot] bytes contiguous")
    return torch.as_strided(cache, cache.shape, (cache.stride(0), slot, bs * slot, 1), cache.storage_offset())


def rotate_odd_slots(slots: torch.Tensor, offsets: torch.Tensor, layout: SlotLayout,
                     stored: bool = True) -> torch.Tensor:
    """slots [..., slot_bytes] of tokens at page offsets `offsets` (shape: a prefix of slots'
    leading dims) between the logical byte order (SlotLayout's offsets) and the stored one
    (SlotLayout.odd_shift): stored=True turns logical slots into stored ones, False reads stored
    slots back as logical ones. Even offsets, and layouts without odd_shift, are unchanged."""
    shift = layout.odd_shift
    if not shift:
        return slots
    odd = (offsets.to(slots.device) % 2 == 1).reshape(tuple(offsets.shape) + (1,) * (slots.dim() - offsets.dim()))
    return torch.where(odd, torch.roll(slots, shift if stored else -shift, dims=-1), slots)
