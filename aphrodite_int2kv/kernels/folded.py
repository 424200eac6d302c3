"""The folded decode tile: uniform-level int2 codes straight into the tensor cores, scale and zero
applied to the dot products instead of to every code (docs/format.md, "How decode reads it").

Both products put *tokens on the MMA's K or M side and the query heads (ROWS <= 8 or 16..32) on
its N side*, so no operand is padded from 8 heads to the MMA's 16 rows:

    scores  sT [N, ROWS]    = K codes [N tokens, W] . q plane^T [W, ROWS]     (per plane and group)
    output  accT [W/2, ROWS] = V codes^T [W/2, N tokens] . (p * V scale) [N, ROWS]   (even / odd columns)

The scores are integer dots: K's codes as int8 against the query rounded to int8 at a
power-of-two scale per row (query_codes), on the int8 tensor cores (mma m16n8k32), exact in
int32 and converted once per group. The K operand's register holds 4 consecutive columns of a
token, the cache's own byte order, so a plane costs one AND (and a shift shared by two planes);
the fp16 operand it replaced took two PRMT and two LOP3 per 4 codes and twice the MMAs
(12-14 % fewer instructions in the tile loop).

The P.V operand needs pairs of consecutive tokens per register (its contraction runs over
tokens) while a token's bytes are contiguous in the cache. V's codes are therefore read as 16-bit
words (the bytes of columns 2j, 2j + 1), transposed to [W/2, N] -- which the tensor-core operand
load does with a transposing ldmatrix from shared memory -- and one register holding the words of
tokens t, t + 1 gives the even-column pair (masked in place) and the odd-column pair (shifted
first). The output plane is kept as two accumulators, even and odd columns, interleaved again
when stored. p stays fp16: its small weights would round to 0 in 8 bits.

V's codes enter as fp16 subnormals: masking a plane's two bits in place leaves the half
code * 2**(2P - 24), exact, which the tensor cores multiply like any fp16 (no offset to cancel,
no conversion); the power of two is undone once per program (plane_unit), and so is the zero
term, summed as one dot per tile (zs). Under TRITON_INTERPRET (no inline assembly) the codes come
from shifts and masks, plane_unit is 1 and no plane is lifted (k_codes).

int2_tile_rows is the same tile turned around for >= 16 query rows (int2_decode rows_on_m, the
engine's tile above 8 query heads per KV head at head_dim >= 128): query rows on the MMA's M side,
tokens on N (scores) and K (P.V), so that p passes from one MMA to the next in registers, and K's
zero term enters the scores as one small MMA (docs/benchmarks.md, "Many query heads per KV head").
"""

import triton
import triton.language as tl

from aphrodite_int2kv.kernels.common import column, load_tile, magic_bits


# V: two 16-bit words, tokens t (low) and t+1 (high), each the bytes of columns 2j, 2j+1 ->
# the fp16 pair of column 2j (tokens t, t+1: bytes 0 and 2, masked in place) and that of column
# 2j+1 (bytes 1 and 3, shifted down first). The masked halves are fp16 subnormals: plane P's code
# reads code * 2**(2P - 24), exactly (plane_unit undoes the power of two once per program).
_VE_ASM = "and.b32 $0, $1, {mask};"
_VO_ASM = "{{\n.reg .b32 w;\nshr.b32 w, $1, 8;\nand.b32 $0, w, {mask};\n}}\n"


# K as int8 codes for the integer tensor cores (mma m16n8k32 s8, query rows as int8: query_codes).
# Its operand register holds the 4 bytes of one token's columns j..j+3, which is how the cache
# stores them, so a plane is one AND of the code word (planes 0 and 2) or of the word shifted by
# 2 (planes 1 and 3; ptxas computes the shift once for both). Planes 2 and 3 are taken in place,
# as 16 * code, where their group holds no plane 0 or 1 (k_codes): the group's scale carries the
# 1/16 (int2_tile_folded) or the dot's origin does (origin_bits, int2_tile_rows). Otherwise (one
# group over all four planes) they are shifted down like the others.
_K8_ASM = "and.b32 $0, $1, {mask};"
_K8S_ASM = "{{\n.reg .b32 w;\nshr.b32 w, $1, {shift};\nand.b32 $0, w, {mask};\n}}\n"
K8_ASM_0 = tl.constexpr(_K8_ASM.format(mask="0x03030303"))
K8_ASM_1 = tl.constexpr(_K8S_ASM.format(shift=2, mask="0x03030303"))
K8_ASM_2 = tl.constexpr(_K8S_ASM.format(shift=4, mask="0x03030303"))
K8_ASM_3 = tl.constexpr(_K8S_ASM.format(shift=6, mask="0x03030303"))
K8_ASM_2L = tl.constexpr(_K8_ASM.format(mask="0x30303030"))                  # 16 * code
K8_ASM_3L = tl.constexpr(_K8S_ASM.format(shift=2, mask="0x30303030"))        # 16 * code


def _asm(template: str, p: int) -> str:
    return template.format(mask=magic_bits(p)["mask"])


VE_ASM_0 = tl.constexpr(_asm(_VE_ASM, 0))
VE_ASM_1 = tl.constexpr(_asm(_VE_ASM, 1))
VE_ASM_2 = tl.constexpr(_asm(_VE_ASM, 2))
VE_ASM_3 = tl.constexpr(_asm(_VE_ASM, 3))
VO_ASM_0 = tl.constexpr(_asm(_VO_ASM, 0))
VO_ASM_1 = tl.constexpr(_asm(_VO_ASM, 1))
VO_ASM_2 = tl.constexpr(_asm(_VO_ASM, 2))
VO_ASM_3 = tl.constexpr(_asm(_VO_ASM, 3))


@triton.constexpr_function
def lifted(g, W, G):
    """Whether group g's K dots take planes 2 and 3 lifted, as 16 * the codes (k_codes): the group
    holds no plane 0 or 1 (g G >= 2W) and lies within planes 2-3 (G <= 2W)."""
    return G <= 2 * W and g * G >= 2 * W


@triton.jit
def k_codes(kbytes, P: tl.constexpr, g: tl.constexpr, W: tl.constexpr, G: tl.constexpr, FAST: tl.constexpr):
    """Plane P of K's code bytes [N, W] uint8, for group g's dot -> int8 [N, W]: the codes, or
    16 * the codes for planes 2, 3 *lifted*, where g holds no plane 0 or 1 (G <= 2W, g G >= 2W)."""
    if FAST:
        if P == 0:
            asm: tl.constexpr = K8_ASM_0
        elif P == 1:
            asm: tl.constexpr = K8_ASM_1
        elif P == 2:
            if lifted(g, W, G):
                asm: tl.constexpr = K8_ASM_2L
            else:
                asm: tl.constexpr = K8_ASM_2
        else:
            if lifted(g, W, G):
                asm: tl.constexpr = K8_ASM_3L
            else:
                asm: tl.constexpr = K8_ASM_3
        return tl.inline_asm_elementwise(asm, "=r,r", [kbytes], dtype=tl.int8, is_pure=True, pack=4)
    else:
        return ((kbytes >> (2 * P)) & 3).to(tl.int8)


@triton.constexpr_function
def _origin_exponent(g, W, G, FAST):
    """E of group g's origin, 1.5 * 2**E, whose unit in the last place is 2**(E - 23): 1 for a
    plain dot, 1/16 for a lifted one (k_codes: its dot is 16 times the codes')."""
    return 19 if FAST and lifted(g, W, G) else 23


@triton.constexpr_function
def origin_bits(g, W, G, FAST):
    """The int32 that group g's integer dot accumulates from: the bits of the fp32 1.5 * 2**E
    (_origin_exponent). Adding the dot to the bits adds dot * unit to the float, exactly, while the
    sum stays in the binade: |dot| < 2**22 (|dot| <= 127 * 3 * G * 16 < 2**21). dot_value then
    reads the dot with one FADD, for an integer conversion (and for a lifted group the multiply by
    1/16) per score and group: int2_tile_rows took 0.98-1.00x the time with it at 16 and 32 query
    heads per KV head on an H100 (the folded tile's 8 rows were not measured: it compiled to 6
    more instructions and more spills per tile)."""
    return ((127 + _origin_exponent(g, W, G, FAST)) << 23) | (1 << 22)


@triton.constexpr_function
def origin_value(g, W, G, FAST):
    """The fp32 whose bits are origin_bits(g, W, G, FAST)."""
    return 1.5 * 2.0 ** _origin_exponent(g, W, G, FAST)


@triton.jit
def dot_value(dg, g: tl.constexpr, W: tl.constexpr, G: tl.constexpr, FAST: tl.constexpr):
    """Group g's integer dot, accumulated from origin_bits(g, ...), as fp32 in the codes' units."""
    return dg.to(tl.float32, bitcast=True) - origin_value(g, W, G, FAST)


@triton.jit
def query_codes(q_ptr, token, stride_qt, q_head, stride_qh, hmask, W: tl.constexpr, scale):
    """Rows q_head of query token `token`, times `scale`, as the folded tile's K dots take them:
    q * scale ~ qscale * (q0 | q1 | q2 | q3), four planes int8 [ROWS, W] and qscale [ROWS] a power
    of two, 2**(floor(log2 max |q * scale|) - 6), so that the largest entry rounds to 64..127 and
    the scaling is exact (int2/reference.py query_codes rounds the same numbers the same way;
    docs/format.md, "How decode reads it", for the error this adds). Masked rows are zeros; a row
    holding NaN or Inf gets qscale NaN (its scores, and so its output, are NaN)."""
    q_rows = q_ptr + token * stride_qt + q_head[:, None] * stride_qh + tl.arange(0, W)[None, :]
    q0 = tl.load(q_rows + 0 * W, mask=hmask[:, None], other=0.0).to(tl.float32) * scale
    q1 = tl.load(q_rows + 1 * W, mask=hmask[:, None], other=0.0).to(tl.float32) * scale
    q2 = tl.load(q_rows + 2 * W, mask=hmask[:, None], other=0.0).to(tl.float32) * scale
    q3 = tl.load(q_rows + 3 * W, mask=hmask[:, None], other=0.0).to(tl.float32) * scale
    amax = tl.maximum(tl.maximum(tl.max(tl.abs(q0), axis=1), tl.max(tl.abs(q1), axis=1)),
                      tl.maximum(tl.max(tl.abs(q2), axis=1), tl.max(tl.abs(q3), axis=1)))
    # e: amax's biased exponent (floor(log2 amax) + 127; amax >= 1e-30 keeps both powers normal)
    e = (tl.maximum(amax, 1e-30).to(tl.int32, bitcast=True) >> 23) & 0xFF
    inv = (((260 - e) << 23).to(tl.float32, bitcast=True))[:, None]     # 2**(6 - floor(log2 amax))
    qscale = ((e - 6) << 23).to(tl.float32, bitcast=True)              # its inverse
    # a NaN or Inf in the row (max() passes over NaN, the clamp would hide both): NaN scores, as
    # the exact query gives, so a model's NaN reaches the output instead of turning into codes
    total = tl.sum(tl.abs(q0) + tl.abs(q1) + tl.abs(q2) + tl.abs(q3), axis=1)
    qscale = tl.where(total < float("inf"), qscale, float("nan"))
    return _round_i8(q0 * inv), _round_i8(q1 * inv), _round_i8(q2 * inv), _round_i8(q3 * inv), qscale


@triton.jit
def _round_i8(x):
    """To the nearest integer in [-127, 127] (halves away from 0; the conversion truncates) -> int8."""
    x = tl.minimum(tl.maximum(x, -127.0), 127.0)
    return tl.where(x >= 0, x + 0.5, x - 0.5).to(tl.int8)


@triton.jit
def raw_v_pairs(vwords_t, P: tl.constexpr, FAST: tl.constexpr):
    """Plane P of V's code words, transposed [W/2, N] uint16 (word j of a token: the bytes of
    columns 2j, 2j + 1) -> (even, odd): the codes of columns 2j and 2j + 1 in units of
    1 / plane_unit(P), fp16 [W/2, N] each (the plain codes in fp32 under the interpreter)."""
    if FAST:
        if P == 0:
            even: tl.constexpr = VE_ASM_0
            odd: tl.constexpr = VO_ASM_0
        elif P == 1:
            even: tl.constexpr = VE_ASM_1
            odd: tl.constexpr = VO_ASM_1
        elif P == 2:
            even: tl.constexpr = VE_ASM_2
            odd: tl.constexpr = VO_ASM_2
        else:
            even: tl.constexpr = VE_ASM_3
            odd: tl.constexpr = VO_ASM_3
        return (tl.inline_asm_elementwise(even, "=r,r", [vwords_t], dtype=tl.float16, is_pure=True, pack=2),
                tl.inline_asm_elementwise(odd, "=r,r", [vwords_t], dtype=tl.float16, is_pure=True, pack=2))
    else:
        return ((vwords_t >> (2 * P)) & 3).to(tl.float32), ((vwords_t >> (8 + 2 * P)) & 3).to(tl.float32)


@triton.jit
def plane_unit(P: tl.constexpr, FAST: tl.constexpr):
    """What raw_v_pairs' plane P is multiplied by to read the codes: 2**(24 - 2P) on the GPU (the
    fp16 subnormals' unit, 2**-24, times the plane's place in the byte), 1 interpreted."""
    if FAST:
        return 1 << (24 - 2 * P)
    else:
        return 1


@triton.jit
def _overlaps(P: tl.constexpr, g: tl.constexpr, W: tl.constexpr, G: tl.constexpr):
    """Whether plane P (columns [P W, (P+1) W)) holds columns of group g."""
    return (P * W < (g + 1) * G) and (g * G < (P + 1) * W)


@triton.jit
def _in_group(cols, g: tl.constexpr, G: tl.constexpr):
    return (cols >= g * G) & (cols < (g + 1) * G)


@triton.jit
def _pick(P: tl.constexpr, x0, x1, x2, x3):
    """x_P of four per-plane values (P a constexpr: no code for the others)."""
    if P == 0:
        return x0
    elif P == 1:
        return x1
    elif P == 2:
        return x2
    else:
        return x3


@triton.jit
def query_sums(q0, q1, q2, q3, ROWS: tl.constexpr, W: tl.constexpr, G: tl.constexpr, NG: tl.constexpr):
    """Per query row and group, [ROWS, NG] fp32: the sum of q_int over the group's columns (exact),
    which the K zeros multiply -- constants of the program, computed once."""
    gidx = tl.arange(0, NG)[None, :]
    cols = tl.arange(0, W)
    qsums = tl.zeros([ROWS, NG], tl.float32)
    for g in tl.static_range(NG):
        qsum = tl.zeros([ROWS], tl.int32)
        for P in tl.static_range(4):
            if _overlaps(P, g, W, G):
                qp = _pick(P, q0, q1, q2, q3).to(tl.int32)
                qsum += tl.sum(tl.where(_in_group(P * W + cols, g, G)[None, :], qp, 0), axis=1)
        qsums = tl.where(gidx == g, qsum.to(tl.float32)[:, None], qsums)
    return qsums


@triton.jit
def empty_pairs(ROWS: tl.constexpr, W: tl.constexpr, NG: tl.constexpr):
    """The folded tile's state before any token: m = -inf, l = 0, eight zero accumulators
    [W/2, ROWS] (even and odd columns of the four planes) and zs [NG, ROWS] (sum_t p vz_g, which
    the output takes once per program: int2_tile_folded)."""
    z = tl.zeros([W // 2, ROWS], tl.float32)
    return (tl.full([ROWS], float("-inf"), tl.float32), tl.zeros([ROWS], tl.float32), z, z, z, z, z, z, z, z,
            tl.zeros([NG, ROWS], tl.float32))


@triton.jit
def _pv(acc, raw, pg, rows_in_group, G: tl.constexpr, W: tl.constexpr, DOT: tl.constexpr):
    """acc [W/2, ROWS] += raw [W/2, N] . pg [N, ROWS] on the rows in the group."""
    if G < W:   # the plane holds several groups: add this group's rows
        return acc + tl.where(rows_in_group[:, None], tl.dot(raw.to(DOT), pg), 0.0)
    else:       # one group per plane: accumulate in the MMA itself
        return tl.dot(raw.to(DOT), pg, acc)


@triton.jit
def int2_tile_folded(m_i, l_i, e0, o0, e1, o1, e2, o2, e3, o3, zs, q0, q1, q2, q3, qsums, qscale,
                     kbytes, vwords, k_scale, k_zero, v_scale, v_zero, nmask,
                     ROWS: tl.constexpr, N: tl.constexpr, W: tl.constexpr, G: tl.constexpr, NG: tl.constexpr,
                     DOT: tl.constexpr, FAST: tl.constexpr):
    """One tile of N tokens for ROWS query rows. kbytes [N, W] uint8, vwords [N, W/2] uint16 and
    the metadata [N, NG] as load_tile returns them; q planes int8 and qscale from query_codes
    (q * softmax scale * log2(e) = qscale * q_int), qsums from query_sums (of q_int).

        s[t, h] = qscale[h] * sum_g ks[t, g] (codes_g[t, :] . q_int_g[h, :]) + kz[t, g] qsum_g[h]
        o[c, h] += sum_t raw[t, c] (p vs_g)[t, h]      raw = codes / plane_unit (fp16 subnormals)
        zs[g, h] += sum_t p vz_g[t, h]

    so that o * plane_unit + zs_g is the output (times l), settled once per program
    (store_partial_pairs).
    Returns the updated (m_i, l_i, e0, o0, ..., e3, o3, zs)."""
    k_scale = k_scale.to(tl.float32)
    k_zero = k_zero.to(tl.float32)

    # --- scores, tokens as rows, in units of qscale: sT [N, ROWS]. Per group an exact integer dot
    # (int8 codes . int8 q) converted once, then scale and zero; the first group starts the sum
    # (from zeros every score paid an add of 0: 0 + x is not x for x = -0, the compiler keeps it).
    kcols = tl.arange(0, W)
    sT = tl.zeros([N, ROWS], tl.float32)
    for g in tl.static_range(NG):
        dg = tl.zeros([N, ROWS], tl.int32)
        if W < 32:
            # the int8 MMA contracts 32 columns: planes P, P + 1 (always in one group, G >= 2W
            # here) side by side, interleaved -- any order of the columns will do if q's matches
            for P in tl.static_range(0, 4, 2):
                if _overlaps(P, g, W, G):
                    kk = tl.reshape(tl.join(k_codes(kbytes, P, g, W, G, FAST), k_codes(kbytes, P + 1, g, W, G, FAST)),
                                    [N, 2 * W])
                    qq = tl.reshape(tl.join(_pick(P, q0, q1, q2, q3), _pick(P + 1, q0, q1, q2, q3)), [ROWS, 2 * W])
                    dg = tl.dot(kk, tl.trans(qq), dg, out_dtype=tl.int32)
        else:
            for P in tl.static_range(4):
                if _overlaps(P, g, W, G):
                    qp = _pick(P, q0, q1, q2, q3)
                    if G < W:
                        qp = tl.where(_in_group(P * W + kcols, g, G)[None, :], qp, 0)
                    dg = tl.dot(k_codes(kbytes, P, g, W, G, FAST), tl.trans(qp), dg, out_dtype=tl.int32)
        ks = column(k_scale, g, NG, N)
        if FAST and lifted(g, W, G):
            ks = ks * 0.0625            # the codes came in as 16 * code (k_codes)
        if g == 0:
            sT = ks[:, None] * dg.to(tl.float32)
        else:
            sT = sT + ks[:, None] * dg.to(tl.float32)
        sT = sT + column(k_zero, g, NG, N)[:, None] * column(qsums, g, NG, ROWS)[None, :]
    sT = tl.where(nmask[:, None], sT, float("-inf"))

    # the softmax state stays in log2 units: the max is taken in qscale units (qscale > 0) and
    # the exponent's subtraction becomes a multiply-add. The state is rescaled at every tile: a lazy
    # rescale (only where a score passes the max by more than 8) ran 0.8 % faster at head_dim 128
    # and 1.4 % slower at 256 (H200), and with p up to 2**8 the fp16 p * V scale would
    # overflow for V scales above 256
    m_new = tl.maximum(m_i, qscale * tl.max(sT, axis=0))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    pT = tl.exp2(sT * qscale[None, :] - m_safe[None, :])
    l_i = l_i * alpha + tl.sum(pT, axis=0)
    a = alpha[None, :]
    zs = zs * a
    e0, o0, e1, o1, e2, o2, e3, o3 = e0 * a, o0 * a, e1 * a, o1 * a, e2 * a, o2 * a, e3 * a, o3 * a

    # --- P.V, transposed: per group, P scaled by its V scales; per plane, even and odd columns
    p16 = pT.to(DOT)
    zs = tl.dot(tl.trans(v_zero.to(DOT)), p16, zs)                     # [NG, ROWS]: sum_t p vz_g
    for g in tl.static_range(NG):
        pg = p16 * column(v_scale, g, NG, N).to(DOT)[:, None]           # [N, ROWS]
        e0, o0, e1, o1, e2, o2, e3, o3 = pv_planes(e0, o0, e1, o1, e2, o2, e3, o3, pg, vwords, g, W, G, DOT,
                                                   FAST, False)
    return m_new, l_i, e0, o0, e1, o1, e2, o2, e3, o3, zs


@triton.jit
def pv_planes(e0, o0, e1, o1, e2, o2, e3, o3, pg, vwords, g: tl.constexpr, W: tl.constexpr, G: tl.constexpr,
              DOT: tl.constexpr, FAST: tl.constexpr, ROWS_ON_M: tl.constexpr):
    """Group g's share of P.V into the even / odd accumulators of the planes it lies in:
    raw [W/2, N] . pg [N, ROWS] (int2_tile_folded), or with ROWS_ON_M pg [ROWS, N] . raw [N, W/2]
    (int2_tile_rows; vwords then [N, W/2])."""
    half = 2 * tl.arange(0, W // 2)                                     # even column of each row
    for P in tl.static_range(4):
        if _overlaps(P, g, W, G):
            ev, od = raw_v_pairs(vwords, P, FAST)
            even_in = _in_group(P * W + half, g, G)
            odd_in = _in_group(P * W + half + 1, g, G)
            if P == 0:
                e0 = _pv_any(e0, ev, pg, even_in, G, W, DOT, ROWS_ON_M)
                o0 = _pv_any(o0, od, pg, odd_in, G, W, DOT, ROWS_ON_M)
            elif P == 1:
                e1 = _pv_any(e1, ev, pg, even_in, G, W, DOT, ROWS_ON_M)
                o1 = _pv_any(o1, od, pg, odd_in, G, W, DOT, ROWS_ON_M)
            elif P == 2:
                e2 = _pv_any(e2, ev, pg, even_in, G, W, DOT, ROWS_ON_M)
                o2 = _pv_any(o2, od, pg, odd_in, G, W, DOT, ROWS_ON_M)
            else:
                e3 = _pv_any(e3, ev, pg, even_in, G, W, DOT, ROWS_ON_M)
                o3 = _pv_any(o3, od, pg, odd_in, G, W, DOT, ROWS_ON_M)
    return e0, o0, e1, o1, e2, o2, e3, o3


@triton.jit
def _pv_any(acc, raw, pg, in_group, G: tl.constexpr, W: tl.constexpr, DOT: tl.constexpr, ROWS_ON_M: tl.constexpr):
    if ROWS_ON_M:
        return _pv_rows(acc, pg, raw, in_group, G, W, DOT)
    else:
        return _pv(acc, raw, pg, in_group, G, W, DOT)


@triton.jit
def empty_rows(ROWS: tl.constexpr, W: tl.constexpr, NG: tl.constexpr):
    """empty_pairs for int2_tile_rows: eight zero accumulators [ROWS, W/2] and zs [ROWS, NG]."""
    z = tl.zeros([ROWS, W // 2], tl.float32)
    return (tl.full([ROWS], float("-inf"), tl.float32), tl.zeros([ROWS], tl.float32), z, z, z, z, z, z, z, z,
            tl.zeros([ROWS, NG], tl.float32))


@triton.jit
def _pv_rows(acc, pg, raw, cols_in_group, G: tl.constexpr, W: tl.constexpr, DOT: tl.constexpr):
    """acc [ROWS, W/2] += pg [ROWS, N] . raw [N, W/2] on the columns in the group."""
    if G < W:
        return acc + tl.where(cols_in_group[None, :], tl.dot(pg, raw.to(DOT)), 0.0)
    else:
        return tl.dot(pg, raw.to(DOT), acc)


@triton.jit
def zero_query(qsums, ROWS: tl.constexpr, NG: tl.constexpr, KZ: tl.constexpr, DOT: tl.constexpr):
    """The query side of K's zero term as one MMA (int2_tile_rows): [ROWS, KZ] DOT, column
    c = r NG + g holding, for group g, qsum_g's multiple of 64 (r = 0) and the rest (r = 1), zero
    for r >= 2. Both parts are exact in fp16 (|qsum| <= 127 G: up to 13 bits, more than fp16's 11),
    so the MMA against zero_keys' [N, KZ] (kz_g in every column c = r NG + g) adds
    sum_g qsum_g kz_g to each score exactly as the FFMA per group it replaces."""
    c = tl.arange(0, KZ)[None, :]
    out = tl.zeros([ROWS, KZ], tl.float32)
    for g in tl.static_range(NG):
        qs = column(qsums, g, NG, ROWS)[:, None]
        hi = tl.floor(qs * (1.0 / 64.0)) * 64.0         # a multiple of 64 with <= 8 significant bits
        out = tl.where(c == g, hi, out)
        out = tl.where(c == NG + g, qs - hi, out)       # 0..63
    return out.to(DOT)


@triton.jit
def zero_keys(k_zero, N: tl.constexpr, NG: tl.constexpr, KZ: tl.constexpr, DOT: tl.constexpr):
    """K's zeros [N, NG] as the MMA operand of zero_query: [N, KZ], column c = kz_(c mod NG)."""
    return tl.reshape(tl.broadcast_to(k_zero[:, None, :], [N, KZ // NG, NG]), [N, KZ]).to(DOT)


@triton.jit
def int2_tile_rows(m_i, l_i, e0, o0, e1, o1, e2, o2, e3, o3, zs, q0, q1, q2, q3, qz, qscale,
                   kbytes, vwords, k_scale, k_zero, v_scale, v_zero, nmask, edge,
                   ROWS: tl.constexpr, N: tl.constexpr, W: tl.constexpr, G: tl.constexpr, NG: tl.constexpr,
                   KZ: tl.constexpr, DOT: tl.constexpr, FAST: tl.constexpr):
    """int2_tile_folded with the query rows on the MMA's M side and the tokens on N and K, for
    tiles of >= 16 rows (head_dim >= 128: the P.V product's N is W/2 >= 16); vwords here [N, W/2]
    (load_tile V_PAIRS=2):

        scores  s [ROWS, N]    = q plane [ROWS, W] . K codes^T [W, N]         (per plane and group)
        output  acc [ROWS, W/2] = (p * V scale) [ROWS, N] . V codes [N, W/2]   (even / odd columns)

    The scores' accumulator is then laid out as the P.V product's A operand wants it (rows and
    token pairs in the same threads, as in FlashAttention), so p goes from one MMA to the next
    without a shuffle, and the softmax reduces over tokens inside groups of four threads.
    Work per score is what bounds this tile at many query rows (docs/benchmarks.md, "Many query
    heads per KV head"), so the scores start from K's zero term as one small MMA (zero_query
    [ROWS, KZ] . zero_keys^T: in place of an FFMA per score and group, and the fp32 copies of the
    zeros), each group then adds scale * its integer dot in one FFMA (the dot started at origin_bits:
    one FADD reads it, no integer conversion), and only a tile at the span's edges (`edge`: a token
    below the span's first or past its end) masks its scores.
    The same numbers as int2_tile_folded, the state transposed: accumulators [ROWS, W/2], zs [ROWS, NG]."""
    kcols = tl.arange(0, W)
    s = tl.dot(qz, tl.trans(zero_keys(k_zero, N, NG, KZ, DOT)))      # sum_g qsum_g kz_g, exact
    for g in tl.static_range(NG):
        dg = tl.full([ROWS, N], origin_bits(g, W, G, FAST), tl.int32)
        for P in tl.static_range(4):
            if _overlaps(P, g, W, G):
                qp = _pick(P, q0, q1, q2, q3)
                if G < W:
                    qp = tl.where(_in_group(P * W + kcols, g, G)[None, :], qp, 0)
                dg = tl.dot(qp, tl.trans(k_codes(kbytes, P, g, W, G, FAST)), dg, out_dtype=tl.int32)
        ks = column(k_scale, g, NG, N).to(tl.float32)
        s = s + ks[None, :] * dot_value(dg, g, W, G, FAST)
    if edge:
        s = tl.where(nmask[None, :], s, float("-inf"))

    m_new = tl.maximum(m_i, qscale * tl.max(s, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s * qscale[:, None] - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    a = alpha[:, None]
    zs = zs * a
    e0, o0, e1, o1, e2, o2, e3, o3 = e0 * a, o0 * a, e1 * a, o1 * a, e2 * a, o2 * a, e3 * a, o3 * a

    p16 = p.to(DOT)
    zs = tl.dot(p16, v_zero.to(DOT), zs)                                # [ROWS, NG]: sum_t p vz_g
    for g in tl.static_range(NG):
        pg = p16 * column(v_scale, g, NG, N).to(DOT)[None, :]           # [ROWS, N]
        e0, o0, e1, o1, e2, o2, e3, o3 = pv_planes(e0, o0, e1, o1, e2, o2, e3, o3, pg, vwords, g, W, G, DOT,
                                                   FAST, True)
    return m_new, l_i, e0, o0, e1, o1, e2, o2, e3, o3, zs


@triton.jit
def folded_span(q0, q1, q2, q3, qscale, lo, hi, first, page_next, table_row, head_off, stride_cb, stride_cs,
                cache_u8, cache_f16, BLOCK_SIZE: tl.constexpr, ROWS: tl.constexpr, N: tl.constexpr, W: tl.constexpr,
                G: tl.constexpr, NG: tl.constexpr, OFF_V: tl.constexpr, OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr,
                OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr, DOT: tl.constexpr, FAST: tl.constexpr,
                TABLE_AHEAD: tl.constexpr, ODD_SHIFT: tl.constexpr = 0, ROWS_ON_M: tl.constexpr = False):
    """Positions [max(lo, first), hi) of one sequence with the folded tile, N at a time from lo (a
    multiple of N); arguments as common.int2_span's, but the query as query_codes gives it (int8
    planes and qscale, softmax scale * log2(e) included) and the first tile's block-table entries
    as common.next_page gives them (the caller loads them before the query, so that the two
    loads' latencies overlap). Returns the folded state (empty_pairs), or with ROWS_ON_M
    int2_tile_rows' in place of int2_tile_folded's (empty_rows: store_partial_pairs takes it transposed)."""
    qsums = query_sums(q0, q1, q2, q3, ROWS, W, G, NG)
    KZ: tl.constexpr = 16       # the zero term's MMA contracts 16 columns (>= 2 NG: NG <= 8)
    if ROWS_ON_M:
        qz = zero_query(qsums, ROWS, NG, KZ, DOT)
        m_i, l_i, e0, o0, e1, o1, e2, o2, e3, o3, zs = empty_rows(ROWS, W, NG)
    else:
        m_i, l_i, e0, o0, e1, o1, e2, o2, e3, o3, zs = empty_pairs(ROWS, W, NG)
    ar = tl.arange(0, N)
    for n0 in range(lo, hi, N):
        nmask, page_next, kbytes, vwords, k_scale, k_zero, v_scale, v_zero = load_tile(
            n0, page_next, ar, first, hi, table_row, head_off, stride_cb, stride_cs, cache_u8, cache_f16,
            BLOCK_SIZE, N, W, NG, OFF_V, OFF_KS, OFF_KZ, OFF_VS, OFF_VZ, TABLE_AHEAD, 2 if ROWS_ON_M else 1, ODD_SHIFT)
        if ROWS_ON_M:
            edge = (n0 < first) | (n0 + N > hi)      # a token of the tile lies outside the span
            m_i, l_i, e0, o0, e1, o1, e2, o2, e3, o3, zs = int2_tile_rows(
                m_i, l_i, e0, o0, e1, o1, e2, o2, e3, o3, zs, q0, q1, q2, q3, qz, qscale,
                kbytes, vwords, k_scale, k_zero, v_scale, v_zero, nmask, edge, ROWS, N, W, G, NG, KZ, DOT, FAST)
        else:
            m_i, l_i, e0, o0, e1, o1, e2, o2, e3, o3, zs = int2_tile_folded(
                m_i, l_i, e0, o0, e1, o1, e2, o2, e3, o3, zs, q0, q1, q2, q3, qsums, qscale,
                kbytes, vwords, k_scale, k_zero, v_scale, v_zero, nmask, ROWS, N, W, G, NG, DOT, FAST)
    return m_i, l_i, e0, o0, e1, o1, e2, o2, e3, o3, zs


@triton.jit
def _settle(even, odd, P: tl.constexpr, zs, W: tl.constexpr, G: tl.constexpr, NG: tl.constexpr,
            FAST: tl.constexpr):
    """Plane P's even and odd accumulators [W/2, ROWS] in output units: times plane_unit(P), plus
    the zero term zs_g of each column's group g (int2_tile_folded)."""
    even = even * plane_unit(P, FAST)
    odd = odd * plane_unit(P, FAST)
    gidx = tl.arange(0, NG)[:, None]
    cols = P * W + 2 * tl.arange(0, W // 2)
    for g in tl.static_range(NG):
        if _overlaps(P, g, W, G):
            zg = tl.sum(tl.where(gidx == g, zs, 0.0), axis=0)[None, :]
            if G >= W:      # the plane lies in group g
                even = even + zg
                odd = odd + zg
            else:
                even = even + tl.where(_in_group(cols, g, G)[:, None], zg, 0.0)
                odd = odd + tl.where(_in_group(cols + 1, g, G)[:, None], zg, 0.0)
    return even, odd


@triton.jit
def store_partial_pairs(part_out_ptr, part_lse_ptr, row, hmask, m_i, l_i, e0, o0, e1, o1, e2, o2, e3, o3, zs,
                        D: tl.constexpr, W: tl.constexpr, G: tl.constexpr, NG: tl.constexpr, FAST: tl.constexpr):
    """decode.store_partial for the folded state: accumulators [W/2, ROWS] of even / odd columns,
    settled (_settle) and written interleaved to slot rows `row` [ROWS]."""
    has = l_i > 0
    inv_l = tl.where(has, 1.0 / tl.where(has, l_i, 1.0), 0.0)[None, :]
    out = part_out_ptr + row[None, :] * D + 2 * tl.arange(0, W // 2)[:, None]
    m = hmask[None, :]
    e0, o0 = _settle(e0, o0, 0, zs, W, G, NG, FAST)
    e1, o1 = _settle(e1, o1, 1, zs, W, G, NG, FAST)
    e2, o2 = _settle(e2, o2, 2, zs, W, G, NG, FAST)
    e3, o3 = _settle(e3, o3, 3, zs, W, G, NG, FAST)
    tl.store(out + 0 * W, e0 * inv_l, mask=m)
    tl.store(out + 0 * W + 1, o0 * inv_l, mask=m)
    tl.store(out + 1 * W, e1 * inv_l, mask=m)
    tl.store(out + 1 * W + 1, o1 * inv_l, mask=m)
    tl.store(out + 2 * W, e2 * inv_l, mask=m)
    tl.store(out + 2 * W + 1, o2 * inv_l, mask=m)
    tl.store(out + 3 * W, e3 * inv_l, mask=m)
    tl.store(out + 3 * W + 1, o3 * inv_l, mask=m)
    lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    tl.store(part_lse_ptr + row, lse, mask=hmask)
