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


def attend(q, k, v, sm_scale, causal_offset: int | None = None, q_folded=None, folded_keys=(0, 0),
           folded_center=None):
    """q [Tq, Hq, D], k/v [Tk, Hkv, D] -> [Tq, Hq, D] fp32; GQA by head // ratio.
    causal_offset: query i may see keys j <= i + causal_offset (None: all keys).
    q_folded (query_codes(q, sm_scale)): the query keys [folded_keys[0], folded_keys[1]) are scored
    with, as the folded decode tile scores the int2 positions it reads (the splits' [sinks, L - R)).
    folded_center [Hkv, D]: those keys are k = c + the centered key the cache holds (K centering):
    the tile's q_folded meets the centered part only, q . c stays exact (q_folded . (k - c) + q . c)."""
    Tq, Hq, D = q.shape
    ratio = Hq // k.shape[1]
    kk = k.float().repeat_interleave(ratio, dim=1)
    vv = v.float().repeat_interleave(ratio, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.float(), kk) * sm_scale
    if q_folded is not None:
        lo, hi = folded_keys
        if folded_center is None:
            s[..., lo:hi] = torch.einsum("qhd,khd->hqk", q_folded.float(), kk[lo:hi]) * sm_scale
        else:
            c = folded_center.float().repeat_interleave(ratio, dim=0)          # [Hq, D]
            s[..., lo:hi] = (torch.einsum("qhd,khd->hqk", q_folded.float(), kk[lo:hi] - c)
                             + torch.einsum("qhd,hd->hq", q.float(), c)[..., None]) * sm_scale
    if causal_offset is not None:
        qi = torch.arange(Tq)[:, None]
        kj = torch.arange(k.shape[0])[None, :]
        s = s.masked_fill((kj > qi + causal_offset)[None].to(s.device), float("-inf"))
    return torch.einsum("hqk,khd->qhd", s.softmax(-1), vv)


LOG2E = 1.4426950408889634      # the kernels' softmax runs in log2 units (kernels/common.py imports this)


def query_codes(q, sm_scale):
    """The query as the folded decode tile scores with it (kernels/folded.py query_codes), in q's
    units: per row, q * c (c = sm_scale * log2(e), in fp32) rounded to integers in [-127, 127] at a
    power-of-two step 2**(floor(log2 max |q * c|) - 6) -- halves away from zero -- then / c. The
    scaling is exact, so kernel and reference round the same numbers to the same integers."""
    c = torch.tensor(sm_scale * LOG2E, dtype=torch.float32, device=q.device)
    qs = q.float() * c
    amax = qs.abs().amax(-1, keepdim=True).clamp_min(1e-30)
    _, e = torch.frexp(amax)                     # amax = m 2**e, m in [0.5, 1): floor(log2) = e - 1
    one = torch.ones_like(amax)
    y = (qs * torch.ldexp(one, 7 - e)).clamp(-127.0, 127.0)
    qi = torch.where(y >= 0, y + 0.5, y - 0.5).trunc()
    return qi * torch.ldexp(one, e - 7) / c


def _center_sinks(k, sinks: int, k_center):
    """K centering: the cache holds centered keys except the first `sinks` positions (uncentered);
    bring those to the centered basis too (k_center [Hkv, D], rotated)."""
    if sinks and k_center is not None and k.shape[0]:
        k = k.clone()
        k[:sinks] -= k_center.to(k)
    return k


def decode_reference(q_rot, kv_cache, block_table, seq_lens, layout: SlotLayout, sm_scale,
                     lloyd_max=False, sinks: int = 0, k_center=None, folded: bool = False):
    """folded: the folded tile's math (int2_decode(fold=True)): positions >= sinks scored with
    query_codes' rounded query."""
    outs = []
    qf = query_codes(q_rot, sm_scale) if folded else None
    for b in range(q_rot.shape[0]):
        n = int(seq_lens[b])
        k, v = gather_sequence(kv_cache, block_table[b], n, layout, lloyd_max)
        outs.append(attend(q_rot[b:b + 1], _center_sinks(k, sinks, k_center), v, sm_scale,
                           q_folded=None if qf is None else qf[b:b + 1], folded_keys=(sinks, n)))
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
