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


@pytest.mark.parametrize("D,T,k_bits", [(64, 32, 3), (64, 64, 3), (128, 32, 3), (128, 64, 3), (256, 64, 3),
                                        (64, 64, 4), (128, 64, 4), (256, 64, 4)])
def test_tile_store_writes_the_reference_records_byte_for_byte(D, T, k_bits):
    g = torch.Generator().manual_seed(D + T)
    L = TileLayout(D, T, k_bits)
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


def test_tile_store_takes_no_tiles():
    """A step that completes no tile (a prefill after a prefix hit, inside one tile) stores nothing,
    whatever strides the empty gather has."""
    layout = TileLayout(128, 64)
    records = torch.zeros(2, 2, layout.tile_bytes, dtype=torch.uint8, device=DEVICE)
    empty = torch.empty(0, 64, 2, 128, device=DEVICE).transpose(1, 2).contiguous()
    tile_store(empty, empty, torch.zeros(0, dtype=torch.int32, device=DEVICE),
               torch.zeros(0, dtype=torch.int64, device=DEVICE), records, layout)
    assert (records == 0).all()
