"""Plain-torch references of the kernels' math (fp32), for tests and for the eval harness."""

from __future__ import annotations

import torch

from aphrodite_int2kv.int2.format import SlotLayout, rotate_odd_slots
from aphrodite_int2kv.int2.quantizer import decode_keys, decode_slots


def rotate(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """x [T, H, D] @ rot ([D, D], [1, D, D] or [H, D, D]) per head."""
    if rot.dim() == 2:
        rot = rot[None]
    if rot.shape[0] == 1:
        return (x.float() @ rot[0].float())
    return torch.einsum("thd,hde->the", x.float(), rot.float())


def unrotate_output(out_rot: torch.Tensor, rot_v: torch.Tensor, num_kv_heads: int) -> torch.Tensor:
    """out_rot [T, Hq, D] in the V-rotated basis -> original basis (x @ R_v^T, per KV head)."""
    if rot_v.dim() == 2:
        rot_v = rot_v[None]
    if rot_v.shape[0] == 1:
        return out_rot.float() @ rot_v[0].float().T
    T, Hq, D = out_rot.shape
    o = out_rot.float().reshape(T, num_kv_heads, Hq // num_kv_heads, D)
    return torch.einsum("thgd,hed->thge", o, rot_v.float()).reshape(T, Hq, D)


def gather_sequence(kv_cache, block_table_row, length: int, layout: SlotLayout, lloyd_max=False):
    """Dequantized K, V [length, Hkv, D] (rotated basis) of one sequence from the paged cache."""
    bs = kv_cache.shape[1]
    pos = torch.arange(length, device=kv_cache.device)
    slots = rotate_odd_slots(kv_cache[block_table_row[pos // bs].long(), pos % bs], pos % bs, layout,
                             stored=False)                          # [L, Hkv, slot_bytes]
    return decode_slots(slots, layout, lloyd_max)


def attend(q, k, v, sm_scale, causal_offset: int | None = None):
    """q [Tq, Hq, D], k/v [Tk, Hkv, D] -> [Tq, Hq, D] fp32; GQA by head // ratio.
    causal_offset: query i may see keys j <= i + causal_offset (None: all keys)."""
    Tq, Hq, D = q.shape
    ratio = Hq // k.shape[1]
    kk = k.float().repeat_interleave(ratio, dim=1)
    vv = v.float().repeat_interleave(ratio, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.float(), kk) * sm_scale
    if causal_offset is not None:
        qi = torch.arange(Tq)[:, None]
        kj = torch.arange(k.shape[0])[None, :]
        s = s.masked_fill((kj > qi + causal_offset)[None].to(s.device), float("-inf"))
    return torch.einsum("hqk,khd->qhd", s.softmax(-1), vv)


def _center_sinks(k, sinks: int, k_center):
    """K centering: the cache holds centered keys except the first `sinks` positions (uncentered);
    bring those to the centered basis too (k_center [Hkv, D], rotated)."""
    if sinks and k_center is not None and k.shape[0]:
        k = k.clone()
        k[:sinks] -= k_center.to(k)
    return k


def decode_reference(q_rot, kv_cache, block_table, seq_lens, layout: SlotLayout, sm_scale,
                     lloyd_max=False, sinks: int = 0, k_center=None):
    outs = []
    for b in range(q_rot.shape[0]):
        k, v = gather_sequence(kv_cache, block_table[b], int(seq_lens[b]), layout, lloyd_max)
        outs.append(attend(q_rot[b:b + 1], _center_sinks(k, sinks, k_center), v, sm_scale))
    return torch.cat(outs)


def prefill_reference(q_rot, k_rot, v_rot, kv_cache, block_table, query_start_loc, seq_lens,
                      layout: SlotLayout, sm_scale, lloyd_max=False, sinks: int = 0, k_center=None):
    """New tokens attend to the int2 prefix (seq_len - q_len tokens, dequantized) and, causally,
    to the current chunk in full precision."""
    out = torch.empty(q_rot.shape, dtype=torch.float32, device=q_rot.device)
    for b in range(len(seq_lens)):
        s, e = int(query_start_loc[b]), int(query_start_loc[b + 1])
        prefix = int(seq_lens[b]) - (e - s)
        kp, vp = gather_sequence(kv_cache, block_table[b], prefix, layout, lloyd_max)
        k = torch.cat([_center_sinks(kp, sinks, k_center), k_rot[s:e].float()])
        v = torch.cat([vp, v_rot[s:e].float()])
        out[s:e] = attend(q_rot[s:e], k, v, sm_scale, causal_offset=prefix)
    return out


def sequence_centers_reference(cache, block_table, seq_lens, layout: SlotLayout, first: int, lloyd_max=False):
    """kernels/centers.py's math: the mean of each sequence's first `first` keys as the cache holds
    them -> [B, Hkv, D] fp32; 0 for a sequence with fewer keys."""
    pos = torch.arange(first, device=cache.device)
    pages = block_table[:, pos // cache.shape[1]].long()               # [B, first]
    off = pos % cache.shape[1]
    k = decode_keys(rotate_odd_slots(cache[pages, off], off.expand(pages.shape), layout, stored=False),
                    layout, lloyd_max)   # [B, first, Hkv, D]
    return torch.where((seq_lens >= first)[:, None, None], k.mean(1), torch.zeros_like(k[:, 0]))
