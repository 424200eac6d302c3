"""Device helpers shared by the attention kernels: code levels and the per-plane, per-group
dot products of the planar int2 layout (docs/format.md).

Dequantized K = level(code) * scale + zero per group, so for a query row q
    q . k = sum_groups scale_g * (q_g . level(c_g)) + zero_g * sum(q_g)
which lets the tensor-core dot run on raw code levels and apply scale/zero to the [H, N] result.
A code plane p holds elements [p*W, (p+1)*W) (W = D/4); a *segment* is the part of a plane that
lies in one group: SEG = min(G, W) columns, W // SEG segments per plane.
"""

import triton
import triton.language as tl

LOG2E = 1.4426950408889634


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
def load_meta(meta_f16, nmask, OFF: tl.constexpr, NG: tl.constexpr):
    """The NG fp16 values at byte offset OFF of each token's slot -> fp32 [N, NG] (one vector
    load per token instead of NG scattered ones)."""
    return tl.load(meta_f16[:, None] + (OFF // 2 + tl.arange(0, NG))[None, :],
                   mask=nmask[:, None], other=0.0).to(tl.float32)


@triton.jit
def plane_codes(packed, P: tl.constexpr, LLOYD: tl.constexpr, L0: tl.constexpr, L1: tl.constexpr,
                L2: tl.constexpr, L3: tl.constexpr, DOT: tl.constexpr):
    """Plane P of packed uint8 codes as dot operands. Uniform: the masked bits as they sit,
    i.e. code * 4**P (one AND and one convert per element; callers divide the scale by 4**P).
    Lloyd-Max: the reconstruction level."""
    if LLOYD:
        c = (packed >> (2 * P)) & 3
        return tl.where(c == 0, L0, tl.where(c == 1, L1, tl.where(c == 2, L2, L3))).to(DOT)
    else:
        return (packed & (3 << (2 * P))).to(DOT)


@triton.jit
def plane_scores(scores, q_p, q_p_sum, kbytes, P: tl.constexpr, k_scale, k_zero,
                 N: tl.constexpr, W: tl.constexpr, G: tl.constexpr, NG: tl.constexpr,
                 SEG: tl.constexpr, LLOYD: tl.constexpr, L0: tl.constexpr, L1: tl.constexpr,
                 L2: tl.constexpr, L3: tl.constexpr, DOT: tl.constexpr):
    """scores [M, N] += q_p [M, W] . dequant(plane P of kbytes [N, W])^T.
    k_scale/k_zero: [N, NG] fp32 tiles; q_p_sum: row sums of q_p (used when a plane is one segment)."""
    # K bytes are loaded token-major ([N, W], each token's bytes contiguous: wide vector loads)
    # and transposed in registers for the dot.
    kc = tl.trans(plane_codes(kbytes, P, LLOYD, L0, L1, L2, L3, DOT))
    UNIT: tl.constexpr = 1.0 if LLOYD else 1.0 / (4 ** P)
    cols = tl.arange(0, W)
    for s in tl.static_range(W // SEG):
        g = (P * W + s * SEG) // G
        if W // SEG == 1:
            q_s = q_p
            q_sum = q_p_sum
        else:
            q_s = tl.where(((cols >= s * SEG) & (cols < (s + 1) * SEG))[None, :], q_p, 0.0)
            q_sum = tl.sum(q_s, axis=1)
        part = tl.dot(q_s.to(DOT), kc)
        scale = column(k_scale, g, NG, N) * UNIT
        scores += part * scale[None, :] + q_sum[:, None] * column(k_zero, g, NG, N)[None, :]
    return scores


@triton.jit
def plane_values(acc_p, p, vbytes, P: tl.constexpr, v_scale, v_zero,
                 N: tl.constexpr, W: tl.constexpr, G: tl.constexpr, NG: tl.constexpr,
                 SEG: tl.constexpr, LLOYD: tl.constexpr, L0: tl.constexpr, L1: tl.constexpr,
                 L2: tl.constexpr, L3: tl.constexpr, DOT: tl.constexpr):
    """acc_p [M, W] += p [M, N] . dequant(plane P of vbytes [N, W])."""
    vc = plane_codes(vbytes, P, LLOYD, L0, L1, L2, L3, DOT)
    UNIT: tl.constexpr = 1.0 if LLOYD else 1.0 / (4 ** P)
    cols = tl.arange(0, W)
    for s in tl.static_range(W // SEG):
        g = (P * W + s * SEG) // G
        scale = column(v_scale, g, NG, N) * UNIT
        zero = column(v_zero, g, NG, N)
        part = tl.dot((p * scale[None, :]).to(DOT), vc) + tl.sum(p * zero[None, :], axis=1)[:, None]
        if W // SEG == 1:
            acc_p += part
        else:
            acc_p += tl.where(((cols >= s * SEG) & (cols < (s + 1) * SEG))[None, :], part, 0.0)
    return acc_p


@triton.jit
def int2_tile(m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, qs0, qs1, qs2, qs3,
              cache_u8, cache_f16, slot, nmask, qk_scale,
              ROWS: tl.constexpr, N: tl.constexpr, W: tl.constexpr, G: tl.constexpr, NG: tl.constexpr,
              SEG: tl.constexpr, OFF_V: tl.constexpr, OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr,
              OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr, LLOYD: tl.constexpr, L0: tl.constexpr,
              L1: tl.constexpr, L2: tl.constexpr, L3: tl.constexpr, DOT: tl.constexpr):
    """One tile of N int2 tokens for ROWS query rows: QK^T on the code planes, online-softmax update,
    P.V accumulation. slot: byte offsets [N] of the tokens' slots (valid where nmask); q0..q3 the
    query planes, qs0..qs3 their row sums. Returns the updated (m_i, l_i, acc0, acc1, acc2, acc3)."""
    cols = tl.arange(0, W)
    meta = cache_f16 + slot // 2                      # slots are 16-byte aligned
    kbytes = tl.load(cache_u8 + slot[:, None] + cols[None, :], mask=nmask[:, None], other=0)
    k_scale = load_meta(meta, nmask, OFF_KS, NG)
    k_zero = load_meta(meta, nmask, OFF_KZ, NG)
    s = tl.zeros([ROWS, N], tl.float32)
    s = plane_scores(s, q0, qs0, kbytes, 0, k_scale, k_zero, N, W, G, NG, SEG, LLOYD, L0, L1, L2, L3, DOT)
    s = plane_scores(s, q1, qs1, kbytes, 1, k_scale, k_zero, N, W, G, NG, SEG, LLOYD, L0, L1, L2, L3, DOT)
    s = plane_scores(s, q2, qs2, kbytes, 2, k_scale, k_zero, N, W, G, NG, SEG, LLOYD, L0, L1, L2, L3, DOT)
    s = plane_scores(s, q3, qs3, kbytes, 3, k_scale, k_zero, N, W, G, NG, SEG, LLOYD, L0, L1, L2, L3, DOT)
    s = tl.where(nmask[None, :], s * qk_scale, float("-inf"))

    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)

    v_scale = load_meta(meta, nmask, OFF_VS, NG)
    v_zero = load_meta(meta, nmask, OFF_VZ, NG)
    vbytes = tl.load(cache_u8 + slot[:, None] + (OFF_V + cols)[None, :], mask=nmask[:, None], other=0)
    acc0 = plane_values(acc0 * alpha[:, None], p, vbytes, 0, v_scale, v_zero, N, W, G, NG, SEG, LLOYD, L0, L1, L2, L3, DOT)
    acc1 = plane_values(acc1 * alpha[:, None], p, vbytes, 1, v_scale, v_zero, N, W, G, NG, SEG, LLOYD, L0, L1, L2, L3, DOT)
    acc2 = plane_values(acc2 * alpha[:, None], p, vbytes, 2, v_scale, v_zero, N, W, G, NG, SEG, LLOYD, L0, L1, L2, L3, DOT)
    acc3 = plane_values(acc3 * alpha[:, None], p, vbytes, 3, v_scale, v_zero, N, W, G, NG, SEG, LLOYD, L0, L1, L2, L3, DOT)
    return m_new, l_i, acc0, acc1, acc2, acc3
