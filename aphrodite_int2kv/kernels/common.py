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
def code_levels(c, LLOYD: tl.constexpr, L0: tl.constexpr, L1: tl.constexpr,
                L2: tl.constexpr, L3: tl.constexpr):
    """int codes 0..3 -> fp32 reconstruction levels (uniform: the code itself)."""
    if LLOYD:
        return tl.where(c == 0, L0, tl.where(c == 1, L1, tl.where(c == 2, L2, L3)))
    else:
        return c.to(tl.float32)


@triton.jit
def plane_scores(scores, q_p, kbytes_t, P: tl.constexpr, meta_f16, nmask,
                 W: tl.constexpr, G: tl.constexpr, SEG: tl.constexpr,
                 OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr,
                 LLOYD: tl.constexpr, L0: tl.constexpr, L1: tl.constexpr, L2: tl.constexpr,
                 L3: tl.constexpr, DOT: tl.constexpr):
    """scores [M, N] += q_p [M, W] . dequant(plane P of kbytes_t [W, N]).

    meta_f16: fp16 pointers [N] to each token's slot start (scale/zero live at OFF_KS/OFF_KZ bytes).
    """
    kc = code_levels((kbytes_t >> (2 * P)) & 3, LLOYD, L0, L1, L2, L3).to(DOT)
    cols = tl.arange(0, W)
    for s in tl.static_range(W // SEG):
        g: tl.constexpr = (P * W + s * SEG) // G
        if W // SEG == 1:
            q_s = q_p
        else:
            q_s = tl.where(((cols >= s * SEG) & (cols < (s + 1) * SEG))[None, :], q_p, 0.0)
        part = tl.dot(q_s.to(DOT), kc)
        k_scale = tl.load(meta_f16 + (OFF_KS // 2 + g), mask=nmask, other=0.0).to(tl.float32)
        k_zero = tl.load(meta_f16 + (OFF_KZ // 2 + g), mask=nmask, other=0.0).to(tl.float32)
        scores += part * k_scale[None, :] + tl.sum(q_s, axis=1)[:, None] * k_zero[None, :]
    return scores


@triton.jit
def plane_values(acc_p, p, vbytes, P: tl.constexpr, meta_f16, nmask,
                 W: tl.constexpr, G: tl.constexpr, SEG: tl.constexpr,
                 OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr,
                 LLOYD: tl.constexpr, L0: tl.constexpr, L1: tl.constexpr, L2: tl.constexpr,
                 L3: tl.constexpr, DOT: tl.constexpr):
    """acc_p [M, W] += p [M, N] . dequant(plane P of vbytes [N, W])."""
    vc = code_levels((vbytes >> (2 * P)) & 3, LLOYD, L0, L1, L2, L3).to(DOT)
    cols = tl.arange(0, W)
    for s in tl.static_range(W // SEG):
        g: tl.constexpr = (P * W + s * SEG) // G
        v_scale = tl.load(meta_f16 + (OFF_VS // 2 + g), mask=nmask, other=0.0).to(tl.float32)
        v_zero = tl.load(meta_f16 + (OFF_VZ // 2 + g), mask=nmask, other=0.0).to(tl.float32)
        part = tl.dot((p * v_scale[None, :]).to(DOT), vc) + tl.sum(p * v_zero[None, :], axis=1)[:, None]
        if W // SEG == 1:
            acc_p += part
        else:
            acc_p += tl.where(((cols >= s * SEG) & (cols < (s + 1) * SEG))[None, :], part, 0.0)
    return acc_p
