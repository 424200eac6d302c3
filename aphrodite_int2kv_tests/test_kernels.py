"""Triton kernels against their torch references: on CPU under TRITON_INTERPRET=1 (CI), on the
H200 with real compilation (same file, DEVICE = cuda)."""

from __future__ import annotations

import pytest
import torch

from aphrodite_int2kv.int2 import quantizer as Q
from aphrodite_int2kv.int2 import reference as R
from aphrodite_int2kv.int2 import reference as R_  # where a test's own variable is called R
from aphrodite_int2kv.int2.format import SlotLayout, rotate_odd_slots
from aphrodite_int2kv.int2.rotation import hadamard
from aphrodite_int2kv.kernels.decode import decode_launch_config, int2_decode, partial_slots
from aphrodite_int2kv.kernels.limits import device_limits
from aphrodite_int2kv.kernels.prefill import int2_prefill
from aphrodite_int2kv.kernels.store import int2_store
from aphrodite_int2kv_tests.conftest import DEVICE

ON_GPU = DEVICE == "cuda"
# Under the interpreter every dot is fp32; on the GPU the dots take fp16 operands.
ATOL = 2e-2 if ON_GPU else 1e-4


def paged_cache(layout, seq_lens, num_kv_heads, block_size, dtype=torch.float32, seed=0,
                lloyd=False, k_clip=1.0, v_clip=1.0, garbage=False):
    """A shuffled paged cache holding random rotated K/V for each sequence; returns
    (cache, block_table, the K/V written). garbage: the bytes no token was written to are random
    (NaN and Inf fp16 patterns among them) instead of zero."""
    g = torch.Generator().manual_seed(seed)
    max_blocks = max(1, -(-max(seq_lens) // block_size))
    num_blocks = len(seq_lens) * max_blocks + 3
    shape = (num_blocks, block_size, num_kv_heads, layout.slot_bytes)
    cache = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8) if garbage else \
        torch.zeros(shape, dtype=torch.uint8)
    block_table = torch.randperm(num_blocks, generator=g)[:len(seq_lens) * max_blocks]
    block_table = block_table.reshape(len(seq_lens), max_blocks).int()
    cache, block_table = cache.to(DEVICE), block_table.to(DEVICE)
    written = []
    for b, n in enumerate(seq_lens):
        k = torch.randn(n, num_kv_heads, layout.head_dim, generator=g).to(DEVICE, dtype)
        v = torch.randn(n, num_kv_heads, layout.head_dim, generator=g).to(DEVICE, dtype)
        pos = torch.arange(n, device=DEVICE)
        slots = block_table[b][pos // block_size].long() * block_size + pos % block_size
        int2_store(k, v, slots, cache, layout, k_clip, v_clip, lloyd)
        written.append((k, v))
    return cache, block_table, written


# ---------------------------------------------------------------- store

def logical_slots(cache, layout):
    """[blocks * block_size, H, slot] of the cache's slots in the logical byte order (odd page
    offsets' slots rotated back, docs/format.md "odd slots"), on the CPU."""
    nb, bs, h, _ = cache.shape
    offsets = torch.arange(bs)[None, :, None].expand(nb, bs, h)
    return rotate_odd_slots(cache.cpu(), offsets, layout, stored=False).reshape(nb * bs, h, -1)


@pytest.mark.parametrize("D,G,mode,clip", [(64, 32, "minmax", 1.0), (64, 64, "lloyd", 1.0),
                                           (128, 32, "minmax", 0.9), (128, 128, "lloyd", 1.0),
                                           (256, 32, "minmax", 1.0), (256, 256, "minmax", 0.95),
                                           (64, 32, "std", 1.0), (128, 32, "std", 1.0), (256, 64, "std", 1.0)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_store_matches_reference_bytes(D, G, mode, clip, dtype):
    lloyd, std = mode == "lloyd", mode == "std"
    torch.manual_seed(0)
    L = SlotLayout(D, G)
    T, H, NB, BS = 9, 3, 5, 16
    k = (torch.randn(T, H, D) * 3).to(dtype)
    v = torch.randn(T, H, D).to(dtype)
    k[0, 0, :G] = 1.5                                   # a constant group
    slots = torch.tensor([5, 17, -1, 63, 0, 33, 40, -1, 79])
    cache = torch.full((NB, BS, H, L.slot_bytes), 0xAB, dtype=torch.uint8)
    cache = cache.to(DEVICE)
    int2_store(k.to(DEVICE), v.to(DEVICE), slots.to(DEVICE), cache, L, clip, 1.0, lloyd, std)
    ref = Q.encode_slots(k, v, L, clip, 1.0, lloyd, std)
    flat = logical_slots(cache, L)
    written = set()
    for i, s in enumerate(slots.tolist()):
        if s < 0:
            continue
        written.add(s)
        # bit-exact on the interpreter; on the GPU allow a rare +-1 code where fp32 rounding
        # of (x - zero) / scale lands on the other side of .5
        used = slice(0, L.used_bytes)          # the alignment padding is never written
        mismatch = (flat[s][:, used] != ref[i][:, used]).float().mean().item()
        assert mismatch <= (0.02 if ON_GPU else 0.0), (i, mismatch)
        (kd, vd), (kr, vr) = Q.decode_slots(flat[s], L, lloyd), Q.decode_slots(ref[i], L, lloyd)
        assert (kd - kr).abs().max() <= 1.6 * float(kr.abs().max()) / 3 + 1e-3
        assert (vd - vr).abs().max() <= 1.6 * float(vr.abs().max()) / 3 + 1e-3
    untouched = [s for s in range(NB * BS) if s not in written]
    assert (flat[untouched] == 0xAB).all(), "padded slots (-1) or other slots were written"


@pytest.mark.parametrize("sinks,per_seq", [(0, False), (5, False), (5, True), (1, True)])
def test_store_centers_keys_except_the_sinks(sinks, per_seq):
    """Store-time K centering: K - c (c of the token's sequence, or of the layer) is stored except
    at positions < sinks, in the int2 cache and in the window alike; `only` = 1 / 2 writes the
    sinks / the others only (data-free centering's two passes), V untouched by all of it."""
    from aphrodite_int2kv.kernels.store import Centering, window_store

    torch.manual_seed(3)
    D, G, H, BS = 64, 32, 2, 16
    L = SlotLayout(D, G)
    T = 9
    k, v = torch.randn(T, H, D) + 4.0, torch.randn(T, H, D)
    req = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2], dtype=torch.int32)
    pos = torch.tensor([3, 4, 5, 0, 1, 6, 7, 9, 10], dtype=torch.int32)
    c = 3.0 * torch.randn(3 if per_seq else 1, H, D)
    c_tok = c[req.long()] if per_seq else c.expand(T, H, D)
    want = torch.where((pos < sinks)[:, None, None], k, k - c_tok)
    slots = torch.tensor([5, 17, -1, 63, 0, 33, 40, 2, 79])
    center = (c if per_seq else c[0]).to(DEVICE)
    cen = Centering(center, req.to(DEVICE), pos.to(DEVICE), sinks)

    def stored(passes):
        cache = torch.zeros(5, BS, H, L.slot_bytes, dtype=torch.uint8, device=DEVICE)
        for centering, only in passes:
            int2_store(k.to(DEVICE), v.to(DEVICE), slots.to(DEVICE), cache, L, centering=centering, only=only)
        return logical_slots(cache, L)

    ref = Q.encode_slots(want, v, L)
    passes = [(cen, 0)] if not sinks else [(Centering(None, positions=pos.to(DEVICE), sinks=sinks), 1), (cen, 2)]
    for flat in (stored(passes), stored([(cen, 0)])):
        for i, sl in enumerate(slots.tolist()):
            if sl >= 0:
                assert torch.equal(flat[sl][:, :L.used_bytes], ref[i][:, :L.used_bytes]), i
    if sinks:   # each pass alone writes exactly its own tokens
        first = stored(passes[:1])
        for i, sl in enumerate(slots.tolist()):
            if sl >= 0:
                assert bool(first[sl].any()) == bool(pos[i] < sinks), i
    with pytest.raises(ValueError, match="only=2"):
        int2_store(k.to(DEVICE), v.to(DEVICE), slots.to(DEVICE), torch.zeros(5, BS, H, L.slot_bytes, dtype=torch.uint8,
                   device=DEVICE), L, only=2)
    # the window gets the same keys in full precision
    kw = torch.zeros(4, 3, H, D, device=DEVICE)
    vw = torch.zeros_like(kw)
    wslots = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, -1], device=DEVICE)
    window_store(k.to(DEVICE), v.to(DEVICE), wslots, kw, vw, centering=cen)
    torch.testing.assert_close(kw.view(12, H, D)[:8].cpu(), want[:8], atol=1e-6, rtol=0)
    torch.testing.assert_close(vw.view(12, H, D)[:8].cpu(), v[:8], atol=0, rtol=0)


@pytest.mark.parametrize("first,lloyd", [(16, False), (16, True), (5, False), (1, False)])
def test_sequence_centers_kernel_matches_reference(first, lloyd):
    """Data-free offsets: the mean of each sequence's first `first` keys as the cache holds them;
    zeros for a sequence shorter than that (lengths first - 1, first, and longer)."""
    from aphrodite_int2kv.kernels.centers import sequence_centers

    D, Hkv = 128, 2
    L = SlotLayout(D, 64)
    seq_lens = [first + 20, max(first - 1, 0), first, 3 * first + 7]
    cache, bt, written = paged_cache(L, seq_lens, Hkv, 16, lloyd=lloyd)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    got = sequence_centers(cache, bt, sl, L, first, lloyd)
    ref = R.sequence_centers_reference(cache, bt, sl, L, first, lloyd)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    assert (got[1] == 0).all() and got[[0, 2, 3]].abs().amax() > 0.01
    # the offset is that of the quantized keys: over 16 keys, close to the mean of the keys written
    if first >= 16:
        assert (got[0] - written[0][0][:first].mean(0)).abs().mean() < 0.3


# ---------------------------------------------------------------- decode

DECODE_CASES = [
    # D, G, q heads, kv heads, block size, splits
    (128, 32, 8, 2, 16, 3),
    (128, 32, 6, 2, 16, 1),     # ratio 3
    (128, 64, 10, 2, 32, 2),    # ratio 5
    (128, 32, 12, 2, 80, 2),    # ratio 6, block size 80 (hybrid models)
    (64, 32, 14, 2, 16, 4),     # ratio 7
    (64, 64, 24, 2, 144, 2),    # ratio 12, block size 144
    (256, 32, 48, 2, 16, 2),    # ratio 24 > 16, not a multiple of 16: the upstream bug case
    (256, 128, 40, 2, 64, 1),   # ratio 20
    (128, 128, 9, 3, 128, 2),   # SmolLM2's 9/3
    (256, 256, 16, 1, 16, 2),   # MQA
    (128, 32, 64, 2, 16, 1),    # ratio 32
    (64, 32, 72, 2, 16, 1),     # ratio 36 (three tiles)
]


@pytest.mark.parametrize("D,G,Hq,Hkv,BS,splits", DECODE_CASES)
def test_decode_matches_reference(D, G, Hq, Hkv, BS, splits):
    L = SlotLayout(D, G)
    seq_lens = [37, 1, 150, 0]
    cache, bt, _ = paged_cache(L, seq_lens, Hkv, BS)
    q = torch.randn(len(seq_lens), Hq, D, device=DEVICE)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    out = int2_decode(q, cache, bt, sl, L, D ** -0.5, splits)
    ref = R.decode_reference(q[:3], cache, bt, sl[:3], L, D ** -0.5)
    torch.testing.assert_close(out[:3].float(), ref, atol=ATOL, rtol=0)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("D,G,Hq,Hkv,BS,splits", [DECODE_CASES[i] for i in (3, 6, 8)])
def test_decode_table_ahead_per_code(D, G, Hq, Hkv, BS, splits):
    """The per-code tile with block-table entries loaded a tile ahead (int2_decode(table_ahead=True))
    against the reference: block sizes 80 / 16 / 128, tiles of 32 across page boundaries."""
    L = SlotLayout(D, G)
    seq_lens = [37, 1, 150, 0]
    cache, bt, _ = paged_cache(L, seq_lens, Hkv, BS)
    q = torch.randn(len(seq_lens), Hq, D, device=DEVICE)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    out = int2_decode(q, cache, bt, sl, L, D ** -0.5, splits, table_ahead=True, block_n=32)
    ref = R.decode_reference(q[:3], cache, bt, sl[:3], L, D ** -0.5)
    torch.testing.assert_close(out[:3].float(), ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize("fold,table_ahead", [(True, True), (True, False), (False, False), (False, True)])
def test_decode_one_page_tiles_over_garbage(fold, table_ahead):
    """Pages of 128 with 64-token tiles, as the engine runs dense models: one block-table entry per
    tile and the code bytes read unmasked (common.py load_tile). The bytes no token was written
    to are random -- NaN and Inf scales among them -- and must not reach the output; 16 sinks make
    the first split start below its first position (masked), 300 tokens cross pages."""
    D, G, Hq, Hkv, BS = 128, 64, 16, 2, 128
    L = SlotLayout(D, G)
    seq_lens = [300, 17, 1, 200, 129]
    cache, bt, _ = paged_cache(L, seq_lens, Hkv, BS, garbage=True)
    q = torch.randn(len(seq_lens), Hq, D, device=DEVICE)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    c = 2.0 * torch.randn(Hkv, D, device=DEVICE)
    out = int2_decode(q, cache, bt, sl, L, D ** -0.5, 3, fold=fold, sinks=16, k_center=c,
                      table_ahead=table_ahead, block_n=64)
    ref = R.decode_reference(q, cache, bt, sl, L, D ** -0.5, sinks=16, k_center=c, folded=fold)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize("D,G,BS", [(128, 64, 128), (256, 64, 16)])
def test_folded_decode_sharp_scores(D, G, BS):
    """The folded tile with queries scaled up 30x: scores spread over hundreds of log2 units, so
    the running max grows by large and small steps between tiles of one split. Against the
    reference. (Written for a lazily rescaling variant -- max raised only past 2^8 growth, V bias
    applied after the last tile -- that failed it without rescaling its bias sums; the variant
    passed 119/119 GPU tests but was 0-8 % slower, and was removed.)"""
    L = SlotLayout(D, G)
    seq_lens = [300, 77, 1]
    cache, bt, _ = paged_cache(L, seq_lens, 2, BS, seed=3)
    q = 30.0 * torch.randn(len(seq_lens), 16, D, device=DEVICE)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    out = int2_decode(q, cache, bt, sl, L, D ** -0.5, 2, fold=True, block_n=32, table_ahead=True)
    ref = R.decode_reference(q, cache, bt, sl, L, D ** -0.5, folded=True)
    torch.testing.assert_close(out.float(), ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_folded_decode_passes_a_non_finite_query_on(bad):
    """The folded tile rounds the query to int8 (folded.query_codes): a NaN or Inf entry must not
    be clamped into a code. Its row's output is NaN, as exact attention gives; the other rows
    (same KV head, other KV head, other sequence) are unaffected."""
    D, G, Hq, Hkv = 128, 64, 8, 2
    L = SlotLayout(D, G)
    seq_lens = [150, 70]
    cache, bt, _ = paged_cache(L, seq_lens, Hkv, 16)
    q = torch.randn(len(seq_lens), Hq, D, device=DEVICE)
    q[0, 1, 5] = bad
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    out = int2_decode(q, cache, bt, sl, L, D ** -0.5, 2, fold=True, block_n=32)
    assert torch.isnan(out[0, 1]).all()
    keep = torch.ones(len(seq_lens), Hq, dtype=torch.bool)
    keep[0, 1] = False
    ref = R.decode_reference(q, cache, bt, sl, L, D ** -0.5, folded=True)
    torch.testing.assert_close(out[keep].float(), ref[keep], atol=ATOL, rtol=0)


@pytest.mark.parametrize("table_ahead", [False, True])
@pytest.mark.parametrize("D,G,Hq,Hkv,BS,splits", DECODE_CASES[:8])
def test_folded_decode_matches_reference(D, G, Hq, Hkv, BS, splits, table_ahead):
    """The folded tile (int2_decode(fold=True): codes straight into the dots, scale and zero applied
    to the dot products) against the reference; with sinks (their -q.c) on half the cases; with
    block-table entries loaded a tile ahead (table_ahead; block_n 32, so that the 150-token
    sequence spans several tiles and pages per split) and as loaded per tile."""
    L = SlotLayout(D, G)
    seq_lens = [37, 1, 150, 0]
    cache, bt, _ = paged_cache(L, seq_lens, Hkv, BS)
    q = torch.randn(len(seq_lens), Hq, D, device=DEVICE)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    S = 5 if Hq % 2 == 0 else 0
    c = 2.0 * torch.randn(Hkv, D, device=DEVICE)
    out = int2_decode(q, cache, bt, sl, L, D ** -0.5, splits, fold=True, sinks=S, k_center=c if S else None,
                      table_ahead=table_ahead, **({"block_n": 32} if table_ahead else {}))
    ref = R.decode_reference(q[:3], cache, bt, sl[:3], L, D ** -0.5, sinks=S, k_center=c, folded=True)
    torch.testing.assert_close(out[:3].float(), ref, atol=ATOL, rtol=0)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("D,G,Hq,Hkv,block_h,tile_major", [
    (128, 64, 32, 2, 16, False),    # ratio 16: one 16-row tile per KV head
    (128, 32, 20, 1, 16, True),     # ratio 20: two 16-row tiles, 12 rows of the second masked
    (128, 64, 48, 2, 32, False),    # ratio 24: one 32-row tile, 8 rows masked
    (256, 64, 24, 1, 16, False),    # head_dim 256, ratio 24: two tiles of 16
    (256, 32, 36, 2, 16, True)])    # groups narrower than a plane (G < W), ratio 18
def test_folded_decode_with_the_query_rows_on_m(D, G, Hq, Hkv, block_h, tile_major):
    """rows_on_m (folded.int2_tile_rows: query rows on the MMA's M, tokens on N and K) against the
    reference, at ratios that are not multiples of the tile and with sinks."""
    L = SlotLayout(D, G)
    seq_lens = [150, 37, 1]
    cache, bt, _ = paged_cache(L, seq_lens, Hkv, 16)
    q = torch.randn(len(seq_lens), Hq, D, device=DEVICE)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    c = 2.0 * torch.randn(Hkv, D, device=DEVICE)
    out = int2_decode(q, cache, bt, sl, L, D ** -0.5, 3, fold=True, block_h=block_h, rows_on_m=True, block_n=32,
                      tile_major=tile_major, sinks=5, k_center=c, num_warps=2 if block_h >= 32 else 1)
    ref = R.decode_reference(q, cache, bt, sl, L, D ** -0.5, sinks=5, k_center=c, folded=True)
    torch.testing.assert_close(out.float(), ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize("D,G", [(128, 64), (128, 32), (256, 64), (256, 256), (64, 16)])
def test_integer_dots_read_back_exactly_from_their_origin(D, G):
    """int2_tile_rows starts each group's integer dot at origin_bits and reads it with one FADD
    (dot_value): for every group (lifted ones carry 16 x the codes) the extreme dots |q| <= 127,
    codes <= 3 over G columns come back exactly, in the codes' units."""
    from aphrodite_int2kv.kernels.folded import lifted, origin_bits, origin_value
    W = D // 4
    for g in range(D // G):
        for fast in (False, True):
            lift = 16 if fast and lifted(g, W, G) else 1
            top = 127 * 3 * G
            dots = torch.tensor([-top, -top + 1, -1, 0, 1, 7, top - 1, top], dtype=torch.int32)
            bits = torch.tensor(origin_bits(g, W, G, fast), dtype=torch.int32) + lift * dots
            value = bits.view(torch.float32) - origin_value(g, W, G, fast)
            assert torch.equal(value, dots.float()), (g, fast)
    assert lifted(1, 32, 64) and not lifted(0, 32, 64)     # D 128, G 64: the second group is lifted


def test_decode_partial_results_in_half_precision():
    """partial_dtype: the split programs' partial outputs in fp16 or bf16 (the merge reads them back
    into fp32) stay within the dtype's rounding of the reference; anything else is refused."""
    L = SlotLayout(256, 64)
    seq_lens = [150, 37]
    cache, bt, _ = paged_cache(L, seq_lens, 1, 16)
    q = torch.randn(len(seq_lens), 16, 256, device=DEVICE)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    ref = R.decode_reference(q, cache, bt, sl, L, 256 ** -0.5, folded=True)
    for dtype, tol in ((torch.float16, 2e-3), (torch.bfloat16, 2e-2)):
        out = int2_decode(q, cache, bt, sl, L, 256 ** -0.5, 3, fold=True, block_h=16, rows_on_m=True, block_n=32,
                          partial_dtype=dtype)
        torch.testing.assert_close(out.float(), ref, atol=max(tol, ATOL), rtol=0)
    with pytest.raises(ValueError, match="partial_dtype"):
        int2_decode(q, cache, bt, sl, L, 256 ** -0.5, 3, fold=True, partial_dtype=torch.float64)


@pytest.mark.parametrize("kw", [dict(fold=False), dict(block_h=8), dict(D=64)])
def test_rows_on_m_refuses_what_it_cannot_run(kw):
    D = kw.pop("D", 128)
    L = SlotLayout(D, 32)
    cache, bt, _ = paged_cache(L, [20], 1, 16)
    q = torch.randn(1, 16, D, device=DEVICE)
    sl = torch.tensor([20], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="rows_on_m needs the folded tile"):
        int2_decode(q, cache, bt, sl, L, D ** -0.5, 1, **{"fold": True, **kw}, rows_on_m=True)


@pytest.mark.parametrize("D,G,Hq,Hkv,block_h", [
    (128, 64, 24, 2, 8),     # ratio 12: two 8-row tiles per KV head, the second half masked
    (128, 64, 20, 1, 8),     # ratio 20: three 8-row tiles, 4 rows of the last one masked
    (256, 64, 48, 2, 16),    # ratio 24 at head_dim 256: two 16-row tiles, 8 rows masked
    (64, 32, 18, 3, 8)])     # ratio 6 on three KV heads: one tile each
@pytest.mark.parametrize("fold", [True, False])
def test_decode_tile_major_grid_maps_every_head(D, G, Hq, Hkv, block_h, fold):
    """tile_major (grid: head tiles of a KV head side by side, then the splits, then the KV
    heads) reads every query head's own KV head, at ratios that are not multiples of the tile."""
    L = SlotLayout(D, G)
    seq_lens = [150, 37, 1]
    cache, bt, _ = paged_cache(L, seq_lens, Hkv, 16)
    q = torch.randn(len(seq_lens), Hq, D, device=DEVICE)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    out = int2_decode(q, cache, bt, sl, L, D ** -0.5, 3, fold=fold, block_h=block_h, tile_major=True, block_n=32)
    ref = R.decode_reference(q, cache, bt, sl, L, D ** -0.5, folded=fold)
    torch.testing.assert_close(out.float(), ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize("D,G,Hq,Hkv,batch", [
    (128, 32, 32, 4, 3), (128, 64, 12, 2, 1), (64, 32, 8, 8, 5), (256, 64, 16, 2, 2), (256, 32, 48, 2, 1),
    (128, 64, 24, 1, 3),    # ratio 24: one 32-row tile in two-warp programs, 8 rows masked
    (128, 32, 40, 2, 2),    # ratio 20: the 32-row tile, 12 rows masked, two KV heads
    (64, 32, 48, 2, 2),     # ratio 24 at head_dim 64: two 16-row tiles, the second half masked
    (256, 64, 32, 1, 2),    # ratio 32 at head_dim 256: two 16-row tiles
    (128, 64, 48, 1, 1)])   # ratio 48: three 16-row tiles
@pytest.mark.parametrize("fold", [True, False])
def test_decode_with_the_engine_launch_config(D, G, Hq, Hkv, batch, fold):
    """The launch shape the engine uses (head tiles of 8, 16 or 32 rows in one- or two-warp
    programs, many splits, so some splits are empty at these lengths; block-table entries a tile
    ahead where it picks them) against the reference, in bf16 as the engine runs it, with either
    tile."""
    # the GPU's own limits (or those APHRODITE_INT2KV_DEVICE_LIMITS names); fewer multiprocessors
    # under the (serial) interpreter
    limits = device_limits(DEVICE)
    cfg = decode_launch_config(batch, Hkv, Hq // Hkv, D, num_sms=None if ON_GPU else 8, fold=fold, limits=limits)
    assert cfg.num_splits > 1
    L = SlotLayout(D, G)
    seq_lens = [300, 17, 1, 64, 129][:batch]
    cache, bt, _ = paged_cache(L, seq_lens, Hkv, 16, dtype=torch.bfloat16)
    q = torch.randn(batch, Hq, D, device=DEVICE).to(torch.bfloat16)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    out = int2_decode(q, cache, bt, sl, L, D ** -0.5, cfg.num_splits, **cfg.kwargs())   # the tile included
    ref = R.decode_reference(q.float(), cache, bt, sl, L, D ** -0.5, folded=fold)
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=0)


def test_head_tiles_by_ratio_and_head_dim():
    """Tiles of 8 rows up to ratio 8, 16 up to 16; 32 rows (two warps) for ratios 17-32 at head_dim
    128 only; never a tile that would hold two KV groups' heads (the mapping masks the rest)."""
    from aphrodite_int2kv.kernels.decode import block_h_for, split_warps
    assert [block_h_for(r, 128) for r in (1, 8, 9, 16, 17, 24, 32, 33, 48)] == [8, 8, 16, 16, 32, 32, 32, 16, 16]
    assert [block_h_for(r, D) for r in (24, 32) for D in (64, 256)] == [16, 16, 16, 16]
    assert [split_warps(128, b) for b in (8, 16, 32)] == [1, 1, 2]
    for D in (64, 128, 256):
        for ratio in range(1, 65):
            cfg = decode_launch_config(8, 1, ratio, D)
            assert cfg.block_h == block_h_for(ratio, D) and cfg.num_warps == split_warps(D, cfg.block_h)


def test_decode_launch_config_depends_on_batch_only():
    """CUDA graphs replay one grid per captured batch size: the split count must not follow the
    sequence lengths unless the caller asks for it."""
    a = decode_launch_config(8, 4, 8, 128)
    decode_launch_config(8, 4, 8, 128, max_seq_len=1024)     # another entry in the cache between
    assert decode_launch_config(8, 4, 8, 128) == decode_launch_config.__wrapped__(8, 4, 8, 128) == a   # cached = fresh
    assert decode_launch_config(8, 4, 8, 128, max_seq_len=1024) != a     # the lengths change it only when asked
    assert a.num_splits == 12 * 132 // (8 * 4)        # one wave of 12 folded programs per multiprocessor
    # never just past a whole wave: rounded down (batch 32, 4 KV heads: 12 splits, not 13 -- the
    # per-code tile: 16 splits, two waves of 8, not 17)
    assert decode_launch_config(32, 4, 8, 128).num_splits == 12
    assert decode_launch_config(32, 4, 8, 128, fold=False).num_splits == 16
    assert decode_launch_config(8, 2, 8, 256).num_splits * 8 * 2 <= 8 * 132
    assert decode_launch_config(8, 4, 8, 128, max_seq_len=1000).num_splits == 3
    assert decode_launch_config(512, 8, 8, 128).num_splits == 1
    # block-table entries a tile ahead where the H200 timed them faster (folded; per-code at 256)
    assert [decode_launch_config(8, 4, 8, D, fold=f).table_ahead for D in (64, 128, 256) for f in (True, False)] \
        == [True, False, True, False, True, True]
    # the tile travels with the launch (one source for the tile and its table_ahead)
    assert [decode_launch_config(8, 4, 8, 128, fold=f).kwargs()["fold"] for f in (True, False)] == [True, False]
    # the split launch chained after the tail's only where its grid fills a wave (batch 1 at 4 KV
    # heads: 256 splits, 1,024 of 1,584 slots at head_dim 128; head_dim 256 batch 2: 1,024 of 1,056)
    assert [decode_launch_config(b, 4, 8, 128).chain_tail for b in (1, 2, 8, 64)] == [False, True, True, True]
    assert [decode_launch_config(b, 2, 8, 256).chain_tail for b in (1, 2, 8)] == [False, False, True]
    # short shares in 32-token tiles: the folded tile at head_dim <= 128 only (measured there)
    assert [(decode_launch_config(8, 4, 8, D, fold=f).short_n, decode_launch_config(8, 4, 8, D, fold=f).short_units)
            for D in (128, 256) for f in (True, False)] == [(32, 24), (0, 0), (0, 0), (0, 0)]
    # the merge split over columns where it has few rows (batch x query heads <= 256): 8 one-warp
    # programs per row (4 at head_dim 64: 16 columns at least), else one 4-warp program
    assert [(decode_launch_config(b, 4, 8, D).merge_split, decode_launch_config(b, 4, 8, D).merge_warps)
            for b, D in ((1, 128), (8, 128), (9, 128), (8, 64), (8, 256), (32, 256))] == \
        [(8, 1), (8, 1), (1, 4), (4, 1), (8, 1), (1, 4)]
    # above 8 query heads per KV head at head_dim >= 128: the rows-on-M tile, one wave of programs
    # (ratio 16 on one KV head, batch 8: 8 programs per split, 8 per multiprocessor), its partial
    # results in fp16 at head_dim 256 only; not at head_dim 64, nor for the per-code tile
    r16 = decode_launch_config(8, 1, 16, 128)
    assert r16.rows_on_m and r16.num_splits == 132 and r16.partial_dtype == torch.float32
    assert r16.kwargs()["rows_on_m"] and r16.kwargs()["partial_dtype"] == torch.float32
    assert [decode_launch_config(8, 1, r, 256).partial_dtype for r in (8, 16, 32)] == \
        [torch.float32, torch.float16, torch.float16]
    assert [decode_launch_config(8, 1, r, D, fold=f).rows_on_m for r, D, f in
            ((8, 128, True), (9, 128, True), (32, 128, True), (16, 64, True), (16, 128, False), (24, 256, True))] == \
        [False, True, True, False, False, True]


KERNELS = {"decode": ("_int2_decode_split_kernel", "_int2_decode_tail_kernel", "_int2_decode_merge_kernel"),
           "prefill": ("_int2_prefill_kernel",)}


def _not_specialized():
    """Each kernel's do_not_specialize and do_not_specialize_on_alignment names, read from a process
    without TRITON_INTERPRET (the interpreter drops the decorator's arguments; importing needs no GPU)."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = ("import json, importlib; out = {}\n"
            f"for mod, names in {KERNELS!r}.items():\n"
            "    m = importlib.import_module('aphrodite_int2kv.kernels.' + mod)\n"
            "    for n in names: k = getattr(m, n); out[n] = [list(k.do_not_specialize), "
            "list(k.do_not_specialize_on_alignment)]\n"
            "print(json.dumps(out))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


class _VariantRecorder:
    """Stands in for a kernel and records the key Triton compiles a variant for: the constexpr
    arguments, and, unless excluded by the decorator, each integer's (== 1, multiple of 16) and
    each tensor's 16-byte alignment."""

    def __init__(self, name, kernel, excluded, keys):
        import inspect

        self.name, self.params = name, list(inspect.signature(kernel.fn).parameters)
        self.no_int, self.no_align = excluded[name]
        self.keys = keys

    def __getitem__(self, grid):
        def launch(*args, **kw):
            key = []
            for n, a in zip(self.params, args):
                if isinstance(a, int) and not isinstance(a, bool) and n not in self.no_int:
                    key.append((n, a == 1, a % 16 == 0))
                elif isinstance(a, torch.Tensor) and n not in self.no_align:
                    key.append((n, a.data_ptr() % 16 == 0))
            self.keys.setdefault(self.name, set()).add((tuple(key), tuple(sorted((k, str(v)) for k, v in kw.items()))))
        return launch


def test_decode_compiles_one_variant_for_every_batch_size(monkeypatch):
    """The engine decodes batch sizes that no CUDA-graph capture warmed up (mixed prefill + decode
    steps run attention eagerly): a kernel variant that depends on the batch size is compiled there,
    in the serving path (the H200 showed a 2-3 s stall in the first decode pass). The variant key
    -- constexpr arguments plus Triton's specialization of every specialized integer argument (== 1,
    multiple of 16) -- must be the same for batch sizes 1..40 (before: 6 and 16 made new ones).
    The merge's step (merge_chunk) follows the split count on purpose: a power of two, at most four
    variants per head_dim; with its column split (decode_launch_config: batch x heads <= 256) at most
    six, all of them compiled by a capture of the engine's graph batch sizes."""
    from aphrodite_int2kv.kernels import decode as dec

    excluded = _not_specialized()
    keys = {}
    for name in KERNELS["decode"]:
        monkeypatch.setattr(dec, name, _VariantRecorder(name, getattr(dec, name), excluded, keys))
    D, Hq, Hkv = 128, 32, 8
    L = SlotLayout(D, 64)
    cache = torch.zeros(4, 128, Hkv, L.slot_bytes, dtype=torch.uint8, device=DEVICE)
    k_win = torch.zeros(4, 20, Hkv, D, dtype=torch.bfloat16, device=DEVICE)
    for B in range(1, 41):
        cfg = decode_launch_config(B, Hkv, Hq // Hkv, D, 132)
        q = torch.zeros(B, Hq, D, device=DEVICE)
        bt = torch.zeros(B, 300, dtype=torch.int32, device=DEVICE)
        sl = torch.ones(B, dtype=torch.int32, device=DEVICE)
        int2_decode(q, cache, bt, sl, L, D ** -0.5, cfg.num_splits, **cfg.kwargs(),
                    k_center=torch.zeros(B, Hkv, D, device=DEVICE),
                    sinks=16, window=(k_win, k_win, torch.zeros(B, 1700, dtype=torch.int32, device=DEVICE), 128))
    assert set(keys) == set(KERNELS["decode"])
    for name, variants in keys.items():
        most = 6 if name == "_int2_decode_merge_kernel" else 1
        assert len(variants) <= most, f"{name}: {len(variants)} compiled variants over batch sizes 1..40"
    assert len(keys["_int2_decode_merge_kernel"]) > 1      # 16..128-slot steps over these batches


def test_prefill_compiles_one_variant_for_every_decode_count(monkeypatch):
    """The backend hands the prefill kernel its per-request tensors sliced after the step's decodes
    (block_table[nd:], seq_lens[nd:], q.c[nd:], the window table[nd:]): one compiled variant for any
    number of decodes nd (before: one per alignment class of those addresses)."""
    from aphrodite_int2kv.kernels import prefill as pre

    excluded = _not_specialized()
    keys = {}
    monkeypatch.setattr(pre, "_int2_prefill_kernel",
                        _VariantRecorder("_int2_prefill_kernel", pre._int2_prefill_kernel, excluded, keys))
    D, Hq, Hkv, n = 128, 6, 2, 20
    L = SlotLayout(D, 64)
    cache = torch.zeros(4, 128, Hkv, L.slot_bytes, dtype=torch.uint8, device=DEVICE)
    k_win = torch.zeros(4, 20, Hkv, D, dtype=torch.bfloat16, device=DEVICE)
    q = torch.zeros(n, Hq, D, device=DEVICE)
    bt, wbt = torch.zeros(n, 7, dtype=torch.int32, device=DEVICE), torch.zeros(n, 11, dtype=torch.int32, device=DEVICE)
    sl, cen = torch.ones(n, dtype=torch.int32, device=DEVICE), torch.zeros(n, Hkv, D, device=DEVICE)
    for nd in range(0, 12):
        T = n - nd
        qsl = torch.arange(T + 1, dtype=torch.int32, device=DEVICE)
        kv = torch.zeros(T, Hkv, D, device=DEVICE)
        int2_prefill(q[nd:], kv, kv, cache, bt[nd:], qsl, sl[nd:], 1, L, D ** -0.5, k_center=cen[nd:], sinks=4,
                     window=(k_win, k_win, wbt[nd:], 128))
    assert len(keys["_int2_prefill_kernel"]) == 1, f"{len(keys['_int2_prefill_kernel'])} compiled variants"


@pytest.mark.parametrize("lloyd", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_decode_half_precision_and_lloyd(lloyd, dtype):
    L = SlotLayout(128, 64)
    seq_lens = [65, 200]
    cache, bt, _ = paged_cache(L, seq_lens, 2, 32, dtype=dtype, lloyd=lloyd)
    q = torch.randn(2, 8, 128, device=DEVICE).to(dtype)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    out = int2_decode(q, cache, bt, sl, L, 128 ** -0.5, 2, lloyd_max=lloyd)
    assert out.dtype == dtype
    ref = R.decode_reference(q.float(), cache, bt, sl, L, 128 ** -0.5, lloyd)
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=0)


def test_lloyd_max_cubic_of_the_gpu_unpack():
    """The GPU unpack evaluates Lloyd-Max levels as the cubic through them (fp16 Horner, then one
    fma with scale/zero): exact in real arithmetic and within 2e-3 of each level in fp16."""
    from aphrodite_int2kv.int2.format import LLOYD_MAX_LEVELS
    from aphrodite_int2kv.kernels.common import _lloyd_cubic, _plane_asm

    c0, c1, c2, c3 = _lloyd_cubic(LLOYD_MAX_LEVELS)
    for code, level in enumerate(LLOYD_MAX_LEVELS):
        assert abs(((c3 * code + c2) * code + c1) * code + c0 - level) < 1e-9
        h = lambda x: torch.tensor(x, dtype=torch.float16)  # noqa: E731
        x = h(code)
        y = torch.addcmul(h(c1), torch.addcmul(h(c2), x, h(c3)), x)   # fma-like, fp16 rounding each step
        y = torch.addcmul(h(c0), y, x)
        assert abs(float(y) - level) < 2e-3, (code, float(y), level)
    assert "fma.rn.f16x2 m, lo, c3, c2" in _plane_asm(0, LLOYD_MAX_LEVELS)
    assert "c3" not in _plane_asm(0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_prefill_lloyd(dtype):
    L = SlotLayout(128, 32)
    prefixes, chunks = [70, 0, 33], [5, 40, 1]
    total = [p + c for p, c in zip(prefixes, chunks)]
    cache, bt, _ = paged_cache(L, total, 2, 16, dtype=dtype, lloyd=True)
    T = sum(chunks)
    q, k, v = (torch.randn(T, h, 128, device=DEVICE).to(dtype) for h in (8, 2, 2))
    qsl = torch.tensor([0] + list(torch.tensor(chunks).cumsum(0)), dtype=torch.int32, device=DEVICE)
    sl = torch.tensor(total, dtype=torch.int32, device=DEVICE)
    out = int2_prefill(q, k, v, cache, bt, qsl, sl, max(chunks), L, 128 ** -0.5, lloyd_max=True,
                       block_m=16, block_n=32)
    ref = R.prefill_reference(q.float(), k.float(), v.float(), cache, bt, qsl, sl, L, 128 ** -0.5, True)
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=0)
    uni = R.prefill_reference(q.float(), k.float(), v.float(), cache, bt, qsl, sl, L, 128 ** -0.5, False)
    assert (uni - ref).abs().max() > 0.05   # the levels matter: reading them as uniform is caught


def test_upstream_head_mapping_is_caught():
    """48 query heads over 2 KV heads (group 24 > 16, not a multiple): the mapping of aphrodite's
    grouped Triton decode sends q heads 24..31 to KV head 0. Our mapping is exact; the test
    detects the upstream one."""
    L = SlotLayout(128, 32)
    cache, bt, _ = paged_cache(L, [96, 40], 2, 16)
    q = torch.randn(2, 48, 128, device=DEVICE)
    sl = torch.tensor([96, 40], dtype=torch.int32, device=DEVICE)
    ref = R.decode_reference(q, cache, bt, sl, L, 128 ** -0.5)
    ours = int2_decode(q, cache, bt, sl, L, 128 ** -0.5, 1)
    torch.testing.assert_close(ours.float(), ref, atol=ATOL, rtol=0)
    broken = int2_decode(q, cache, bt, sl, L, 128 ** -0.5, 1, _upstream_head_map=True)
    err = (broken.float() - ref).abs().amax(dim=-1)             # [B, Hq]
    wrong = sorted({h for h in range(48) if (err[:, h] > 0.05).any()})
    assert wrong and all(24 <= h < 32 for h in wrong), wrong
    assert torch.isfinite(broken).all()                           # silent: no NaN to notice


def test_rotated_int2_attention_tracks_fp32_attention():
    """End to end in the original basis: rotate, store, decode, un-rotate vs fp32 attention."""
    torch.manual_seed(1)
    D, Hq, Hkv, n = 128, 8, 2, 300
    L = SlotLayout(D, 32)
    rot = hadamard(D).to(DEVICE)
    k = torch.randn(n, Hkv, D, device=DEVICE)
    v = torch.randn(n, Hkv, D, device=DEVICE)
    q = torch.randn(1, Hq, D, device=DEVICE)
    cache = torch.zeros(-(-n // 16), 16, Hkv, L.slot_bytes, dtype=torch.uint8, device=DEVICE)
    bt = torch.arange(cache.shape[0], dtype=torch.int32, device=DEVICE)[None]
    int2_store(R.rotate(k, rot).contiguous(), R.rotate(v, rot).contiguous(),
               torch.arange(n, device=DEVICE), cache, L)
    out_rot = int2_decode(R.rotate(q, rot).contiguous(), cache, bt,
                          torch.tensor([n], dtype=torch.int32, device=DEVICE), L, D ** -0.5, 2)
    out = R.unrotate_output(out_rot, rot, Hkv)
    # the same math in plain torch: K^ = fq(K R) R^T, V^ = fq(V R) R^T, attention in fp32
    k_hat = R.rotate(Q.fake_quantize(R.rotate(k, rot), 32), rot.T)
    v_hat = R.rotate(Q.fake_quantize(R.rotate(v, rot), 32), rot.T)
    torch.testing.assert_close(out, R.attend(q, k_hat, v_hat, D ** -0.5), atol=ATOL, rtol=0)
    exact = R.attend(q, k, v, D ** -0.5)
    err = (out - exact).norm()
    assert err < 0.7 * exact.norm()                       # 2-bit noise on random data, not garbage
    assert (out_rot.float() - exact).norm() > 2 * err     # forgetting the inverse rotation is caught


# ---------------------------------------------------------------- prefill / extend

PREFILL_CASES = [
    # D, G, q heads, kv heads, block size, prefixes, chunk lengths
    (128, 32, 4, 2, 16, [0, 37, 130], [5, 70, 1]),
    (64, 64, 6, 2, 80, [17, 0], [33, 64]),
    (256, 32, 3, 1, 16, [50], [20]),
    (128, 128, 24, 2, 144, [150, 3], [9, 2]),   # ratio 12, hybrid block size
]


@pytest.mark.parametrize("D,G,Hq,Hkv,BS,prefixes,chunks", PREFILL_CASES)
def test_prefill_matches_reference(D, G, Hq, Hkv, BS, prefixes, chunks):
    L = SlotLayout(D, G)
    total = [p + c for p, c in zip(prefixes, chunks)]
    cache, bt, _ = paged_cache(L, [max(1, t) for t in total], Hkv, BS)
    # the cache holds the prefix; the chunk comes in full precision
    T = sum(chunks)
    q = torch.randn(T, Hq, D, device=DEVICE)
    k = torch.randn(T, Hkv, D, device=DEVICE)
    v = torch.randn(T, Hkv, D, device=DEVICE)
    qsl = torch.tensor([0] + list(torch.tensor(chunks).cumsum(0)), dtype=torch.int32, device=DEVICE)
    sl = torch.tensor(total, dtype=torch.int32, device=DEVICE)
    out = int2_prefill(q, k, v, cache, bt, qsl, sl, max(chunks), L, D ** -0.5, block_m=32, block_n=32)
    ref = R.prefill_reference(q, k, v, cache, bt, qsl, sl, L, D ** -0.5)
    torch.testing.assert_close(out.float(), ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize("D,G", [(64, 32), (128, 64), (256, 64)])
def test_prefill_in_the_planned_launch_matches_reference(D, G):
    """The tiles and stages prefill_launch_config picks for this device (or for the GPU that
    APHRODITE_INT2KV_DEVICE_LIMITS names: the smaller parts' launches, run on a large GPU), in bf16
    as the engine runs it, with a prefix longer than one tile and a chunk longer than one block."""
    from aphrodite_int2kv.kernels.prefill import prefill_launch_config

    L = SlotLayout(D, G)
    prefixes, chunks = [70, 0], [100, 40]
    total = [p + c for p, c in zip(prefixes, chunks)]
    cache, bt, _ = paged_cache(L, total, 2, 16)
    T = sum(chunks)
    q, k, v = (torch.randn(T, h, D, device=DEVICE).to(torch.bfloat16) for h in (8, 2, 2))
    qsl = torch.tensor([0] + list(torch.tensor(chunks).cumsum(0)), dtype=torch.int32, device=DEVICE)
    sl = torch.tensor(total, dtype=torch.int32, device=DEVICE)
    plan = prefill_launch_config(D, device_limits(DEVICE))
    out = int2_prefill(q, k, v, cache, bt, qsl, sl, max(chunks), L, D ** -0.5)
    ref = R.prefill_reference(q.float(), k.float(), v.float(), cache, bt, qsl, sl, L, D ** -0.5)
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=0, msg=lambda m: f"{plan}: {m}")


@pytest.mark.parametrize("S", [1, 4, 20])
def test_uncentered_sink_positions_get_q_dot_c_subtracted(S):
    """K centering keeps the first S positions uncentered in the cache; decode and prefill subtract
    q.c from exactly those scores (positions S-1 / S are the boundary; a sequence shorter than S and
    a prefill chunk that starts inside the sinks are included)."""
    D, Hq, Hkv = 128, 6, 2
    L = SlotLayout(D, 32)
    seq_lens = [37, 3, 150, S]
    cache, bt, _ = paged_cache(L, seq_lens, Hkv, 16)
    c = 3.0 * torch.randn(Hkv, D, device=DEVICE)
    q = torch.randn(len(seq_lens), Hq, D, device=DEVICE)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    out = int2_decode(q, cache, bt, sl, L, D ** -0.5, 2, k_center=c, sinks=S)
    ref = R.decode_reference(q, cache, bt, sl, L, D ** -0.5, sinks=S, k_center=c)
    torch.testing.assert_close(out.float(), ref, atol=ATOL, rtol=0)
    assert (out.float() - R.decode_reference(q, cache, bt, sl, L, D ** -0.5)).abs().max() > 10 * ATOL

    chunks = [5, 2, 30, 1]
    prefixes = [n - c_ for n, c_ in zip(seq_lens, chunks)]          # 32, 1 (inside the sinks), 120, S-1
    T = sum(chunks)
    qp = torch.randn(T, Hq, D, device=DEVICE)
    kp, vp = torch.randn(T, Hkv, D, device=DEVICE), torch.randn(T, Hkv, D, device=DEVICE)
    qsl = torch.tensor([0] + list(torch.tensor(chunks).cumsum(0)), dtype=torch.int32, device=DEVICE)
    outp = int2_prefill(qp, kp, vp, cache, bt, qsl, sl, max(chunks), L, D ** -0.5, block_m=32, block_n=32,
                        k_center=c, sinks=S)
    refp = R.prefill_reference(qp, kp, vp, cache, bt, qsl, sl, L, D ** -0.5, sinks=S, k_center=c)
    torch.testing.assert_close(outp.float(), refp, atol=ATOL, rtol=0)
    assert prefixes[1] == 1


def window_cache(written, num_kv_heads, D, wbs, dtype=torch.bfloat16, seed=1):
    """A paged full-precision window cache ([blocks, wbs, Hkv, D] K and V, shuffled pages) holding
    every position of each sequence's written K/V; returns (k_win, v_win, window block table)."""
    g = torch.Generator().manual_seed(seed)
    max_blocks = max(1, max(-(-k.shape[0] // wbs) for k, _ in written))
    n = len(written) * max_blocks + 2
    k_win = torch.zeros(n, wbs, num_kv_heads, D, dtype=dtype, device=DEVICE)
    v_win = torch.zeros_like(k_win)
    table = torch.randperm(n, generator=g)[:len(written) * max_blocks].reshape(len(written), max_blocks)
    table = table.int().to(DEVICE)
    for b, (k, v) in enumerate(written):
        pos = torch.arange(k.shape[0], device=DEVICE)
        k_win[table[b][pos // wbs].long(), pos % wbs] = k.to(dtype)
        v_win[table[b][pos // wbs].long(), pos % wbs] = v.to(dtype)
    return k_win, v_win, table


@pytest.mark.parametrize("R,wbs", [(1, 3), (16, 3), (40, 16), (500, 5)])
def test_decode_reads_the_recent_window_in_full_precision(R, wbs):
    """The last R tokens come from the paged full-precision window cache, the rest from int2:
    sequences shorter than R (all full precision), a split boundary inside the window, R = 1."""
    D, Hq, Hkv = 128, 8, 2
    L = SlotLayout(D, 32)
    seq_lens = [37, 3, 150, 41]
    cache, bt, written = paged_cache(L, seq_lens, Hkv, 16)
    k_win, v_win, wbt = window_cache(written, Hkv, D, wbs)
    q = torch.randn(len(seq_lens), Hq, D, device=DEVICE)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    out = int2_decode(q, cache, bt, sl, L, D ** -0.5, 3, window=(k_win, v_win, wbt, R))
    for b, n in enumerate(seq_lens):
        kq, vq = R_.gather_sequence(cache, bt[b], n, L)
        cut = max(0, n - R)
        k = torch.cat([kq[:cut], written[b][0][cut:].to(torch.bfloat16).float()])
        v = torch.cat([vq[:cut], written[b][1][cut:].to(torch.bfloat16).float()])
        ref = R_.attend(q[b:b + 1], k, v, D ** -0.5)
        torch.testing.assert_close(out[b:b + 1].float(), ref, atol=ATOL, rtol=0)


@pytest.mark.skipif(not ON_GPU or torch.cuda.get_device_capability()[0] < 9,
                    reason="programmatic dependent launch: sm_90+ GPUs (runs on the H200), not the interpreter")
@pytest.mark.parametrize("R", [0, 64])
def test_decode_dependent_launches_wait_for_the_results_they_read(R):
    """On sm_90+ the merge is a programmatic dependent of the split launch (and, with a window, the
    split of the tail launch): it may start while the split programs run and must wait (gdc_wait)
    before reading their partial results (with the window, chain_tail: the split waits for the tail
    at its end). Two long sequences on 2 programs each: the split programs
    run long and leave the GPU free for the merge's, so a merge reading before the split launch
    completed reads the NaN the workspace is filled with before each replay. As the engine runs it:
    captured in a CUDA graph, replayed 10 times. (Seen failing on the H200 with the merge's
    gdc_wait removed.)"""
    D, Hq, Hkv = 128, 8, 2
    L = SlotLayout(D, 64)
    seq_lens = [16384, 12000]
    cache, bt, written = paged_cache(L, seq_lens, Hkv, 128)
    window = (*window_cache(written, Hkv, D, 16), R) if R else None
    q = torch.randn(len(seq_lens), Hq, D, device=DEVICE)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    slots = partial_slots(2, 0, R)
    ws = (torch.empty(len(seq_lens) * Hq * slots * D, device=DEVICE), torch.empty(len(seq_lens) * Hq * slots, device=DEVICE))
    out = torch.empty_like(q)
    run = lambda: int2_decode(q, cache, bt, sl, L, D ** -0.5, 2, out=out, workspace=ws, window=window, fold=True,  # noqa: E731
                              chain_tail=True)
    run()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    refs = []
    for b, n in enumerate(seq_lens):
        kq, vq = R_.gather_sequence(cache, bt[b], n, L)
        k = torch.cat([kq[:n - R], written[b][0][n - R:].to(torch.bfloat16).float()])
        v = torch.cat([vq[:n - R], written[b][1][n - R:].to(torch.bfloat16).float()])
        refs.append(R_.attend(q[b:b + 1], k, v, D ** -0.5, q_folded=R_.query_codes(q[b:b + 1], D ** -0.5),
                              folded_keys=(0, n - R)))
    for _ in range(10):
        ws[0].fill_(float("nan"))
        ws[1].fill_(float("nan"))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        for b, ref in enumerate(refs):
            torch.testing.assert_close(out[b:b + 1].float(), ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize("merge_split,merge_warps", [(2, 4), (4, 2), (8, 1)])
def test_decode_merge_split_over_columns(merge_split, merge_warps):
    """The merge split over the head dimension (merge_split programs per query row, D / merge_split
    columns each): every program must find its columns and all of the row's slots -- the splits'
    (3 per sequence, the folded tile) and the tail's (sinks and a window over two tail programs) --
    against the reference and the one-program merge."""
    D, Hq, Hkv, S, R = 128, 8, 2, 4, 40
    L = SlotLayout(D, 64)
    seq_lens = [S + R + 150, 3, 200, R + 1]
    cache, bt, written = paged_cache(L, seq_lens, Hkv, 16)
    k_win, v_win, wbt = window_cache(written, Hkv, D, 7)
    c = 3.0 * torch.randn(Hkv, D, device=DEVICE)
    q = torch.randn(len(seq_lens), Hq, D, device=DEVICE)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    args = (q, cache, bt, sl, L, D ** -0.5, 3)
    kw = dict(k_center=c, sinks=S, window=(k_win, v_win, wbt, R), fold=True)
    out = int2_decode(*args, **kw, merge_split=merge_split, merge_warps=merge_warps)
    torch.testing.assert_close(out, int2_decode(*args, **kw), atol=1e-5, rtol=0)
    for b, n in enumerate(seq_lens):
        kq, vq = R_.gather_sequence(cache, bt[b], n, L)
        cut = max(0, n - R)
        k = R_._center_sinks(torch.cat([kq[:cut], written[b][0][cut:].to(torch.bfloat16).float()]), S, c)
        v = torch.cat([vq[:cut], written[b][1][cut:].to(torch.bfloat16).float()])
        ref = R_.attend(q[b:b + 1], k, v, D ** -0.5, q_folded=R_.query_codes(q[b:b + 1], D ** -0.5),
                        folded_keys=(min(S, cut), cut))
        torch.testing.assert_close(out[b:b + 1].float(), ref, atol=ATOL, rtol=0)
    for bad in (3, 16):     # not a power of two; 8 columns per program
        with pytest.raises(ValueError, match="merge_split"):
            int2_decode(*args, **kw, merge_split=bad)


@pytest.mark.parametrize("S,R,splits", [(4, 40, 3), (20, 16, 2), (1, 70, 1), (64, 33, 5)])
def test_decode_with_sinks_and_window_together(S, R, splits):
    """Sinks and window in one decode (both read by the tail kernel, the splits read [S, L - R)):
    sequences shorter than S, shorter than R, with S + R > L, with L = S + R exactly, with the int2
    part empty, and a window spread over several tail programs (R > 32)."""
    D, Hq, Hkv = 128, 8, 2
    L = SlotLayout(D, 64)
    seq_lens = [S + R, 3, S + R - 1, 200, max(1, S - 1), R + 1]
    cache, bt, written = paged_cache(L, seq_lens, Hkv, 16)
    k_win, v_win, wbt = window_cache(written, Hkv, D, 7)
    # per-sequence offsets (data-free centering's shape)
    c = 3.0 * torch.randn(len(seq_lens), Hkv, D, device=DEVICE)
    q = torch.randn(len(seq_lens), Hq, D, device=DEVICE)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    out = int2_decode(q, cache, bt, sl, L, D ** -0.5, splits, k_center=c, sinks=S, window=(k_win, v_win, wbt, R))
    for b, n in enumerate(seq_lens):
        kq, vq = R_.gather_sequence(cache, bt[b], n, L)
        cut = max(0, n - R)
        # positions < S hold uncentered keys, in int2 and in the window alike (scores - q.c)
        k = R_._center_sinks(torch.cat([kq[:cut], written[b][0][cut:].to(torch.bfloat16).float()]), S, c[b])
        v = torch.cat([vq[:cut], written[b][1][cut:].to(torch.bfloat16).float()])
        torch.testing.assert_close(out[b:b + 1].float(), R_.attend(q[b:b + 1], k, v, D ** -0.5), atol=ATOL, rtol=0)
    # both parts matter: without the sink correction or without the window the answer moves
    no_sinks = int2_decode(q, cache, bt, sl, L, D ** -0.5, splits, window=(k_win, v_win, wbt, R))
    assert (no_sinks.float() - out.float())[[0, 3]].abs().max() > 10 * ATOL
    no_window = int2_decode(q, cache, bt, sl, L, D ** -0.5, splits, k_center=c, sinks=S)
    assert (no_window.float() - out.float()).abs().max() > 0.05


def split_shares(tiles: list[int], programs: int) -> set[tuple[int, int]]:
    """The (program, sequence) pairs of the balanced split launch (decode.py stage 1), in plain
    Python: the batch's tiles concatenated, program p taking tiles [p * T // P, (p + 1) * T // P),
    or tile p alone when there are fewer tiles than programs (P > T: programs from T on take none)."""
    T, pairs, ends = sum(tiles), set(), [sum(tiles[:b + 1]) for b in range(len(tiles))]
    for p in range(programs):
        t0, t1 = (p * T // programs, (p + 1) * T // programs) if T >= programs else (min(p, T), min(p + 1, T))
        pairs |= {(p, b) for b in range(len(tiles)) if t1 > t0 and tiles[b] and ends[b] - tiles[b] < t1 and ends[b] > t0}
    return pairs


@pytest.mark.parametrize("fold,splits,block_n,short_n,short_units", [
    (True, 3, 16, 0, 0), (False, 3, 16, 0, 0), (True, 12, 16, 0, 0),
    (True, 3, 32, 16, 3), (False, 3, 32, 16, 3), (True, 3, 32, 16, 2)])
def test_decode_deals_tiles_evenly_and_merges_only_written_slots(fold, splits, block_n, short_n, short_units):
    """The batch's int2 tiles are dealt evenly to num_splits * B programs per head tile, a share
    crossing sequences writing one partial result for each (program p's for sequence b at slot
    p + b); the merge reads those slots and the tail's only. The workspace starts as NaN, so a slot
    merged but never written shows. Sequences of 0 to 15 tiles of 16 positions, two without int2
    tiles (all sinks and window), with 5 sinks and a window of 20; 3 programs per sequence (18 for
    43 tiles) or 12 (72 programs: the first 43 take one tile each, the others none and write nothing).
    Short shares (short_n 16, block_n 32): the 43 tiles of 16 average 2.4 per program, so with
    short_units 3 the launch deals tiles of 16, with short_units 2 tiles of 32 (23)."""
    D, Hq, Hkv, S, R = 128, 8, 2, 5, 20
    L = SlotLayout(D, 64)
    seq_lens = [S + R + 200, 3, 0, S + R + 17, 250, S + R + 16 * 12 - 3]
    cache, bt, written = paged_cache(L, seq_lens, Hkv, 16)
    k_win, v_win, wbt = window_cache(written, Hkv, D, 7)
    c = 3.0 * torch.randn(Hkv, D, device=DEVICE)
    q = torch.randn(len(seq_lens), Hq, D, device=DEVICE)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    B, slots = len(seq_lens), partial_slots(splits, S, R)
    ws = (torch.full((B * Hq * slots * D,), float("nan"), device=DEVICE),
          torch.full((B * Hq * slots,), float("nan"), device=DEVICE))
    out = int2_decode(q, cache, bt, sl, L, D ** -0.5, splits, k_center=c, sinks=S, window=(k_win, v_win, wbt, R),
                      workspace=ws, fold=fold, block_n=block_n, short_n=short_n, short_units=short_units)
    assert torch.isfinite(out).all() and (out[2] == 0).all()
    for b, n in enumerate(seq_lens):
        if n:
            kq, vq = R_.gather_sequence(cache, bt[b], n, L)
            cut = max(0, n - R)
            k = R_._center_sinks(torch.cat([kq[:cut], written[b][0][cut:].to(torch.bfloat16).float()]), S, c)
            v = torch.cat([vq[:cut], written[b][1][cut:].to(torch.bfloat16).float()])
            # the splits read [min(S, cut), cut); the folded tile scores them with the rounded query
            ref = R_.attend(q[b:b + 1], k, v, D ** -0.5, q_folded=R_.query_codes(q[b:b + 1], D ** -0.5) if fold else None,
                            folded_keys=(min(S, cut), cut))
            torch.testing.assert_close(out[b:b + 1].float(), ref, atol=ATOL, rtol=0)
    # the split slots written are exactly the balanced shares' (tiles from position 0: 5 sinks < 16)
    unit = short_n if short_n and short_units * splits * B >= 43 else block_n
    tiles = [-(-max(n - R, 0) // unit) for n in seq_lens]
    assert tiles == ([13, 0, 0, 2, 15, 13] if unit == 16 else [7, 0, 0, 1, 8, 7])
    P = splits * B
    written_slots = (~torch.isnan(ws[1].view(Hq, B * slots)[0, :P + B])).nonzero().flatten().tolist()
    assert written_slots == sorted(p + b for p, b in split_shares(tiles, P))


@pytest.mark.parametrize("block_n,short_n,short_units", [(64, 8, 4), (64, 48, 4), (32, 16, -1)])
def test_decode_rejects_short_tiles_it_cannot_run(block_n, short_n, short_units):
    """Short tiles below the tensor cores' K of 16 (they compile under the interpreter but not on
    the GPU), not dividing block_n, or a negative share: a ValueError naming the arguments."""
    D, Hq, Hkv = 64, 2, 1
    L = SlotLayout(D, 32)
    cache, bt, _ = paged_cache(L, [40], Hkv, 16)
    q = torch.randn(1, Hq, D, device=DEVICE)
    sl = torch.tensor([40], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="short_n must divide block_n and be >= 16"):
        int2_decode(q, cache, bt, sl, L, D ** -0.5, 2, block_n=block_n, short_n=short_n, short_units=short_units)


def test_decode_balances_a_batch_of_more_than_64_sequences():
    """The split programs and the merge walk the batch's lengths 64 sequences at a time
    (batch_tiles): 130 sequences of 0 to 40 tokens (empty ones among them, across the 64 and 128
    boundaries), 2 programs per sequence, against the reference; the NaN workspace shows a slot
    merged but never written. (The walk is the same for either tile: the folded one here.)"""
    D, G, Hq, Hkv, BS, fold = 64, 32, 2, 1, 16, True
    L = SlotLayout(D, G)
    g = torch.Generator().manual_seed(5)
    seq_lens = torch.randint(0, 41, (130,), generator=g).tolist()
    seq_lens[63] = seq_lens[64] = seq_lens[128] = 0
    cache, bt, _ = paged_cache(L, seq_lens, Hkv, BS)
    q = torch.randn(len(seq_lens), Hq, D, device=DEVICE)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE)
    B, slots = len(seq_lens), partial_slots(2, 0, 0)
    ws = (torch.full((B * Hq * slots * D,), float("nan"), device=DEVICE),
          torch.full((B * Hq * slots,), float("nan"), device=DEVICE))
    out = int2_decode(q, cache, bt, sl, L, D ** -0.5, 2, workspace=ws, fold=fold, block_n=16)
    assert torch.isfinite(out).all() and (out[sl == 0] == 0).all()
    keep = sl > 0
    ref = R_.decode_reference(q[keep], cache, bt[keep], sl[keep], L, D ** -0.5, folded=fold)
    torch.testing.assert_close(out[keep].float(), ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize("R,S", [(1, 0), (2, 0), (33, 0), (300, 0), (33, 7), (2, 7)])
def test_prefill_reads_the_prefix_window_in_full_precision(R, S):
    """Chunks after a prefix: prefix positions >= prefix - (R - 1) come from the window cache (the
    window of the chunk's first token), older ones from int2; chunks crossing the window edge,
    a prefix shorter than the window, and an empty prefix. With S sinks (per-sequence offsets),
    prefix positions < S get -q.c wherever they are read from (int2 or window)."""
    D, Hq, Hkv = 64, 6, 2
    L = SlotLayout(D, 32)
    prefixes, chunks = [40, 0, 5, 130], [9, 4, 20, 1]
    total = [p + c for p, c in zip(prefixes, chunks)]
    cache, bt, written = paged_cache(L, total, Hkv, 16)
    k_win, v_win, wbt = window_cache(written, Hkv, D, 3)
    T = sum(chunks)
    q = torch.randn(T, Hq, D, device=DEVICE)
    k = torch.cat([w[0][p:] for w, p in zip(written, prefixes)])
    v = torch.cat([w[1][p:] for w, p in zip(written, prefixes)])
    qsl = torch.tensor([0] + list(torch.tensor(chunks).cumsum(0)), dtype=torch.int32, device=DEVICE)
    sl = torch.tensor(total, dtype=torch.int32, device=DEVICE)
    c = 3.0 * torch.randn(len(prefixes), Hkv, D, device=DEVICE)
    out = int2_prefill(q, k, v, cache, bt, qsl, sl, max(chunks), L, D ** -0.5, block_m=16, block_n=16,
                       window=(k_win, v_win, wbt, R), sinks=S, k_center=c if S else None)
    for b, p in enumerate(prefixes):
        s0, e0 = int(qsl[b]), int(qsl[b + 1])
        kq, vq = R_.gather_sequence(cache, bt[b], p, L)
        cut = max(0, p - (R - 1))
        prefix = R_._center_sinks(torch.cat([kq[:cut], written[b][0][cut:p].to(torch.bfloat16).float()]), S, c[b])
        kp = torch.cat([prefix, k[s0:e0]])
        vp = torch.cat([vq[:cut], written[b][1][cut:p].to(torch.bfloat16).float(), v[s0:e0]])
        ref = R_.attend(q[s0:e0], kp, vp, D ** -0.5, causal_offset=p)
        torch.testing.assert_close(out[s0:e0].float(), ref, atol=ATOL, rtol=0)


def test_window_boundary_prefill_of_last_token_equals_decode():
    """Token exactly at L - R: decode of position L-1 reads [L-R, L) in full precision; a one-token
    prefill at L-1 reads prefix [L-R, L-1) from the window and itself from the chunk: the same."""
    D, Hq, Hkv, R = 128, 4, 2, 24
    L = SlotLayout(D, 32)
    n = 90
    cache, bt, written = paged_cache(L, [n], Hkv, 16)
    written = [(w[0].to(torch.bfloat16).float(), w[1].to(torch.bfloat16).float()) for w in written]
    k_win, v_win, wbt = window_cache(written, Hkv, D, 5)
    q = torch.randn(1, Hq, D, device=DEVICE)
    sl = torch.tensor([n], dtype=torch.int32, device=DEVICE)
    dec = int2_decode(q, cache, bt, sl, L, D ** -0.5, 2, window=(k_win, v_win, wbt, R))
    qsl = torch.tensor([0, 1], dtype=torch.int32, device=DEVICE)
    pre = int2_prefill(q, written[0][0][n - 1:], written[0][1][n - 1:], cache, bt, qsl, sl, 1, L, D ** -0.5,
                       window=(k_win, v_win, wbt, R))
    torch.testing.assert_close(pre.float(), dec.float(), atol=ATOL, rtol=0)
    # and the window matters: without it the int2 keys give a different answer
    # (the 2-bit error here is ~0.1, far above both tolerances: 1e-4 interpreted, 2e-2 compiled fp16)
    assert (int2_decode(q, cache, bt, sl, L, D ** -0.5, 2).float() - dec.float()).abs().max() > 0.05


def test_prefill_of_last_token_equals_decode():
    """A one-token extend over the cache equals decode over the same tokens once that token is
    stored (the prefill sees it in full precision, decode quantized: compare to each reference)."""
    L = SlotLayout(128, 32)
    cache, bt, _ = paged_cache(L, [120], 2, 16)
    q = torch.randn(1, 8, 128, device=DEVICE)
    k = torch.randn(1, 2, 128, device=DEVICE)
    v = torch.randn(1, 2, 128, device=DEVICE)
    qsl = torch.tensor([0, 1], dtype=torch.int32, device=DEVICE)
    sl = torch.tensor([121], dtype=torch.int32, device=DEVICE)
    pre = int2_prefill(q, k, v, cache, bt, qsl, sl, 1, L, 128 ** -0.5, block_m=16, block_n=32)
    torch.testing.assert_close(pre.float(), R.prefill_reference(q, k, v, cache, bt, qsl, sl, L, 128 ** -0.5),
                               atol=ATOL, rtol=0)
    int2_store(k, v, torch.tensor([int(bt[0, 120 // 16]) * 16 + 120 % 16], device=DEVICE), cache, L)
    dec = int2_decode(q, cache, bt, sl, L, 128 ** -0.5, 2)
    torch.testing.assert_close(dec.float(), R.decode_reference(q, cache, bt, sl, L, 128 ** -0.5),
                               atol=ATOL, rtol=0)
    assert (dec.float() - pre.float()).abs().max() < 0.5   # same attention up to 2-bit noise


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_window_store_writes_slots_and_skips_padding(dtype):
    """window_store copies each new token's K/V to its window slot in the [pages, block, Hkv, K|V]
    cache exactly (a dtype copy), and leaves everything else alone (slot -1: padding)."""
    from aphrodite_int2kv.kernels.store import window_store

    T, H, D, WBS = 5, 2, 64, 3
    k = torch.randn(T, H, D, device=DEVICE).to(dtype)
    v = torch.randn(T, H, D, device=DEVICE).to(dtype)
    cache = torch.full((4, WBS, H, 2 * D), 7.0, device=DEVICE, dtype=dtype)
    slots = torch.tensor([4, -1, 11, 0, -1], device=DEVICE)
    window_store(k, v, slots, cache[..., :D], cache[..., D:])
    flat = cache.view(4 * WBS, H, 2 * D)
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            assert torch.equal(flat[s, :, :D], k[t]) and torch.equal(flat[s, :, D:], v[t])
    untouched = [i for i in range(4 * WBS) if i not in (4, 11, 0)]
    assert bool((flat[untouched] == 7.0).all())
