"""The channel-tile format's attention kernel (kernels/tile_attention.py) against attention over
what the records decode to (int2/tile_format.py), the recent window and the chunk in full
precision: prefill chunks, chunked-prefill continuations and decodes in one batch, in the engine's
pages (several tiles per page and KV head, heads first). Interpreted on a CPU host, compiled on a
GPU (benchmarks/gpu_tests.py runs this file there)."""

from __future__ import annotations

import pytest
import torch

from aphrodite_int2kv.int2.tile_format import TileLayout, TilePages, decode_tile, encode_tile
from aphrodite_int2kv.kernels.tile_attention import sink_log2, tile_attention
from aphrodite_int2kv.kernels.tile_split_decode import tile_split_decode
from aphrodite_int2kv.kernels.tile_store import tile_store
from aphrodite_int2kv.engine.window import window_slot
from aphrodite_int2kv_tests.conftest import DEVICE

ATOL = 1e-4 if DEVICE == "cpu" else 2e-2


def _pages(nblocks, bs, H, layout):
    """The engine's int2 cache as the backend sees it: [blocks, block_size, H, token_bytes] over
    pages whose bytes are heads first."""
    raw = torch.randint(0, 256, (nblocks, H, bs, layout.token_bytes), dtype=torch.uint8)
    return raw.to(DEVICE).transpose(1, 2)


def _tile_batch(D, RATIO, R, reqs, H=2, T=64, BS=128, WBS=16, seed=0, sinks=0, ring=False, k_bits=3):
    """A batch in the engine's caches: the prefix's whole tiles stored as records (tile_store) in
    pages several tiles long, the window pages holding each prefix's last R tokens and its first
    `sinks` (left out of tile 0's record); with `ring`, one window page per request of R + sinks + 5
    slots (engine/window.py window_slot). reqs: (prefix, new tokens) per request. Returns the
    kernels' arguments and the K/V attention should read at each position (records decoded, the
    sinks, the window and the new tokens in full precision)."""
    torch.manual_seed(seed)
    if ring:
        WBS = R + sinks + 5
    layout = TileLayout(D, T, k_bits)
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
    wblocks_per = 1 if ring else -(-max(total) // WBS)
    k_win = torch.zeros(len(reqs) * wblocks_per, WBS, H, D)
    v_win = torch.zeros_like(k_win)
    wtable = torch.arange(len(reqs) * wblocks_per).view(len(reqs), wblocks_per).flip(1).contiguous().int()
    if ring:   # every column the request's one page, as the backend hands it to the kernels
        wtable = wtable.expand(-1, -(-max(total) // WBS)).contiguous()

    k_all = [torch.randn(t, H, D) * (1 + torch.rand(t, 1, 1) * 3) for t in total]
    v_all = [torch.randn(t, H, D) for t in total]
    ref_k, ref_v = [], []                 # what attention should read at each position
    for b, (prefix, new) in enumerate(reqs):
        k, v = k_all[b], v_all[b]
        rk, rv = k.clone(), v.clone()
        ntiles = prefix // T              # the prefix's whole tiles are in the cache
        if ntiles:
            kt = k[:ntiles * T].view(ntiles, T, H, D).transpose(1, 2).contiguous()
            vt = v[:ntiles * T].view(ntiles, T, H, D).transpose(1, 2).contiguous()
            dest = torch.tensor([int(tables[b][i * T // BS]) * (BS // T) + (i * T % BS) // T
                                 for i in range(ntiles)], dtype=torch.int64)
            exclude = torch.zeros(ntiles, dtype=torch.int32)
            exclude[0] = sinks
            tile_store(kt.to(DEVICE), vt.to(DEVICE), exclude.to(DEVICE), dest.to(DEVICE), pages, layout)
            first = torch.arange(T) < sinks
            records = [encode_tile(kt[:1], vt[:1], layout, exclude=first)]
            if ntiles > 1:
                records.append(encode_tile(kt[1:], vt[1:], layout))
            dk, dv = decode_tile(torch.cat(records), layout)
            rk[:ntiles * T] = dk.transpose(1, 2).reshape(-1, H, D)
            rv[:ntiles * T] = dv.transpose(1, 2).reshape(-1, H, D)
        win_start = max(prefix - (R - 1), 0)
        rk[win_start:], rv[win_start:] = k[win_start:], v[win_start:]      # window and chunk: full precision
        rk[:sinks], rv[:sinks] = k[:sinks], v[:sinks]                      # the sinks: full precision
        held = sorted(set(range(min(sinks, prefix))) | set(range(max(prefix - R, 0), prefix)))
        col, off = window_slot(torch.tensor(held, dtype=torch.long), WBS, sinks, ring)
        for p, c, o in zip(held, col.tolist(), off.tolist()):              # the window holds them
            page = int(wtable[b, c])
            k_win[page, o], v_win[page, o] = k[p], v[p]
        ref_k.append(rk)
        ref_v.append(rv)

    q = torch.randn(sum(n for _, n in reqs), H * RATIO, D)
    qsl = torch.tensor([0] + [n for _, n in reqs]).cumsum(0).int()
    k_new = torch.cat([k_all[b][p:] for b, (p, _) in enumerate(reqs)])
    v_new = torch.cat([v_all[b][p:] for b, (p, _) in enumerate(reqs)])
    k_win[k_win.abs().sum(-1) == 0] = float("nan")   # a slot that holds no position must not be read
    window = (k_win.to(DEVICE), v_win.to(DEVICE), wtable.to(DEVICE), R)
    seq_lens = torch.tensor(total, dtype=torch.int32, device=DEVICE)
    return (q, k_new, v_new, pages, block_table.to(DEVICE), qsl, seq_lens, window), (ref_k, ref_v)


def _check(out, q, qsl, reqs, ref_k, ref_v, RATIO, D, sink_logits=None):
    """Against softmax attention over what the caches hold; with `sink_logits` [Hq] (gpt-oss's
    learned sinks) one more score per head whose value is zero."""
    for b, (prefix, new) in enumerate(reqs):
        for i in range(new):
            pos = prefix + i
            kk = ref_k[b][:pos + 1].repeat_interleave(RATIO, 1)      # [pos+1, Hq, D]
            vv = ref_v[b][:pos + 1].repeat_interleave(RATIO, 1)
            qq = q[qsl[b] + i]
            scores = torch.einsum("hd,thd->ht", qq, kk) * D ** -0.5
            if sink_logits is not None:
                scores = torch.cat([scores, sink_logits[:, None]], dim=1)
            w = torch.softmax(scores, dim=-1)[:, :pos + 1]
            want = torch.einsum("ht,thd->hd", w, vv)
            got = out[qsl[b] + i].cpu()
            assert torch.allclose(got, want, atol=ATOL, rtol=0), (b, i, (got - want).abs().max())


@pytest.mark.parametrize("D,RATIO,R,sinks,ring,k_bits,BS,WBS", [
    (64, 3, 64, 0, False, 3, 128, 16), (128, 2, 100, 4, False, 3, 128, 16), (128, 2, 100, 4, True, 3, 128, 16),
    (64, 3, 64, 4, True, 4, 128, 16), (256, 4, 100, 4, False, 4, 128, 16), (128, 2, 100, 4, False, 3, 192, 32)])
def test_tile_attention_reads_tiles_window_and_chunk(D, RATIO, R, sinks, ring, k_bits, BS, WBS):
    """Prefill chunks, a chunk continuation and decodes, with and without the 4 sinks (read from
    the window, left out of tile 0's record), the window paged or a ring; 3- and 4-bit keys; pages
    of 128 tokens (window pages of 16) or of 192 (three tiles; window pages of 32)."""
    T = 64
    # (prefix, new tokens) per request: decodes first (one whose window starts inside the sinks),
    # then a chunk continuation and a prefill
    reqs = [(T * 5 - 1, 1), (T * 3 + 17, 1), (40, 1), (R + 1, 1), (T * 4 + 9, 70), (0, 150)]
    (q, k_new, v_new, pages, block_table, qsl, seq_lens, window), (ref_k, ref_v) = _tile_batch(
        D, RATIO, R, reqs, BS=BS, WBS=WBS, seed=D, sinks=sinks, ring=ring, k_bits=k_bits)
    out = tile_attention(q.to(DEVICE), k_new.to(DEVICE), v_new.to(DEVICE), pages, block_table, qsl.to(DEVICE),
                         seq_lens, max(n for _, n in reqs), D ** -0.5, window, sinks=sinks, ring=ring)
    _check(out, q, qsl, reqs, ref_k, ref_v, RATIO, D)


@pytest.mark.parametrize("D,RATIO,splits,sinks,ring,k_bits,BS,WBS", [
    (64, 1, 1, 0, False, 3, 128, 16), (128, 3, 3, 4, True, 3, 128, 16), (128, 8, 11, 4, False, 3, 128, 16),
    (256, 20, 4, 4, True, 3, 128, 16), (128, 8, 5, 4, True, 4, 128, 16), (256, 4, 3, 4, False, 4, 128, 16),
    (128, 8, 5, 4, False, 3, 192, 32)])
def test_tile_split_decode_reads_tiles_window_and_token(D, RATIO, splits, sinks, ring, k_bits, BS, WBS):
    """The split decode (kernels/tile_split_decode.py): each KV head's records read once for its
    group of query heads (20 heads: two head tiles, the second part-masked), shares of a sequence's
    tiles over `splits` programs (more splits than tiles for the short ones: empty shares), the
    window and the token itself in a last program, merged -- against the same reference as the
    prefill kernel, and equal to tile_attention's decode; with the sinks, the window paged or a ring."""
    T, R = 64, 64
    # decodes only: whole tiles, a tile and a bit, inside the window only, at a tile boundary
    # and a window that starts inside the sinks
    reqs = [(T * 7 - 1, 1), (T * 3 + 17, 1), (40, 1), (T * 2 + R - 1, 1), (T * 4, 1), (R + 2, 1)]
    (q, k_new, v_new, pages, block_table, qsl, seq_lens, window), (ref_k, ref_v) = _tile_batch(
        D, RATIO, R, reqs, H=2 if RATIO < 20 else 1, BS=BS, WBS=WBS, seed=D + RATIO, sinks=sinks, ring=ring,
        k_bits=k_bits)
    out = tile_split_decode(q.to(DEVICE), k_new.to(DEVICE), v_new.to(DEVICE), pages, block_table, seq_lens, D ** -0.5,
                      window, num_splits=splits, sinks=sinks, ring=ring)
    _check(out, q, qsl, reqs, ref_k, ref_v, RATIO, D)
    fused = tile_attention(q.to(DEVICE), k_new.to(DEVICE), v_new.to(DEVICE), pages, block_table, qsl.to(DEVICE),
                           seq_lens, 1, D ** -0.5, window, sinks=sinks, ring=ring)
    assert torch.allclose(out, fused, atol=ATOL, rtol=0)


def test_tile_pages_refuse_a_cache_that_is_not_whole_tiles_heads_first():
    layout = TileLayout(128, 64)
    with pytest.raises(ValueError, match="not pages of whole 64-token tiles"):
        TilePages.of_cache(torch.zeros(2, 2, 96, layout.token_bytes, dtype=torch.uint8).transpose(1, 2), layout)
    with pytest.raises(ValueError, match="heads first"):      # token-major pages
        TilePages.of_cache(torch.zeros(2, 128, 2, layout.token_bytes, dtype=torch.uint8), layout)
    ok = torch.zeros(2, 2, 128, layout.token_bytes, dtype=torch.uint8).transpose(1, 2)
    assert TilePages.of_cache(ok, layout).per_page == 2


def _run_ptx(asm: str, inputs: list[int]) -> list[float]:
    """Execute the few PTX instructions the tile unpack uses (prmt, shl, lop3 0xEA, mov, sub.f16x2)
    on 32-bit integers: $2, $3, ... are the inputs; returns the fp16 values of $0 and $1."""
    import numpy as np

    regs = {f"${i + 2}": v for i, v in enumerate(inputs)}

    def val(x):
        return regs[x] if x in regs else int(x, 0)

    def halves(v):
        return np.frombuffer(np.uint32(v).tobytes(), np.float16).astype(np.float32)

    for line in asm.splitlines():
        line = line.strip().rstrip(";")
        if not line or line[0] in "{}" or line.startswith(".reg"):
            continue
        op, rest = line.split(None, 1)
        dst, *src = [t.strip() for t in rest.split(",")]
        if op == "prmt.b32":
            a, b, sel = (val(x) for x in src)
            pool = [(a >> 8 * i) & 255 for i in range(4)] + [(b >> 8 * i) & 255 for i in range(4)]
            regs[dst] = sum(pool[(sel >> 4 * i) & 7] << 8 * i for i in range(4))
        elif op == "shl.b32":
            regs[dst] = (val(src[0]) << val(src[1])) & 0xFFFFFFFF
        elif op == "lop3.b32":
            assert src[3] == "0xEA", line                  # (a & b) | c
            regs[dst] = (val(src[0]) & val(src[1])) | val(src[2])
        elif op == "mov.b32":
            regs[dst] = val(src[0])
        elif op == "sub.f16x2":
            diff = (halves(val(src[0])) - halves(val(src[1]))).astype(np.float16)
            regs[dst] = int(np.frombuffer(diff.tobytes(), np.uint32)[0])
        else:
            raise AssertionError(f"instruction not emulated: {line}")
    return [float(x) for x in np.concatenate([halves(regs["$0"]), halves(regs["$1"])])]


@pytest.mark.parametrize("c", range(4))
def test_gpu_unpack_of_the_tile_codes_is_exact(c):
    """The inline PTX that unpacks a record's codes on the GPU (kernels/tile_attention.py k_codes /
    v_codes, which the interpreter replaces with shifts and masks), run instruction by instruction:
    quarter c's 3- and 4-bit K codes of 4 columns from their low-plane and aligned high bytes, and
    the 2-bit V code, for random bytes -- exact small integers, as the interpreted path computes them."""
    import random

    from aphrodite_int2kv.kernels.common import magic_bits
    from aphrodite_int2kv.kernels.tile_attention import _V2_ASM, _k_asm

    rng = random.Random(c)
    for _ in range(500):
        low, high = [rng.randrange(256) for _ in range(4)], [rng.randrange(256) for _ in range(4)]
        word = lambda b: sum(v << 8 * i for i, v in enumerate(b))
        for high_bits in (1, 2):
            want_k = [((lo >> 2 * c) & 3) | (((hi >> 2 * c) & ((1 << high_bits) - 1)) << 2) for lo, hi in zip(low, high)]
            assert _run_ptx(_k_asm(c, high_bits), [word(low), word(high)]) == want_k
        assert _run_ptx(_V2_ASM.format(**magic_bits(c)), [word(low)]) == [(lo >> 2 * c) & 3 for lo in low]


def test_the_engine_kernels_compute_what_the_harness_measured():
    """One decode step of a sequence through the engine's kernels gives the quality harness's
    attention for the engine's scheme (quality/schemes.py engine_tiles_scheme: K3 / V2 channel
    tiles of 64, 8-bit metadata, 4 sinks, the last 128 positions in full precision): tile_store on
    the tiles before the window (tile 0 without the sinks), the sinks and the window in the window's
    pages, tile_split_decode over them and the token; GQA, 3 query heads per KV head."""
    from aphrodite_int2kv.int2.rotation import hadamard
    from aphrodite_int2kv.quality.schemes import KVTransform, attention_fn, engine_tiles_scheme

    scheme = engine_tiles_scheme()
    g = torch.Generator().manual_seed(7)
    N, Hq, Hkv, D, T, R, S, BS, WBS = 300, 6, 2, 64, scheme.tile, scheme.recent, scheme.sink, 128, 16
    q = torch.randn(N, Hq, D, generator=g)
    k = torch.randn(N, Hkv, D, generator=g) * 2 + torch.randn(1, Hkv, D, generator=g)
    v = torch.randn(N, Hkv, D, generator=g)
    want = attention_fn(scheme, KVTransform(scheme, D, Hkv, 1), D ** -0.5)(0, q, k, v)[N - 1]      # [Hq, D]

    H = hadamard(D)
    kr, vr = k @ H, v @ H
    win_start = N - R                               # the token N - 1 sees the last R positions in full precision
    ntiles = -(-win_start // T)
    layout = TileLayout(D, T)
    cache = _pages(-(-N // BS), BS, Hkv, layout)
    pages = TilePages.of_cache(cache, layout)
    tiles_k = kr[:ntiles * T].reshape(ntiles, T, Hkv, D).transpose(1, 2).contiguous()
    tiles_v = vr[:ntiles * T].reshape(ntiles, T, Hkv, D).transpose(1, 2).contiguous()
    exclude = torch.tensor([S] + [0] * (ntiles - 1), dtype=torch.int32)
    tile_store(tiles_k.to(DEVICE), tiles_v.to(DEVICE), exclude.to(DEVICE), torch.arange(ntiles, device=DEVICE),
               pages, layout)
    block_table = torch.arange(-(-N // BS), dtype=torch.int32, device=DEVICE)[None]
    wpages = -(-N // WBS)
    k_win = torch.full((wpages, WBS, Hkv, D), float("nan"))
    v_win = torch.full_like(k_win, float("nan"))
    held = torch.cat([torch.arange(S), torch.arange(win_start, N - 1)])          # sinks + window, bf16 in the engine
    col, off = window_slot(held, WBS, S, False)
    k_win[col, off], v_win[col, off] = kr[held], vr[held]
    window = (k_win.to(DEVICE), v_win.to(DEVICE), torch.arange(wpages, dtype=torch.int32, device=DEVICE)[None], R)
    out = tile_split_decode((q[N - 1:] @ H).to(DEVICE), kr[N - 1:].to(DEVICE), vr[N - 1:].to(DEVICE), pages,
                            block_table, torch.tensor([N], dtype=torch.int32, device=DEVICE), D ** -0.5, window,
                            sinks=S)
    got = out.cpu()[0] @ H.T
    assert torch.allclose(got, want, atol=ATOL, rtol=1e-4), (got - want).abs().max()


@pytest.mark.parametrize("D,RATIO", [(64, 8), (128, 2)])
def test_learned_sink_logits_take_their_softmax_share(D, RATIO):
    """gpt-oss's attention sinks: a learned logit per query head joins each softmax as one more
    score with a zero value. Both kernels against the reference, and the split decode equal to the
    fused one; sinks large enough to take most of the weight from some heads and none from others."""
    T, R = 64, 64
    reqs = [(T * 5 - 1, 1), (T * 3 + 17, 1), (40, 1), (T * 2 + 9, 33), (0, 70)]
    (q, k_new, v_new, pages, block_table, qsl, seq_lens, window), (ref_k, ref_v) = _tile_batch(
        D, RATIO, R, reqs, seed=7 + D, sinks=4)
    Hq = 2 * RATIO
    sink_logits = torch.linspace(-30.0, 6.0, Hq)
    dev = dict(sinks_log2=sink_log2(sink_logits.to(DEVICE)), sinks=4)
    out = tile_attention(q.to(DEVICE), k_new.to(DEVICE), v_new.to(DEVICE), pages, block_table, qsl.to(DEVICE),
                         seq_lens, max(n for _, n in reqs), D ** -0.5, window, **dev)
    _check(out, q, qsl, reqs, ref_k, ref_v, RATIO, D, sink_logits)
    plain = tile_attention(q.to(DEVICE), k_new.to(DEVICE), v_new.to(DEVICE), pages, block_table, qsl.to(DEVICE),
                           seq_lens, max(n for _, n in reqs), D ** -0.5, window, sinks=4)
    assert (out - plain).abs().amax() > 0.1                      # the sinks changed the output
    dec = [(p, n) for p, n in reqs if n == 1]
    nd = len(dec)
    split = tile_split_decode(q[:nd].to(DEVICE), k_new[:nd].to(DEVICE), v_new[:nd].to(DEVICE), pages,
                              block_table[:nd], seq_lens[:nd], D ** -0.5,
                              (window[0], window[1], window[2][:nd], R), num_splits=3, **dev)
    _check(split, q[:nd], qsl[:nd + 1], dec, ref_k, ref_v, RATIO, D, sink_logits)
    assert torch.allclose(split, out[:nd], atol=ATOL, rtol=0)
    for bad in (torch.zeros(Hq + 1, device=DEVICE), sink_logits.to(DEVICE, torch.bfloat16)):   # shape; not converted
        with pytest.raises(ValueError, match="sink logits for"):
            tile_attention(q.to(DEVICE), k_new.to(DEVICE), v_new.to(DEVICE), pages, block_table, qsl.to(DEVICE),
                           seq_lens, 70, D ** -0.5, window, sinks=4, sinks_log2=bad)
