"""Device helpers shared by the attention kernels: fetching a tile of slots (load_tile), unpacking
the planar int2 layout (docs/format.md) into dequantized fp16 tiles (the per-code tile, int2_tile),
the full-precision window tile and the online-softmax step. The folded tile, decode's default for
uniform levels, is in folded.py.

A code plane p holds elements [p*W, (p+1)*W) (W = D/4) of each token. Each plane is dequantized
to a [N, W] tile of level(code) * scale + zero and fed to the tensor cores as-is: plane p of K
meets plane p of q (scores accumulate over the 4 planes: the same as one K = D dot), plane p of V
produces output columns [p*W, (p+1)*W). A *segment* is the part of a plane that lies in one
group: SEG = min(G, W) columns, W // SEG segments per plane.

Unpacking on the GPU (uniform levels) uses the fp16 "magic number" trick instead of integer to
float conversions, which run at a quarter of the FMA rate: two code bytes are spread into the
low bytes of two fp16 halves (PRMT), the plane's bits are masked and OR-ed into the mantissa of
M_p = 2**(10 - 2p) (LOP3) -- whose unit in the last place is 4**-p, so the half reads M_p + code --
and M_p is subtracted exactly (sub.f16x2) before one fma.f16x2 applies scale and zero. That is
about 1.6 instructions per code. Lloyd-Max levels take three more fma.f16x2 per pair: the cubic
through the four levels, evaluated at the exact code (Horner), then the same scale/zero fma.
Under TRITON_INTERPRET (no inline assembly) the same values come from shifts, masks and
conversions.
"""

import triton
import triton.language as tl

from aphrodite_int2kv.int2.format import LLOYD_MAX_LEVELS
from aphrodite_int2kv.int2.reference import LOG2E  # noqa: F401 - the kernels' softmax in log2 units, as the reference's

# PTX for one plane, 4 codes per call. Operands: $0, $1 out (fp16 pairs: elements 0-1, 2-3);
# $2 the 4 code bytes; $3, $4 scale pairs; $5, $6 zero pairs. _UNPACK leaves the exact codes as
# fp16 pairs in lo, hi (the magic-number trick of the module docstring).
_UNPACK = """
prmt.b32 lo, $2, 0, 0x5140;
prmt.b32 hi, $2, 0, 0x5342;
lop3.b32 lo, lo, {mask}, {magic}, 0xEA;
lop3.b32 hi, hi, {mask}, {magic}, 0xEA;
mov.b32 m, {magic};
sub.f16x2 lo, lo, m;
sub.f16x2 hi, hi, m;
"""
_SCALE_ZERO = """
fma.rn.f16x2 $0, lo, $3, $5;
fma.rn.f16x2 $1, hi, $4, $6;
"""
_PLANE_ASM = "{{\n.reg .b32 lo, hi, m;" + _UNPACK + _SCALE_ZERO + "}}\n"

# Lloyd-Max: after the exact code c (fp16), level(c) = ((c3 c + c2) c + c1) c + c0, the cubic
# through the four levels (exact at c = 0..3 up to fp16 rounding, <= 1e-3 absolute).
_LLOYD_ASM = "{{\n.reg .b32 lo, hi, m, c3, c2, c1, c0;" + _UNPACK + """
mov.b32 c3, {c3};
mov.b32 c2, {c2};
mov.b32 c1, {c1};
mov.b32 c0, {c0};
fma.rn.f16x2 m, lo, c3, c2;
fma.rn.f16x2 m, m, lo, c1;
fma.rn.f16x2 lo, m, lo, c0;
fma.rn.f16x2 m, hi, c3, c2;
fma.rn.f16x2 m, m, hi, c1;
fma.rn.f16x2 hi, m, hi, c0;""" + _SCALE_ZERO + "}}\n"


def _f16x2(x: float) -> str:
    import struct

    h = struct.unpack("<H", struct.pack("<e", x))[0]
    return hex(h | (h << 16))


def _lloyd_cubic(levels):
    """Coefficients (c0, c1, c2, c3) of the cubic through (c, levels[c]), c = 0..3 (Newton form
    expanded; plain Python so kernel modules need no numpy)."""
    y0, y1, y2, y3 = levels
    d1 = [y1 - y0, y2 - y1, y3 - y2]
    d2 = [(d1[1] - d1[0]) / 2, (d1[2] - d1[1]) / 2]
    d3 = (d2[1] - d2[0]) / 3
    # y = y0 + d1[0] c + d2[0] c (c-1) + d3 c (c-1) (c-2)
    return (y0, d1[0] - d2[0] + 2 * d3, d2[0] - 3 * d3, d3)


def magic_bits(p: int) -> dict:
    """PTX immediates of plane p's unpack (shared by the per-code and folded tiles): the mask of
    its two bits in both 16-bit halves, and M_p = 2**(10 - 2p) as an fp16 pair."""
    half = 0x6400 - (p << 11)            # fp16 bits of 2**(10 - 2p): 1024, 256, 64, 16
    return dict(mask=hex((0x00030003 << (2 * p)) & 0xFFFFFFFF), magic=hex(half | (half << 16)))


def _plane_asm(p: int, lloyd_levels=None) -> str:
    fmt = magic_bits(p)
    if lloyd_levels is None:
        return _PLANE_ASM.format(**fmt)
    c = _lloyd_cubic(lloyd_levels)
    return _LLOYD_ASM.format(**fmt, c0=_f16x2(c[0]), c1=_f16x2(c[1]), c2=_f16x2(c[2]), c3=_f16x2(c[3]))


PLANE_ASM_0 = tl.constexpr(_plane_asm(0))
PLANE_ASM_1 = tl.constexpr(_plane_asm(1))
PLANE_ASM_2 = tl.constexpr(_plane_asm(2))
PLANE_ASM_3 = tl.constexpr(_plane_asm(3))
LLOYD_ASM_0 = tl.constexpr(_plane_asm(0, LLOYD_MAX_LEVELS))
LLOYD_ASM_1 = tl.constexpr(_plane_asm(1, LLOYD_MAX_LEVELS))
LLOYD_ASM_2 = tl.constexpr(_plane_asm(2, LLOYD_MAX_LEVELS))
LLOYD_ASM_3 = tl.constexpr(_plane_asm(3, LLOYD_MAX_LEVELS))


@triton.jit
def column(tile, g: tl.constexpr, NG: tl.constexpr, N: tl.constexpr):
    """Column g of a [N, NG] tile (NG in 1, 2, 4, 8) by splitting the last dim: no data movement
    when a token's NG values sit in one thread, which their contiguous load arranges."""
    if NG == 1:
        return tl.reshape(tile, [N])
    elif NG == 2:
        a, b = tl.split(tile)
        return a if g == 0 else b
    elif NG == 4:
        a, b = tl.split(tl.reshape(tile, [N, 2, 2]))
        c, d = tl.split(a if g % 2 == 0 else b)
        return c if g // 2 == 0 else d
    else:
        a, b = tl.split(tl.reshape(tile, [N, 4, 2]))
        c, d = tl.split(tl.reshape(a if g % 2 == 0 else b, [N, 2, 2]))
        e, f = tl.split(c if (g // 2) % 2 == 0 else d)
        return e if g // 4 == 0 else f


@triton.jit
def slot_parts(slot, odd, OFF_KS: tl.constexpr, ODD_SHIFT: tl.constexpr):
    """Byte offsets (codes, metadata) of slots at byte offsets `slot` whose page offsets are odd
    where odd = 1: their slot is stored rotated by ODD_SHIFT (docs/format.md, "odd slots"), the
    codes ODD_SHIFT bytes later and the metadata block (normally at OFF_KS) at the slot's start.
    The one place the store, the loads and the centering kernel take the rotation from."""
    if ODD_SHIFT > 0:
        return slot + odd * ODD_SHIFT, slot - odd * OFF_KS
    else:
        return slot, slot


@triton.jit
def load_meta(meta_f16, nmask, OFF: tl.constexpr, NG: tl.constexpr):
    """The NG fp16 values at byte offset OFF of each token's slot -> fp16 [N, NG] (one vector
    load per token instead of NG scattered ones)."""
    return tl.load(meta_f16[:, None] + (OFF // 2 + tl.arange(0, NG))[None, :],
                   mask=nmask[:, None], other=0.0)


@triton.jit
def load_slots(base_u8, base_f16, slot, nmask, W: tl.constexpr, NG: tl.constexpr, OFF_V: tl.constexpr,
               OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr, OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr,
               MASK_CODES: tl.constexpr = True, V_PAIRS: tl.constexpr = False, odd=0,
               ODD_SHIFT: tl.constexpr = 0):
    """A tile's slots at byte offsets slot [N] from base_u8 (base_f16: the same address as fp16), valid
    where nmask: K and V code bytes [N, W] uint8 and the four metadata tiles [N, NG] fp16 (K scale,
    K zero, V scale, V zero).
    The metadata are contiguous in a slot (docs/format.md), so they come in one vector load per token
    and are split in registers: four loads of NG values each made ~4 sector requests per token
    where one does (Nsight Compute: 61 % of the split kernel's L2 sector requests were excess).
    MASK_CODES=False when every slot lies in allocated memory (one valid page per tile): the code
    bytes are then read unmasked -- codes are finite whatever the bytes, and the masked (zero)
    scales and zeros make a masked token's keys and values exactly 0.
    V_PAIRS: V's codes as [W/2, N] uint16 words (the folded tile's P.V operand, folded.py) instead
    of [N, W] bytes; 2: the same words as [N, W/2] (folded.int2_tile_rows). odd [N] (0/1): the
    tokens whose slots are rotated by ODD_SHIFT (odd page offsets, docs/format.md "odd slots"):
    their codes sit ODD_SHIFT bytes later, their metadata block at the slot's start."""
    tl.static_assert(OFF_KZ == OFF_KS + 2 * NG and OFF_VS == OFF_KZ + 2 * NG and OFF_VZ == OFF_VS + 2 * NG)
    N: tl.constexpr = slot.shape[0]
    cols = tl.arange(0, W)
    slot, meta_at = slot_parts(slot, odd, OFF_KS, ODD_SHIFT)
    meta = base_f16 + meta_at // 2                    # slots are 16-byte aligned
    if MASK_CODES:
        kbytes = tl.load(base_u8 + slot[:, None] + cols[None, :], mask=nmask[:, None], other=0)
    else:
        kbytes = tl.load(base_u8 + slot[:, None] + cols[None, :])
    if V_PAIRS == 2:    # 16-bit words as [N, W/2] (folded.int2_tile_rows' P.V operand)
        words = (base_u8 + slot + OFF_V).to(tl.pointer_type(tl.uint16))[:, None] + tl.arange(0, W // 2)[None, :]
        if MASK_CODES:
            vbytes = tl.load(words, mask=nmask[:, None], other=0)
        else:
            vbytes = tl.load(words)
    elif V_PAIRS:       # 16-bit words (slots and OFF_V are even), loaded transposed: [W/2, N]
        words = (base_u8 + slot + OFF_V).to(tl.pointer_type(tl.uint16))[None, :] + tl.arange(0, W // 2)[:, None]
        if MASK_CODES:
            vbytes = tl.load(words, mask=nmask[None, :], other=0)
        else:
            vbytes = tl.load(words)
    elif MASK_CODES:
        vbytes = tl.load(base_u8 + slot[:, None] + (OFF_V + cols)[None, :], mask=nmask[:, None], other=0)
    else:
        vbytes = tl.load(base_u8 + slot[:, None] + (OFF_V + cols)[None, :])
    # [N, 4 NG] -> [N, 2 (K|V), 2 (scale|zero), NG] -> [N, NG, K|V, scale|zero], split twice
    both = tl.permute(tl.reshape(load_meta(meta, nmask, OFF_KS, 4 * NG), [N, 2, 2, NG]), (0, 3, 1, 2))
    scales, zeros = tl.split(both)                    # [N, NG, 2 (K|V)] each
    k_scale, v_scale = tl.split(scales)
    k_zero, v_zero = tl.split(zeros)
    return kbytes, vbytes, k_scale, k_zero, v_scale, v_zero


@triton.jit
def plane_meta(tile, P: tl.constexpr, N: tl.constexpr, W: tl.constexpr, G: tl.constexpr,
               NG: tl.constexpr, SEG: tl.constexpr):
    """Scale (or zero) of every element of plane P: [N, 1] when the plane lies in one group,
    else [N, W] picking each segment's group."""
    if W // SEG == 1:
        return column(tile, (P * W) // G, NG, N)[:, None]
    else:
        cols = tl.arange(0, W)[None, :]
        out = column(tile, (P * W) // G, NG, N)[:, None] + tl.zeros([N, W], tile.dtype)
        for s in tl.static_range(1, W // SEG):
            out = tl.where(cols >= s * SEG, column(tile, (P * W + s * SEG) // G, NG, N)[:, None], out)
        return out


@triton.jit
def dequant_plane(packed, P: tl.constexpr, scale, zero, LLOYD: tl.constexpr, L0: tl.constexpr,
                  L1: tl.constexpr, L2: tl.constexpr, L3: tl.constexpr, DOT: tl.constexpr,
                  FAST: tl.constexpr):
    """Plane P of packed uint8 codes [N, W] -> level(code) * scale + zero as DOT [N, W]."""
    if FAST and DOT == tl.float16:
        s = scale.to(tl.float16)
        z = zero.to(tl.float16)
        # the unpack of plane P with uniform or Lloyd-Max levels (module docstring)
        if P == 0:
            asm: tl.constexpr = LLOYD_ASM_0 if LLOYD else PLANE_ASM_0
        elif P == 1:
            asm: tl.constexpr = LLOYD_ASM_1 if LLOYD else PLANE_ASM_1
        elif P == 2:
            asm: tl.constexpr = LLOYD_ASM_2 if LLOYD else PLANE_ASM_2
        else:
            asm: tl.constexpr = LLOYD_ASM_3 if LLOYD else PLANE_ASM_3
        return tl.inline_asm_elementwise(asm, "=r,=r,r,r,r,r,r", [packed, s, z],
                                         dtype=tl.float16, is_pure=True, pack=4)
    else:
        c = (packed >> (2 * P)) & 3
        if LLOYD:
            lvl = tl.where(c == 0, L0, tl.where(c == 1, L1, tl.where(c == 2, L2, L3)))
        else:
            lvl = c.to(tl.float32)
        return (lvl * scale.to(tl.float32) + zero.to(tl.float32)).to(DOT)


@triton.jit
def group_heads(pid, RATIO: tl.constexpr, TILES: tl.constexpr, BLOCK_H: tl.constexpr):
    """Program `pid` of num_kv_heads * TILES -> (kv_head, q_head [BLOCK_H], mask): a tile of its
    KV group's query heads, never straddling two groups (decode.py's docstring)."""
    kv_head = pid // TILES
    in_group = (pid % TILES) * BLOCK_H + tl.arange(0, BLOCK_H)
    return kv_head, kv_head * RATIO + in_group, in_group < RATIO


@triton.jit
def query_planes(q_ptr, token, stride_qt, q_head, stride_qh, hmask, W: tl.constexpr, DOT: tl.constexpr):
    """The four W-column planes of rows q_head of query token `token` as DOT [BLOCK_H, W] (the
    folded tile takes them as folded.query_codes gives them)."""
    q_rows = q_ptr + token * stride_qt + q_head[:, None] * stride_qh + tl.arange(0, W)[None, :]
    q0 = tl.load(q_rows + 0 * W, mask=hmask[:, None], other=0.0)
    q1 = tl.load(q_rows + 1 * W, mask=hmask[:, None], other=0.0)
    q2 = tl.load(q_rows + 2 * W, mask=hmask[:, None], other=0.0)
    q3 = tl.load(q_rows + 3 * W, mask=hmask[:, None], other=0.0)
    return q0.to(DOT), q1.to(DOT), q2.to(DOT), q3.to(DOT)


@triton.jit
def empty_state(ROWS: tl.constexpr, W: tl.constexpr):
    """Online-softmax state before any token: (m = -inf, l = 0, four zero accumulator planes)."""
    return (tl.full([ROWS], float("-inf"), tl.float32), tl.zeros([ROWS], tl.float32),
            tl.zeros([ROWS, W], tl.float32), tl.zeros([ROWS, W], tl.float32),
            tl.zeros([ROWS, W], tl.float32), tl.zeros([ROWS, W], tl.float32))


@triton.jit
def softmax_step(m_i, l_i, s):
    """Online softmax over one tile of scores s [ROWS, N] (log2 units, -inf where hidden):
    returns (new running max, new running sum, alpha to rescale the accumulators, p)."""
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)       # rows that have seen nothing yet
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    return m_new, l_i * alpha + tl.sum(p, axis=1), alpha, p


@triton.jit
def int2_tile(m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3,
              kbytes, vbytes, k_scale, k_zero, v_scale, v_zero, nmask, qk_scale, tok, qc,
              ROWS: tl.constexpr, N: tl.constexpr, W: tl.constexpr, G: tl.constexpr, NG: tl.constexpr,
              SEG: tl.constexpr, LLOYD: tl.constexpr, L0: tl.constexpr,
              L1: tl.constexpr, L2: tl.constexpr, L3: tl.constexpr, DOT: tl.constexpr,
              FAST: tl.constexpr, SINKS: tl.constexpr):
    """One tile of N int2 tokens for ROWS query rows: QK^T over the dequantized K planes,
    online-softmax update, P.V into the four output planes. The tile's data as load_slots returns
    it (valid where nmask); q0..q3: the query planes as DOT [ROWS, W]. With K centering, the
    first SINKS positions of a sequence are stored uncentered: their scores get -q.c (qc [ROWS],
    tok [N] the tokens' positions) so that every score is the uncentered one minus the same q.c.
    Returns the updated (m_i, l_i, acc0, acc1, acc2, acc3)."""

    # K is dequantized token-major ([N, W]: each token's bytes contiguous, wide loads) and
    # transposed for the dot.
    s = tl.zeros([ROWS, N], tl.float32)
    s = tl.dot(q0, tl.trans(dequant_plane(kbytes, 0, plane_meta(k_scale, 0, N, W, G, NG, SEG),
                                          plane_meta(k_zero, 0, N, W, G, NG, SEG), LLOYD, L0, L1, L2, L3, DOT, FAST)), s)
    s = tl.dot(q1, tl.trans(dequant_plane(kbytes, 1, plane_meta(k_scale, 1, N, W, G, NG, SEG),
                                          plane_meta(k_zero, 1, N, W, G, NG, SEG), LLOYD, L0, L1, L2, L3, DOT, FAST)), s)
    s = tl.dot(q2, tl.trans(dequant_plane(kbytes, 2, plane_meta(k_scale, 2, N, W, G, NG, SEG),
                                          plane_meta(k_zero, 2, N, W, G, NG, SEG), LLOYD, L0, L1, L2, L3, DOT, FAST)), s)
    s = tl.dot(q3, tl.trans(dequant_plane(kbytes, 3, plane_meta(k_scale, 3, N, W, G, NG, SEG),
                                          plane_meta(k_zero, 3, N, W, G, NG, SEG), LLOYD, L0, L1, L2, L3, DOT, FAST)), s)
    if SINKS > 0:
        s = s - tl.where(tok[None, :] < SINKS, qc[:, None], 0.0)
    s = tl.where(nmask[None, :], s * qk_scale, float("-inf"))

    m_new, l_i, alpha, p = softmax_step(m_i, l_i, s)
    pd = p.to(DOT)

    acc0 = tl.dot(pd, dequant_plane(vbytes, 0, plane_meta(v_scale, 0, N, W, G, NG, SEG),
                                    plane_meta(v_zero, 0, N, W, G, NG, SEG), LLOYD, L0, L1, L2, L3, DOT, FAST),
                  acc0 * alpha[:, None])
    acc1 = tl.dot(pd, dequant_plane(vbytes, 1, plane_meta(v_scale, 1, N, W, G, NG, SEG),
                                    plane_meta(v_zero, 1, N, W, G, NG, SEG), LLOYD, L0, L1, L2, L3, DOT, FAST),
                  acc1 * alpha[:, None])
    acc2 = tl.dot(pd, dequant_plane(vbytes, 2, plane_meta(v_scale, 2, N, W, G, NG, SEG),
                                    plane_meta(v_zero, 2, N, W, G, NG, SEG), LLOYD, L0, L1, L2, L3, DOT, FAST),
                  acc2 * alpha[:, None])
    acc3 = tl.dot(pd, dequant_plane(vbytes, 3, plane_meta(v_scale, 3, N, W, G, NG, SEG),
                                    plane_meta(v_zero, 3, N, W, G, NG, SEG), LLOYD, L0, L1, L2, L3, DOT, FAST),
                  acc3 * alpha[:, None])
    return m_new, l_i, acc0, acc1, acc2, acc3


@triton.jit
def row_plane(rows, P: tl.constexpr, nmask, W: tl.constexpr, DOT: tl.constexpr):
    """Columns [P*W, (P+1)*W) of N full-precision rows (pointers [N]) as DOT [N, W]."""
    cols = tl.arange(0, W)
    return tl.load(rows[:, None] + (P * W + cols)[None, :], mask=nmask[:, None], other=0.0).to(DOT)


@triton.jit
def fp_tile(m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, k_rows, v_rows, nmask, qk_scale, tok, qc,
            ROWS: tl.constexpr, N: tl.constexpr, W: tl.constexpr, DOT: tl.constexpr, SINKS: tl.constexpr):
    """One tile of N full-precision tokens (the recent window): k_rows / v_rows are pointers [N]
    to each token's K / V row (D elements, the same rotated basis as the int2 cache, and like it
    uncentered at positions < SINKS, whose scores get -q.c: tok [N] positions, qc [ROWS]).
    Same online-softmax update as int2_tile."""
    s = tl.zeros([ROWS, N], tl.float32)
    s = tl.dot(q0, tl.trans(row_plane(k_rows, 0, nmask, W, DOT)), s)
    s = tl.dot(q1, tl.trans(row_plane(k_rows, 1, nmask, W, DOT)), s)
    s = tl.dot(q2, tl.trans(row_plane(k_rows, 2, nmask, W, DOT)), s)
    s = tl.dot(q3, tl.trans(row_plane(k_rows, 3, nmask, W, DOT)), s)
    if SINKS > 0:
        s = s - tl.where(tok[None, :] < SINKS, qc[:, None], 0.0)
    s = tl.where(nmask[None, :], s * qk_scale, float("-inf"))
    m_new, l_i, alpha, p = softmax_step(m_i, l_i, s)
    pd = p.to(DOT)
    acc0 = tl.dot(pd, row_plane(v_rows, 0, nmask, W, DOT), acc0 * alpha[:, None])
    acc1 = tl.dot(pd, row_plane(v_rows, 1, nmask, W, DOT), acc1 * alpha[:, None])
    acc2 = tl.dot(pd, row_plane(v_rows, 2, nmask, W, DOT), acc2 * alpha[:, None])
    acc3 = tl.dot(pd, row_plane(v_rows, 3, nmask, W, DOT), acc3 * alpha[:, None])
    return m_new, l_i, acc0, acc1, acc2, acc3


@triton.jit
def query_dot_center(q0, q1, q2, q3, cen_row, W: tl.constexpr):
    """q . c in fp32 for every query row: cen_row points at the KV head's rotated offset c (D fp32)
    -- the correction of the uncentered sinks' scores, computed where it is used."""
    cols = tl.arange(0, W)
    qc = tl.sum(q0.to(tl.float32) * tl.load(cen_row + 0 * W + cols)[None, :], axis=1)
    qc += tl.sum(q1.to(tl.float32) * tl.load(cen_row + 1 * W + cols)[None, :], axis=1)
    qc += tl.sum(q2.to(tl.float32) * tl.load(cen_row + 2 * W + cols)[None, :], axis=1)
    qc += tl.sum(q3.to(tl.float32) * tl.load(cen_row + 3 * W + cols)[None, :], axis=1)
    return qc


@triton.jit
def tile_pages(table_row, tok, nmask, BLOCK_SIZE: tl.constexpr):
    """Page ids [N] of positions tok (valid where nmask) from a block-table row."""
    return tl.load(table_row + tok // BLOCK_SIZE, mask=nmask, other=0)


@triton.jit
def next_page(table_row, lo, end, ar, BLOCK_SIZE: tl.constexpr, N: tl.constexpr, TABLE_AHEAD: tl.constexpr):
    """With TABLE_AHEAD, the block-table entries of the tile at lo, loaded before the loop (load_tile
    carries them from there); else a placeholder."""
    if TABLE_AHEAD and BLOCK_SIZE % N == 0:
        return tl.load(table_row + lo // BLOCK_SIZE, mask=lo < end, other=0)
    elif TABLE_AHEAD:
        return tile_pages(table_row, lo + ar, lo + ar < end, BLOCK_SIZE)
    else:
        return tl.zeros([N], tl.int32)


@triton.jit
def load_tile(n0, page_next, ar, first, end, table_row, head_off, stride_cb, stride_cs, cache_u8, cache_f16,
              BLOCK_SIZE: tl.constexpr, N: tl.constexpr, W: tl.constexpr, NG: tl.constexpr, OFF_V: tl.constexpr,
              OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr, OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr,
              TABLE_AHEAD: tl.constexpr, V_PAIRS: tl.constexpr = False, ODD_SHIFT: tl.constexpr = 0):
    """The tile of positions n0 + ar (ar = arange(N)), valid where first <= position < end: returns
    (nmask, the next tile's page entries (TABLE_AHEAD), and load_slots' six tiles).
    When N divides the page size, the tiles (starting on multiples of N) never cross a page: one
    block-table entry per tile and the slots' addresses are one scalar base plus offsets fixed for
    the whole loop, instead of a page id, a 64-bit multiply and a layout conversion per token (the
    address arithmetic was ~10 % of the folded loop's instructions).
    TABLE_AHEAD: the block-table entries of the next tile are loaded here and carried, so a tile's
    copies depend on no load of their own iteration, and Triton's pipeliner keeps one tile's copies
    in flight while another computes (TTGIR async_wait 6 -- 3 with one page per tile -- instead of
    0). Entries two tiles ahead made it give up on async copies."""
    tok = n0 + ar
    nmask = (tok < end) & (tok >= first)
    if BLOCK_SIZE % N == 0:     # one block-table entry per tile; slots at one scalar base + rows
        if TABLE_AHEAD:
            page = page_next
            page_next = tl.load(table_row + (n0 + N) // BLOCK_SIZE, mask=n0 + N < end, other=0)
        else:
            page = tl.load(table_row + n0 // BLOCK_SIZE)
        base = page.to(tl.int64) * stride_cb + (n0 % BLOCK_SIZE) * stride_cs + head_off
        kbytes, vcodes, k_scale, k_zero, v_scale, v_zero = load_slots(
            cache_u8 + base, cache_f16 + base // 2, ar * stride_cs, nmask, W, NG, OFF_V, OFF_KS, OFF_KZ, OFF_VS,
            OFF_VZ, MASK_CODES=False, V_PAIRS=V_PAIRS, odd=ar % 2, ODD_SHIFT=ODD_SHIFT)   # tiles start even
    else:                       # a page id per token
        if TABLE_AHEAD:
            page = page_next
            page_next = tile_pages(table_row, tok + N, tok + N < end, BLOCK_SIZE)
        else:
            page = tile_pages(table_row, tok, nmask, BLOCK_SIZE)
        slot = page.to(tl.int64) * stride_cb + (tok % BLOCK_SIZE) * stride_cs + head_off
        kbytes, vcodes, k_scale, k_zero, v_scale, v_zero = load_slots(
            cache_u8, cache_f16, slot, nmask, W, NG, OFF_V, OFF_KS, OFF_KZ, OFF_VS, OFF_VZ, V_PAIRS=V_PAIRS,
            odd=(tok % BLOCK_SIZE) % 2, ODD_SHIFT=ODD_SHIFT)
    return nmask, page_next, kbytes, vcodes, k_scale, k_zero, v_scale, v_zero


@triton.jit
def _int2_tiles(m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, lo, hi, first, end, table_row, head_off,
                stride_cb, stride_cs, cache_u8, cache_f16, qk_scale, qc, BLOCK_SIZE: tl.constexpr,
                ROWS: tl.constexpr, N: tl.constexpr, W: tl.constexpr, G: tl.constexpr, NG: tl.constexpr,
                SEG: tl.constexpr, OFF_V: tl.constexpr, OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr,
                OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr, LLOYD: tl.constexpr, L0: tl.constexpr,
                L1: tl.constexpr, L2: tl.constexpr, L3: tl.constexpr, DOT: tl.constexpr,
                FAST: tl.constexpr, SINKS: tl.constexpr, TABLE_AHEAD: tl.constexpr = False,
                ODD_SHIFT: tl.constexpr = 0):
    """Tiles of int2_tile starting at lo, lo + N, ... below hi (lo a multiple of N); positions
    < first or >= end are masked. TABLE_AHEAD: block-table entries a tile ahead (load_tile;
    decode_launch_config picks it)."""
    ar = tl.arange(0, N)
    page_next = next_page(table_row, lo, end, ar, BLOCK_SIZE, N, TABLE_AHEAD)
    for n0 in range(lo, hi, N):
        nmask, page_next, kbytes, vbytes, k_scale, k_zero, v_scale, v_zero = load_tile(
            n0, page_next, ar, first, end, table_row, head_off, stride_cb, stride_cs, cache_u8, cache_f16,
            BLOCK_SIZE, N, W, NG, OFF_V, OFF_KS, OFF_KZ, OFF_VS, OFF_VZ, TABLE_AHEAD, ODD_SHIFT=ODD_SHIFT)
        m_i, l_i, acc0, acc1, acc2, acc3 = int2_tile(
            m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3,
            kbytes, vbytes, k_scale, k_zero, v_scale, v_zero, nmask, qk_scale, n0 + ar, qc,
            ROWS, N, W, G, NG, SEG, LLOYD, L0, L1, L2, L3, DOT, FAST, SINKS)
    return m_i, l_i, acc0, acc1, acc2, acc3


@triton.jit
def int2_span(m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, lo, hi, first, table_row, head_off,
              stride_cb, stride_cs, cache_u8, cache_f16, qk_scale, qc, BLOCK_SIZE: tl.constexpr,
              ROWS: tl.constexpr, N: tl.constexpr, W: tl.constexpr, G: tl.constexpr, NG: tl.constexpr,
              SEG: tl.constexpr, OFF_V: tl.constexpr, OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr,
              OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr, LLOYD: tl.constexpr, L0: tl.constexpr,
              L1: tl.constexpr, L2: tl.constexpr, L3: tl.constexpr, DOT: tl.constexpr,
              FAST: tl.constexpr, SINKS: tl.constexpr, TABLE_AHEAD: tl.constexpr = False,
              ODD_SHIFT: tl.constexpr = 0):
    """Positions [max(lo, first), hi) of one sequence from the paged int2 cache, N at a time from lo
    (a multiple of N). table_row: the sequence's block-table row (pointer); head_off: the KV head's
    byte offset in a token's row.
    Only the tiles holding positions < SINKS pay for the sink correction (their own loop)."""
    sink_hi = lo
    if SINKS > 0:
        sink_hi = tl.minimum(hi, lo + tl.cdiv(tl.maximum(SINKS - lo, 0), N) * N)
        m_i, l_i, acc0, acc1, acc2, acc3 = _int2_tiles(
            m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, lo, sink_hi, first, hi, table_row, head_off,
            stride_cb, stride_cs, cache_u8, cache_f16, qk_scale, qc, BLOCK_SIZE, ROWS, N, W, G, NG, SEG,
            OFF_V, OFF_KS, OFF_KZ, OFF_VS, OFF_VZ, LLOYD, L0, L1, L2, L3, DOT, FAST, SINKS, ODD_SHIFT=ODD_SHIFT)
    return _int2_tiles(
        m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, sink_hi, hi, first, hi, table_row, head_off,
        stride_cb, stride_cs, cache_u8, cache_f16, qk_scale, qc, BLOCK_SIZE, ROWS, N, W, G, NG, SEG,
        OFF_V, OFF_KS, OFF_KZ, OFF_VS, OFF_VZ, LLOYD, L0, L1, L2, L3, DOT, FAST, 0, TABLE_AHEAD, ODD_SHIFT)


@triton.jit
def window_slot(tok, WBS: tl.constexpr, RING: tl.constexpr):
    """(table column, offset in the page) of positions `tok` in the recent window (docs/format.md,
    "Recent window"): paged (RING = 0), position p at offset p % WBS of page p // WBS; a ring
    (RING > 0), one page whose first WBS - RING slots hold the sequence's first positions for its
    whole life and whose last RING slots are a ring over the positions after them."""
    if RING == 0:
        col = tok // WBS
        off = tok % WBS
    else:
        col = tok * 0
        off = tl.where(tok < WBS - RING, tok, (WBS - RING) + (tok - (WBS - RING)) % RING)
    return col, off


@triton.jit
def window_span(m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, lo, hi, wtable_row, head_off,
                stride_wb, stride_ws, wk_ptr, wv_ptr, qk_scale, qc, WBS: tl.constexpr, RING: tl.constexpr,
                ROWS: tl.constexpr, N: tl.constexpr, W: tl.constexpr, DOT: tl.constexpr, SINKS: tl.constexpr):
    """Positions [lo, hi) of one sequence from the full-precision window cache, paged or a ring
    (window_slot); positions < SINKS, uncentered, get -qc."""
    for n0 in range(lo, hi, N):
        tok = n0 + tl.arange(0, N)
        nmask = tok < hi
        col, off = window_slot(tok, WBS, RING)
        page = tl.load(wtable_row + col, mask=nmask, other=0)
        row = page.to(tl.int64) * stride_wb + off * stride_ws + head_off
        m_i, l_i, acc0, acc1, acc2, acc3 = fp_tile(
            m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, wk_ptr + row, wv_ptr + row, nmask,
            qk_scale, tok, qc, ROWS, N, W, DOT, SINKS)
    return m_i, l_i, acc0, acc1, acc2, acc3


@triton.jit
def chunk_span(m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, rows, end, k_base, v_base, stride_kt, stride_vt,
               qk_scale, N: tl.constexpr, W: tl.constexpr, DOT: tl.constexpr):
    """The chunk's own keys [0, end) in full precision, causal: key j is visible to query row i
    (positions within the chunk, `rows`) if j <= i. k_base / v_base point at the chunk's first
    token of the KV head."""
    cols = tl.arange(0, W)
    for n0 in range(0, end, N):
        keys = n0 + tl.arange(0, N)
        kmask = keys < end
        k_rows = k_base + keys[None, :] * stride_kt + cols[:, None]
        v_rows = v_base + keys[:, None] * stride_vt + cols[None, :]
        s = tl.dot(q0, tl.load(k_rows + 0 * W, mask=kmask[None, :], other=0.0).to(DOT))
        s += tl.dot(q1, tl.load(k_rows + 1 * W, mask=kmask[None, :], other=0.0).to(DOT))
        s += tl.dot(q2, tl.load(k_rows + 2 * W, mask=kmask[None, :], other=0.0).to(DOT))
        s += tl.dot(q3, tl.load(k_rows + 3 * W, mask=kmask[None, :], other=0.0).to(DOT))
        visible = kmask[None, :] & (keys[None, :] <= rows[:, None])
        s = tl.where(visible, s * qk_scale, float("-inf"))
        m_i, l_i, alpha, p = softmax_step(m_i, l_i, s)      # padded rows see nothing: safe
        pd = p.to(DOT)
        acc0 = acc0 * alpha[:, None] + tl.dot(pd, tl.load(v_rows + 0 * W, mask=kmask[:, None], other=0.0).to(DOT))
        acc1 = acc1 * alpha[:, None] + tl.dot(pd, tl.load(v_rows + 1 * W, mask=kmask[:, None], other=0.0).to(DOT))
        acc2 = acc2 * alpha[:, None] + tl.dot(pd, tl.load(v_rows + 2 * W, mask=kmask[:, None], other=0.0).to(DOT))
        acc3 = acc3 * alpha[:, None] + tl.dot(pd, tl.load(v_rows + 3 * W, mask=kmask[:, None], other=0.0).to(DOT))
    return m_i, l_i, acc0, acc1, acc2, acc3


@triton.jit
def chunk_queries(q_ptr, q_start, rows, rmask, q_head, stride_qt, stride_qh, W: tl.constexpr, DOT: tl.constexpr):
    """The four channel quarters [ROWS, W] of a chunk's query rows (`rows`: positions within the
    chunk, which starts at token q_start) of one query head; masked rows are 0."""
    q_rows = q_ptr + (q_start + rows)[:, None] * stride_qt + q_head * stride_qh + tl.arange(0, W)[None, :]
    q0 = tl.load(q_rows + 0 * W, mask=rmask[:, None], other=0.0).to(DOT)
    q1 = tl.load(q_rows + 1 * W, mask=rmask[:, None], other=0.0).to(DOT)
    q2 = tl.load(q_rows + 2 * W, mask=rmask[:, None], other=0.0).to(DOT)
    q3 = tl.load(q_rows + 3 * W, mask=rmask[:, None], other=0.0).to(DOT)
    return q0, q1, q2, q3


@triton.jit
def with_sink_logit(m_i, l_i, acc0, acc1, acc2, acc3, sink):
    """One more score per row, `sink` (log2 units), whose value is zero: a learned attention sink
    (gpt-oss) takes its share of the softmax and adds nothing to the output."""
    m_new = tl.maximum(m_i, sink)
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.exp2(sink - m_new)
    return (m_new, l_i, acc0 * alpha[:, None], acc1 * alpha[:, None], acc2 * alpha[:, None],
            acc3 * alpha[:, None])


@triton.jit
def store_chunk_rows(out_ptr, q_start, rows, rmask, q_head, stride_ot, stride_oh, l_i, acc0, acc1, acc2, acc3,
                     W: tl.constexpr):
    """Normalise the accumulators by the softmax sums and store the chunk's output rows (the layout
    of chunk_queries); a row that saw no key (l = 0) stores 0."""
    inv_l = 1.0 / tl.where(l_i > 0, l_i, 1.0)
    o_rows = out_ptr + (q_start + rows)[:, None] * stride_ot + q_head * stride_oh + tl.arange(0, W)[None, :]
    ty = out_ptr.dtype.element_ty
    tl.store(o_rows + 0 * W, (acc0 * inv_l[:, None]).to(ty), mask=rmask[:, None])
    tl.store(o_rows + 1 * W, (acc1 * inv_l[:, None]).to(ty), mask=rmask[:, None])
    tl.store(o_rows + 2 * W, (acc2 * inv_l[:, None]).to(ty), mask=rmask[:, None])
    tl.store(o_rows + 3 * W, (acc3 * inv_l[:, None]).to(ty), mask=rmask[:, None])
