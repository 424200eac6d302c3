"""Prefill / extend: new query tokens attend to their sequence's int2 prefix (read straight from
the paged cache, never dequantized into a buffer) and, causally, to the current chunk's own K/V in
full precision. Peak temporary memory is the chunk itself.

Grid (cdiv(max_query_len, BLOCK_M), num_q_heads, batch); one program = BLOCK_M query tokens of one
head; its KV head is q_head // RATIO. Varlen: query_start_loc [B+1], seq_lens [B] (prefix + chunk).
Inputs and output are in the rotated basis.
"""

from __future__ import annotations

import dataclasses
import warnings

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from aphrodite_int2kv.int2.format import LLOYD_MAX_LEVELS, SlotLayout
from aphrodite_int2kv.kernels.common import (LOG2E, chunk_queries, chunk_span, empty_state, int2_span,
                                             query_dot_center, store_chunk_rows, window_span)
from aphrodite_int2kv.kernels import interpreting
from aphrodite_int2kv.kernels.decode import _window_args, center_args, dot_dtype
from aphrodite_int2kv.kernels.limits import KB, DeviceLimits, device_limits


# The engine passes its per-request tensors sliced after the decodes (seq_lens[num_decodes:], ...):
# their addresses' 16-byte alignment follows the number of decodes in the step, so Triton would
# compile a variant per alignment class in the serving path. Gathered one element at a time here,
# they gain nothing from it (see decode.py, _RUNTIME_INTS).
@triton.jit(do_not_specialize_on_alignment=["block_table_ptr", "seq_lens_ptr", "query_start_ptr", "cen_ptr", "wbt_ptr"])
def _int2_prefill_kernel(
    q_ptr, stride_qt, stride_qh,                 # [T, Hq, D] rotated queries
    k_ptr, v_ptr, stride_kt, stride_kh, stride_vt, stride_vh,   # [T, Hkv, D] rotated chunk K/V
    out_ptr, stride_ot, stride_oh,               # [T, Hq, D]
    cache_u8, cache_f16, stride_cb, stride_cs, stride_ch,
    block_table_ptr, stride_bt, query_start_ptr, seq_lens_ptr,
    qk_scale,
    cen_ptr, stride_cenb, stride_cenh,           # [B or 1, Hkv, D] fp32 rotated K offsets (SINKS > 0)
    wk_ptr, wv_ptr, stride_wb, stride_ws, stride_wh, wbt_ptr, stride_wbt,   # recent window (decode.py)
    BLOCK_SIZE: tl.constexpr, D: tl.constexpr, G: tl.constexpr, RATIO: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    OFF_V: tl.constexpr, OFF_KS: tl.constexpr, OFF_KZ: tl.constexpr,
    OFF_VS: tl.constexpr, OFF_VZ: tl.constexpr,
    LLOYD: tl.constexpr, L0: tl.constexpr, L1: tl.constexpr, L2: tl.constexpr, L3: tl.constexpr,
    DOT: tl.constexpr, FAST: tl.constexpr, SINKS: tl.constexpr,
    WINDOW: tl.constexpr = 0, WBS: tl.constexpr = 16,
    ODD_SHIFT: tl.constexpr = 0,                 # SlotLayout.odd_shift (docs/format.md, "odd slots")
):
    W: tl.constexpr = D // 4
    SEG: tl.constexpr = W if G > W else G
    NG: tl.constexpr = D // G
    q_block = tl.program_id(0)
    q_head = tl.program_id(1)
    batch = tl.program_id(2)
    kv_head = q_head // RATIO

    q_start = tl.load(query_start_ptr + batch)
    q_len = tl.load(query_start_ptr + batch + 1) - q_start
    if q_block * BLOCK_M >= q_len:
        return
    prefix_len = tl.load(seq_lens_ptr + batch) - q_len

    rows = q_block * BLOCK_M + tl.arange(0, BLOCK_M)          # position within the chunk
    rmask = rows < q_len
    q0, q1, q2, q3 = chunk_queries(q_ptr, q_start, rows, rmask, q_head, stride_qt, stride_qh, W, DOT)

    if SINKS > 0:
        qc = query_dot_center(q0, q1, q2, q3, cen_ptr + batch * stride_cenb + kv_head * stride_cenh, W)
    else:
        qc = tl.zeros([BLOCK_M], tl.float32)
    m_i, l_i, acc0, acc1, acc2, acc3 = empty_state(BLOCK_M, W)

    # Phase 1: the int2 prefix (every new token sees all of it). With a recent window, the last
    # WINDOW - 1 prefix tokens (the window of the chunk's first token; later tokens see at least
    # that much in full precision) are read from the window cache instead (phase 1b).
    if WINDOW > 0:
        win_start = tl.maximum(prefix_len - (WINDOW - 1), 0)
    else:
        win_start = prefix_len
    m_i, l_i, acc0, acc1, acc2, acc3 = int2_span(
        m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, 0, win_start, 0,
        block_table_ptr + batch * stride_bt, kv_head * stride_ch, stride_cb, stride_cs, cache_u8, cache_f16,
        qk_scale, qc, BLOCK_SIZE, BLOCK_M, BLOCK_N, W, G, NG, SEG,
        OFF_V, OFF_KS, OFF_KZ, OFF_VS, OFF_VZ, LLOYD, L0, L1, L2, L3, DOT, FAST, SINKS, ODD_SHIFT=ODD_SHIFT)
    if WINDOW > 0:
        m_i, l_i, acc0, acc1, acc2, acc3 = window_span(
            m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, win_start, prefix_len,
            wbt_ptr + batch * stride_wbt, kv_head * stride_wh, stride_wb, stride_ws, wk_ptr, wv_ptr,
            qk_scale, qc, WBS, 0, BLOCK_M, BLOCK_N, W, DOT, SINKS)

    # Phase 2: the chunk itself in full precision, causal (chunk key j visible to row i if j <= i).
    m_i, l_i, acc0, acc1, acc2, acc3 = chunk_span(
        m_i, l_i, acc0, acc1, acc2, acc3, q0, q1, q2, q3, rows, tl.minimum(q_len, (q_block + 1) * BLOCK_M),
        k_ptr + q_start * stride_kt + kv_head * stride_kh, v_ptr + q_start * stride_vt + kv_head * stride_vh,
        stride_kt, stride_vt, qk_scale, BLOCK_N, W, DOT)

    store_chunk_rows(out_ptr, q_start, rows, rmask, q_head, stride_ot, stride_oh, l_i, acc0, acc1, acc2, acc3, W)


@dataclasses.dataclass(frozen=True)
class PrefillLaunch:
    block_m: int
    block_n: int
    num_stages: int
    num_warps: int = 4


# Launches in order of preference: the H200's (64 x 64 tiles, 3 stages) first, then smaller ones
# for GPUs with less shared memory per block (99 KB on sm_86 / 89 / 120). SHARED holds the bytes
# each takes per block at head_dim 64 / 128 / 256, for Hopper (whose tensor-core dots read their
# operands from shared memory) and for the other targets (the largest of sm_80 / 86 / 89 / 120):
# triton 3.9.0, `python -m aphrodite_int2kv.kernels.aot`, which fails where a compiled kernel
# takes more than listed here.
PREFILL_LAUNCHES = (PrefillLaunch(64, 64, 3), PrefillLaunch(64, 32, 3), PrefillLaunch(32, 32, 3),
                    PrefillLaunch(32, 32, 2), PrefillLaunch(16, 32, 2))
SHARED = {   # (hopper, head_dim) -> bytes per block of each PREFILL_LAUNCHES entry
    (True, 64): (42 * KB, 25 * KB, 20 * KB, 12 * KB, 10 * KB),
    (False, 64): (40 * KB, 24 * KB, 20 * KB, 12 * KB, 10 * KB),
    (True, 128): (84 * KB, 50 * KB, 40 * KB, 24 * KB, 21 * KB),
    (False, 128): (80 * KB, 48 * KB, 40 * KB, 24 * KB, 21 * KB),
    (True, 256): (168 * KB, 100 * KB, 82 * KB, 50 * KB, 41 * KB),
    (False, 256): (160 * KB, 96 * KB, 82 * KB, 50 * KB, 41 * KB),
}
_TOO_BIG: set = set()     # (device name, head_dim, launch) that raised OutOfResources here


def prefill_shared(head_dim: int, launch: PrefillLaunch, limits: DeviceLimits) -> int:
    return SHARED[(limits.capability[0] == 9, head_dim)][PREFILL_LAUNCHES.index(launch)]


def prefill_launch_config(head_dim: int, limits: DeviceLimits) -> PrefillLaunch:
    """The first of PREFILL_LAUNCHES that fits `limits`' shared memory per block at head_dim."""
    for launch in PREFILL_LAUNCHES:
        if prefill_shared(head_dim, launch, limits) <= limits.smem_per_block and \
                (limits.name, head_dim, launch) not in _TOO_BIG:
            return launch
    raise ValueError(f"int2 prefill: no launch fits {limits.name}'s {limits.smem_per_block} bytes of shared "
                     f"memory per block at head_dim {head_dim}")


def int2_prefill(q_rot, k_rot, v_rot, kv_cache, block_table, query_start_loc, seq_lens,
                 max_query_len: int, layout: SlotLayout, sm_scale: float, out=None,
                 lloyd_max: bool = False, block_m: int | None = None, block_n: int | None = None,
                 k_center: torch.Tensor | None = None, sinks: int = 0, window=None,
                 limits: DeviceLimits | None = None, num_stages: int | None = None):
    """q_rot [T, Hq, D], k_rot/v_rot [T, Hkv, D] (the chunk, rotated) -> out [T, Hq, D] (rotated).
    K centering: prefix positions < sinks hold uncentered keys (int2 and window); q . c is
    subtracted from their scores, c from `k_center` (fp32 [B, Hkv, D] per sequence, or [Hkv, D]);
    the chunk's own keys come in centered.
    Recent window (as in int2_decode): prefix positions >= prefix_len - (R - 1) are read from it.
    Tiles and stages: prefill_launch_config for `limits` (default: q_rot's device's), unless given."""
    T, Hq, D = q_rot.shape
    Hkv = k_rot.shape[1]
    if Hq % Hkv:
        raise ValueError(f"int2 prefill: {Hq} query heads are not a multiple of {Hkv} KV heads")
    assert kv_cache.dtype == torch.uint8 and kv_cache.shape[-1] == layout.slot_bytes
    if out is None:
        out = torch.empty_like(q_rot)
    B = seq_lens.shape[0]
    if T == 0 or B == 0:
        return out
    limits = limits or device_limits(q_rot.device)
    explicit = block_m is not None or block_n is not None or num_stages is not None
    while True:
        plan = prefill_launch_config(D, limits)
        launch = PrefillLaunch(block_m or plan.block_m, block_n or plan.block_n, num_stages or plan.num_stages)
        try:
            _launch_prefill(launch, q_rot, k_rot, v_rot, kv_cache, block_table, query_start_loc, seq_lens,
                            max_query_len, layout, sm_scale, out, lloyd_max, k_center, sinks, window, Hq, Hkv, B)
            break
        except OutOfResources as exc:
            # SHARED was measured with another Triton: remember, warn once, take the next launch
            if explicit:
                raise
            _TOO_BIG.add((limits.name, D, plan))
            warnings.warn(f"int2 prefill: the {plan} launch does not fit {limits.name} ({exc}); "
                          "using a smaller one", RuntimeWarning, stacklevel=2)
    return out


def _launch_prefill(launch, q_rot, k_rot, v_rot, kv_cache, block_table, query_start_loc, seq_lens, max_query_len,
                    layout, sm_scale, out, lloyd_max, k_center, sinks, window, Hq, Hkv, B):
    D = q_rot.shape[2]
    lv = LLOYD_MAX_LEVELS
    grid = (triton.cdiv(max_query_len, launch.block_m), Hq, B)
    _int2_prefill_kernel[grid](
        q_rot, q_rot.stride(0), q_rot.stride(1),
        k_rot, v_rot, k_rot.stride(0), k_rot.stride(1), v_rot.stride(0), v_rot.stride(1),
        out, out.stride(0), out.stride(1),
        kv_cache, kv_cache.view(torch.float16),
        kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2),
        block_table, block_table.stride(0), query_start_loc, seq_lens,
        sm_scale * LOG2E,
        *center_args(k_center, sinks, B, Hkv, D, q_rot, "prefill"),
        *_window_args(window, q_rot),
        BLOCK_SIZE=kv_cache.shape[1], D=D, G=layout.group_size, RATIO=Hq // Hkv,
        BLOCK_M=launch.block_m, BLOCK_N=launch.block_n,
        OFF_V=layout.v_codes, OFF_KS=layout.k_scale, OFF_KZ=layout.k_zero,
        OFF_VS=layout.v_scale, OFF_VZ=layout.v_zero, ODD_SHIFT=layout.odd_shift,
        LLOYD=bool(lloyd_max), L0=lv[0], L1=lv[1], L2=lv[2], L3=lv[3],
        DOT=dot_dtype(q_rot.dtype), FAST=not interpreting(), SINKS=int(sinks), WINDOW=int(window[3]) if window else 0,
        WBS=window[0].shape[1] if window else 16, num_warps=launch.num_warps, num_stages=launch.num_stages,
    )
