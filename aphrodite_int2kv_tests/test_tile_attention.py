"""The channel-tile format's attention kernel (kernels/tile_attention.py) against attention over
what the records decode to (int2/tile_format.py), the recent window and the chunk in full
precision: prefill chunks, chunked-prefill continuations and decodes in one batch, in the engine's
pages (several tiles per page and KV head, heads first). Interpreted on a CPU host, compiled on a
GPU (benchmarks/gpu_tests.py runs this file there)."""

from __future__ import annotations

import pytest
import torch

from aphrodite_int2kv.int2.tile_format import TileLayout, TilePages, decode_tile, encode_tile
from aphrodite_int2kv.kernels.tile_attention import tile_attention
from aphrodite_int2kv.kernels.tile_store import tile_store
from aphrodite_int2kv_tests.conftest import DEVICE

ATOL = 1e-4 if DEVICE == "cpu" else 2e-2


def _pages(nblocks, bs, H, layout):
    """The engine's int2 cache as the backend sees it: [blocks, block_size, H, token_bytes] over
    pages whose bytes are heads first."""
    raw = torch.randint(0, 256, (nblocks, H, bs, layout.token_bytes), dtype=torch.uint8)
    return raw.to(DEVICE).transpose(1, 2)


@pytest.mark.parametrize("D,RATIO,R", [(64, 3, 64), (128, 2, 100)])
def test_tile_attention_reads_tiles_window_and_chunk(D, RATIO, R):
    torch.manual_seed(D)
    T, H, BS, WBS = 64, 2, 128, 16
    Hq = H * RATIO
    layout = TileLayout(D, T)
    # (prefix, new tokens) per request: decodes first, then a chunk continuation and a prefill
    reqs = [(T * 5 - 1, 1), (T * 3 + 17, 1), (40, 1), (T * 4 + 9, 70), (0, 150)]
    total = [p + n for p, n in reqs]
    nblocks = sum(-(-t // BS) for t in total) + 3
    cache = _pages(nblocks, BS, H, layout)
    pages = TilePages.of_cache(cache, layout)
    perm = torch.randperm(nblocks)
    tables, used = [], 0
    for t in total:
        n = -(-t // BS)
        tables.append(perm[used:used + n])
        used += n
    width = max(len(x) for x in tables)
    block_table = torch.stack([torch.nn.functional.pad(x, (0, width - len(x))) for x in tables]).int()
    # the window: [wblocks, WBS, H, D] pages, each request's positions at its own pages
    wblocks_per = -(-max(total) // WBS)
    k_win = torch.zeros(len(reqs) * wblocks_per, WBS, H, D)
    v_win = torch.zeros_like(k_win)
    wtable = torch.arange(len(reqs) * wblocks_per).view(len(reqs), wblocks_per).flip(1).contiguous().int()

    k_all = [torch.randn(t, H, D) * (1 + torch.rand(t, 1, 1) * 3) for t in total]
    v_all = [torch.randn(t, H, D) for t in total]
    ref_k, ref_v = [], []                 # what attention should read at each position (prefix only)
    for b, (prefix, new) in enumerate(reqs):
        k, v = k_all[b], v_all[b]
        rk, rv = k.clone(), v.clone()
        ntiles = prefix // T              # the prefix's whole tiles are in the cache
        if ntiles:
            kt = k[:ntiles * T].view(ntiles, T, H, D).transpose(1, 2).contiguous()
            vt = v[:ntiles * T].view(ntiles, T, H, D).transpose(1, 2).contiguous()
            dest = torch.tensor([int(tables[b][i * T // BS]) * (BS // T) + (i * T % BS) // T
                                 for i in range(ntiles)], dtype=torch.int64)
            tile_store(kt.to(DEVICE), vt.to(DEVICE), torch.zeros(ntiles, dtype=torch.int32, device=DEVICE),
                       dest.to(DEVICE), pages, layout)
            dk, dv = decode_tile(encode_tile(kt, vt, layout), layout)
            rk[:ntiles * T] = dk.transpose(1, 2).reshape(-1, H, D)
            rv[:ntiles * T] = dv.transpose(1, 2).reshape(-1, H, D)
        win_start = max(prefix - (R - 1), 0)
        rk[win_start:], rv[win_start:] = k[win_start:], v[win_start:]      # window and chunk: full precision
        for p in range(max(prefix - R, 0), prefix):                        # the window holds the prefix's last R
            page = int(wtable[b, p // WBS])
            k_win[page, p % WBS], v_win[page, p % WBS] = k[p], v[p]
        ref_k.append(rk)
        ref_v.append(rv)

    q = torch.randn(sum(n for _, n in reqs), Hq, D)
    qsl = torch.tensor([0] + [n for _, n in reqs]).cumsum(0).int()
    k_new = torch.cat([k_all[b][p:] for b, (p, _) in enumerate(reqs)])
    v_new = torch.cat([v_all[b][p:] for b, (p, _) in enumerate(reqs)])
    out = tile_attention(q.to(DEVICE), k_new.to(DEVICE), v_new.to(DEVICE), pages, block_table.to(DEVICE),
                         qsl.to(DEVICE), torch.tensor(total, dtype=torch.int32, device=DEVICE),
                         max(n for _, n in reqs), D ** -0.5, (k_win.to(DEVICE), v_win.to(DEVICE), wtable.to(DEVICE), R))
    for b, (prefix, new) in enumerate(reqs):
        for i in range(new):
            pos = prefix + i
            kk = ref_k[b][:pos + 1].repeat_interleave(RATIO, 1)      # [pos+1, Hq, D]
            vv = ref_v[b][:pos + 1].repeat_interleave(RATIO, 1)
            qq = q[qsl[b] + i]
            w = torch.softmax(torch.einsum("hd,thd->ht", qq, kk) * D ** -0.5, dim=-1)
            want = torch.einsum("ht,thd->hd", w, vv)
            got = out[qsl[b] + i].cpu()
            assert torch.allclose(got, want, atol=ATOL, rtol=0), (b, i, (got - want).abs().max())


def test_tile_pages_refuse_a_cache_that_is_not_whole_tiles_heads_first():
    layout = TileLayout(128, 64)
    with pytest.raises(ValueError, match="not pages of whole 64-token tiles"):
        TilePages.of_cache(torch.zeros(2, 2, 96, layout.token_bytes, dtype=torch.uint8).transpose(1, 2), layout)
    with pytest.raises(ValueError, match="heads first"):      # token-major pages
        TilePages.of_cache(torch.zeros(2, 128, 2, layout.token_bytes, dtype=torch.uint8), layout)
    ok = torch.zeros(2, 2, 128, layout.token_bytes, dtype=torch.uint8).transpose(1, 2)
    assert TilePages.of_cache(ok, layout).per_page == 2
