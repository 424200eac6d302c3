"""The tile store kernel (kernels/tile_store.py) against the channel-tile format's torch reference
(int2/tile_format.py encode_tile), byte for byte; its e4m3 encoder against torch's. Interpreted on
a CPU host, compiled on a GPU (benchmarks/gpu_tests.py runs this file there)."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from aphrodite_int2kv.int2.tile_format import TileLayout, encode_tile
from aphrodite_int2kv.kernels.tile_store import _e4m3, tile_store
from aphrodite_int2kv_tests.conftest import DEVICE


@pytest.mark.parametrize("D,T", [(64, 32), (64, 64), (128, 32), (128, 64), (256, 64)])
def test_tile_store_writes_the_reference_records_byte_for_byte(D, T):
    g = torch.Generator().manual_seed(D + T)
    L = TileLayout(D, T)
    N, H = 4, 2
    k = torch.randn(N, H, T, D, generator=g) * 2 + 3 * torch.randn(1, H, 1, D, generator=g)
    v = torch.randn(N, H, T, D, generator=g)
    k[0, :, 0] *= 40                                  # a loud sink
    k[3, 0, 5, 7], k[3, 1, 6, 8], v[3, 0, 2, 3] = float("nan"), float("inf"), -float("inf")
    excl = torch.tensor([4, 0, T, 0], dtype=torch.int32)          # sinks, none, a tile of sinks only
    dest = torch.tensor([3, 0, 1, -1], dtype=torch.int64)         # out of order; the last one skipped
    rec = torch.full((4, H, L.tile_bytes), 0xAB, dtype=torch.uint8)
    tile_store(*(x.to(DEVICE) for x in (k, v, excl, dest)), rec_dev := rec.to(DEVICE), L)
    rec = rec_dev.cpu()
    for n in range(3):
        ref = encode_tile(k[n], v[n], L, exclude=torch.arange(T) < excl[n])
        assert torch.equal(rec[dest[n], :, :L.used_bytes], ref[:, :L.used_bytes]), (n, (rec[dest[n]] != ref).sum())
    assert (rec[2] == 0xAB).all()                                  # the skipped tile wrote nothing


def test_tile_store_refuses_mismatched_shapes():
    L = TileLayout(128, 32)
    k = torch.zeros(1, 2, 32, 128)
    with pytest.raises(ValueError, match=r"expected \[N, H, 32, 128\]"):
        tile_store(k[:, :, :16], k[:, :, :16], torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int64),
                   torch.zeros(1, 2, L.tile_bytes, dtype=torch.uint8), L)
    with pytest.raises(ValueError, match="records must be contiguous uint8"):
        tile_store(k, k, torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int64),
                   torch.zeros(1, 3, L.tile_bytes, dtype=torch.uint8), L)


@triton.jit
def _e4m3_probe(x_ptr, code_ptr, value_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    code, value = _e4m3(tl.load(x_ptr + i))
    tl.store(code_ptr + i, code)
    tl.store(value_ptr + i, value)


def test_e4m3_encoder_rounds_as_torch_does():
    """Every e4m3 value, every midpoint between neighbours (ties go to the even code), and random
    values in and below the subnormal range: the same byte and value as torch's conversion."""
    vals = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    finite = vals[torch.isfinite(vals) & (vals.abs() <= 448)]
    pos = finite[finite >= 0].unique().sort().values
    mids = (pos[1:] + pos[:-1]) / 2
    rnd = torch.cat([torch.rand(2000, generator=torch.Generator().manual_seed(0)) * 448,
                     torch.rand(1000, generator=torch.Generator().manual_seed(1)) * 0.02])
    x = torch.cat([pos, -pos, mids, -mids, rnd, -rnd])
    n = triton.next_power_of_2(x.numel())
    x = torch.nn.functional.pad(x, (0, n - x.numel()))
    code = torch.empty(n, dtype=torch.int32, device=DEVICE)
    value = torch.empty(n, dtype=torch.float32, device=DEVICE)
    _e4m3_probe[(1,)](x.to(DEVICE), code, value, N=n)
    want = x.to(torch.float8_e4m3fn)
    assert torch.equal(code.cpu().to(torch.uint8), want.view(torch.uint8))
    assert torch.equal(value.cpu(), want.float())


@pytest.mark.parametrize("D,T", [(64, 32), (128, 64)])
def test_tile_decode_is_attention_over_the_decoded_tiles(D, T):
    """The tile decode kernel (kernels/tile_decode.py) against attention over what the records
    decode to (int2/tile_format.py), per sequence and KV head: the output and the log-sum-exp that
    a caller merges with the recent window's part. Sequences of several tiles, a last partial tile,
    records in shuffled rows, and a sequence with no token in tiles."""
    from aphrodite_int2kv.int2.tile_format import decode_tile
    from aphrodite_int2kv.kernels.tile_decode import tile_decode

    g = torch.Generator().manual_seed(D)
    L = TileLayout(D, T)
    H, R = 2, 16
    tokens = torch.tensor([3 * T, T + 5, 0, T], dtype=torch.int32)
    ntiles = [-(-int(n) // T) for n in tokens]
    rows = torch.randperm(sum(ntiles), generator=g)
    table = torch.zeros(len(tokens), max(ntiles), dtype=torch.int32)
    records = torch.zeros(sum(ntiles), H, L.tile_bytes, dtype=torch.uint8)
    kv = []
    at = 0
    for b, nt in enumerate(ntiles):
        k = torch.randn(nt, H, T, D, generator=g) * 2 + torch.randn(1, H, 1, D, generator=g)
        v = torch.randn(nt, H, T, D, generator=g)
        for i in range(nt):
            records[rows[at]] = encode_tile(k[i], v[i], L, exclude=torch.arange(T) < (4 if i == 0 else 0))
            table[b, i] = rows[at]
            at += 1
        kv.append(nt)
    q = torch.randn(len(tokens), H, R, D, generator=g)
    out, lse = tile_decode(q.to(DEVICE), records.to(DEVICE), table.to(DEVICE), tokens.to(DEVICE), L, D ** -0.5)
    out, lse = out.cpu(), lse.cpu()
    for b, n in enumerate(tokens.tolist()):
        if n == 0:
            assert torch.isinf(lse[b]).all() and (lse[b] < 0).all() and (out[b] == 0).all()
            continue
        kd, vd = decode_tile(records[table[b, :ntiles[b]].long()], L)        # [nt, H, T, D]
        kd = kd.transpose(0, 1).reshape(H, -1, D)[:, :n]
        vd = vd.transpose(0, 1).reshape(H, -1, D)[:, :n]
        s = q[b] @ kd.transpose(-1, -2) * D ** -0.5                           # [H, R, n]
        assert torch.allclose(lse[b], s.logsumexp(-1), atol=1e-4, rtol=1e-5)
        assert torch.allclose(out[b], s.softmax(-1) @ vd, atol=1e-4, rtol=1e-4)


def test_the_kernels_compute_what_the_harness_measured():
    """One decode step of a sequence through the kernels (tile_store on the tiles that left the
    window, tile_decode over them without the sinks, the sinks and the window in full precision,
    merged by log-sum-exp) gives the harness's attention for the measured scheme (K3 / V2 channel
    tiles of 32, 8-bit metadata, 4 sinks, recent 128) at that step, GQA 3 query heads per KV head."""
    from aphrodite_int2kv.int2.rotation import hadamard
    from aphrodite_int2kv.kernels.tile_decode import tile_decode
    from aphrodite_int2kv.quality.schemes import KVTransform, Scheme, attention_fn

    g = torch.Generator().manual_seed(7)
    N, Hq, Hkv, D, T, W, S = 300, 6, 2, 64, 32, 128, 4
    q = torch.randn(N, Hq, D, generator=g)
    k = torch.randn(N, Hkv, D, generator=g) * 2 + torch.randn(1, Hkv, D, generator=g)
    v = torch.randn(N, Hkv, D, generator=g)
    scheme = Scheme("t", "tiles", k_bits=3, v_bits=2, tile=T, v_tiles=True, meta_bits=8, sink=S, recent=W)
    want = attention_fn(scheme, KVTransform(scheme, D, Hkv, 1), D ** -0.5)(0, q, k, v)[N - 1]      # [Hq, D]

    t = N - 1
    n = (t - W + 1) // T * T                       # tokens in tiles that left the window whole
    H = hadamard(D)
    kr, vr = k @ H, v @ H
    L = TileLayout(D, T)
    tiles_k = kr[:n].reshape(n // T, T, Hkv, D).transpose(1, 2).contiguous()
    tiles_v = vr[:n].reshape(n // T, T, Hkv, D).transpose(1, 2).contiguous()
    records = torch.zeros(n // T, Hkv, L.tile_bytes, dtype=torch.uint8, device=DEVICE)
    excl = torch.tensor([S] + [0] * (n // T - 1), dtype=torch.int32)
    tile_store(tiles_k.to(DEVICE), tiles_v.to(DEVICE), excl.to(DEVICE),
               torch.arange(n // T, device=DEVICE), records, L)
    R = 16
    qr = torch.zeros(1, Hkv, R, D)
    qr[0, :, :Hq // Hkv] = (q[t] @ H).view(Hkv, Hq // Hkv, D)
    out, lse = tile_decode(qr.to(DEVICE), records, torch.arange(n // T, dtype=torch.int32, device=DEVICE)[None],
                           torch.tensor([n], dtype=torch.int32, device=DEVICE), L, D ** -0.5, sinks=S)
    out, lse = out.cpu()[0, :, :Hq // Hkv].reshape(Hq, D), lse.cpu()[0, :, :Hq // Hkv].reshape(Hq)
    full = torch.cat([torch.arange(S), torch.arange(n, t + 1)])                   # sinks + window, bf16 in the engine
    kf, vf = (x[full].repeat_interleave(Hq // Hkv, 1).transpose(0, 1) for x in (kr, vr))
    s = (q[t] @ H)[:, None, :] @ kf.transpose(1, 2) * D ** -0.5                  # [Hq, 1, F]
    lse_f = s.logsumexp(-1)[:, 0]
    out_f = (s.softmax(-1) @ vf)[:, 0]
    m = torch.maximum(lse, lse_f)
    wq, wf = torch.exp(lse - m), torch.exp(lse_f - m)
    got = ((out * wq[:, None] + out_f * wf[:, None]) / (wq + wf)[:, None]) @ H.T
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (got - want).abs().max()


def test_tile_store_takes_no_tiles():
    """A step that completes no tile (a prefill after a prefix hit, inside one tile) stores nothing,
    whatever strides the empty gather has."""
    layout = TileLayout(128, 64)
    records = torch.zeros(2, 2, layout.tile_bytes, dtype=torch.uint8, device=DEVICE)
    empty = torch.empty(0, 64, 2, 128, device=DEVICE).transpose(1, 2).contiguous()
    tile_store(empty, empty, torch.zeros(0, dtype=torch.int32, device=DEVICE),
               torch.zeros(0, dtype=torch.int64, device=DEVICE), records, layout)
    assert (records == 0).all()
