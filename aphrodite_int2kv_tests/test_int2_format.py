"""Format, quantizer and rotation (plain torch)."""

from __future__ import annotations

import pytest
import torch

from aphrodite_int2kv.int2 import quantizer as Q
from aphrodite_int2kv.int2.format import Int2ConfigError, SlotLayout
from aphrodite_int2kv.int2.rotation import (hadamard, load_rotation_file, orthogonality_error,
                                            save_rotation_file)


@pytest.mark.parametrize("D,G,expect_bytes,expect_bits", [
    (128, 32, 96, 3.0), (128, 64, 80, 2.5), (128, 128, 80, 2.5), (256, 32, 192, 3.0),
    (256, 128, 144, 2.25), (256, 256, 144, 2.25), (64, 32, 48, 3.0), (64, 64, 48, 3.0)])
def test_slot_sizes(D, G, expect_bytes, expect_bits):
    L = SlotLayout(D, G)
    assert L.slot_bytes == expect_bytes and L.slot_bytes % 16 == 0
    assert L.bits_per_element() == expect_bits
    assert L.used_bytes == D // 2 + 8 * (D // G)
    assert L.v_zero + 2 * L.num_groups == L.used_bytes


@pytest.mark.parametrize("D,G", [(128, 48), (128, 512), (64, 128), (30, 32)])
def test_bad_layouts_are_refused_with_a_reason(D, G):
    with pytest.raises(Int2ConfigError, match="int2 KV"):
        SlotLayout(D, G)


def test_pack_unpack_roundtrip():
    codes = torch.randint(0, 4, (5, 3, 128), dtype=torch.uint8)
    packed = Q.pack_planar(codes)
    assert packed.shape == (5, 3, 32)
    assert torch.equal(Q.unpack_planar(packed), codes)
    # planar: byte j holds element j in bits 0-1 and element j + 96 in bits 6-7
    assert int(packed[0, 0, 7]) & 3 == int(codes[0, 0, 7])
    assert int(packed[0, 0, 7]) >> 6 == int(codes[0, 0, 7 + 96])


@pytest.mark.parametrize("G", [32, 64, 128])
def test_uniform_error_bound(G):
    torch.manual_seed(0)
    x = torch.randn(64, 128) * torch.rand(64, 1) * 10
    codes, scale, zero = Q.quantize_groups(x, G)
    xh = Q.dequantize_groups(codes, scale, zero, G)
    step = scale.float().repeat_interleave(G, -1)
    # half a step of rounding, plus fp16 rounding of scale and zero
    bound = step / 2 + step * 3 * 2 ** -10 + zero.float().abs().repeat_interleave(G, -1) * 2 ** -10 + 1e-6
    assert ((x - xh).abs() <= bound).all()
    assert codes.max() <= 3


def test_clipping_trades_range_for_resolution():
    torch.manual_seed(0)
    x = torch.randn(4096, 32)
    e1 = (Q.fake_quantize(x, 32, clip=1.0) - x).pow(2).mean()
    e9 = (Q.fake_quantize(x, 32, clip=0.85) - x).pow(2).mean()
    assert e9 < e1  # on Gaussian data a little clipping lowers MSE


def test_lloyd_max_beats_uniform_on_gaussian_groups():
    torch.manual_seed(0)
    x = torch.randn(4096, 128)
    eu = (Q.fake_quantize(x, 128) - x).pow(2).mean()
    el = (Q.fake_quantize(x, 128, lloyd_max=True) - x).pow(2).mean()
    assert el < eu * 0.8


@pytest.mark.parametrize("lloyd,std", [(False, False), (True, False), (False, True)])
def test_constant_group_is_exact(lloyd, std):
    x = torch.full((2, 64), 0.375)  # representable in fp16
    x[1] = -7.5
    assert torch.equal(Q.fake_quantize(x, 32, lloyd_max=lloyd, std_range=std), x)


def test_std_range_matches_lloyd_max_on_gaussian_groups_with_uniform_levels():
    """Uniform levels spaced 0.9957 std around the mean: the optimal uniform 4-level quantizer of a
    normal (MSE 0.1188 of the variance vs Lloyd-Max 0.1175, min/max ~0.2 at G = 128), decoded
    with the min/max formula (level = code)."""
    torch.manual_seed(0)
    x = torch.randn(4096, 128) * 3 + 1
    var = x.var(-1, keepdim=True)
    mse = {name: ((Q.fake_quantize(x, 128, **kw) - x).pow(2) / var).mean().item()
           for name, kw in (("minmax", {}), ("lloyd", {"lloyd_max": True}), ("std", {"std_range": True}))}
    assert abs(mse["std"] - 0.1188) < 0.01 and abs(mse["lloyd"] - 0.1175) < 0.01, mse
    assert mse["std"] < 0.7 * mse["minmax"], mse
    codes, scale, zero = Q.quantize_groups(x, 128, std_range=True)
    assert torch.equal(Q.dequantize_groups(codes, scale, zero, 128),     # plain uniform decode
                       codes.float() * scale.float().repeat_interleave(128, -1)
                       + zero.float().repeat_interleave(128, -1))


def test_non_finite_input_is_sanitized():
    x = torch.randn(3, 64)
    x[0, 5] = float("nan")
    x[1, 7] = float("inf")
    x[2, 9] = float("-inf")
    out = Q.fake_quantize(x, 32)
    assert torch.isfinite(out).all()
    assert out[1, 7] > 60000 and out[2, 9] < -60000


def test_lloyd_and_clip_conflict_is_an_error():
    with pytest.raises(Int2ConfigError, match="Lloyd-Max"):
        Q.quantize_groups(torch.randn(2, 32), 32, clip=0.9, lloyd_max=True)
    with pytest.raises(Int2ConfigError, match="std range"):
        Q.quantize_groups(torch.randn(2, 32), 32, clip=0.9, std_range=True)
    with pytest.raises(Int2ConfigError, match="pick one"):
        Q.quantize_groups(torch.randn(2, 32), 32, lloyd_max=True, std_range=True)
    with pytest.raises(Int2ConfigError, match="clip ratio"):
        Q.quantize_groups(torch.randn(2, 32), 32, clip=1.5)


def test_slot_encode_decode_roundtrip():
    torch.manual_seed(0)
    L = SlotLayout(128, 32)
    k, v = torch.randn(7, 2, 128), torch.randn(7, 2, 128)
    slots = Q.encode_slots(k, v, L)
    assert slots.shape == (7, 2, 96) and slots.dtype == torch.uint8
    kd, vd = Q.decode_slots(slots, L)
    assert torch.allclose(kd, Q.fake_quantize(k, 32)) and torch.allclose(vd, Q.fake_quantize(v, 32))


@pytest.mark.parametrize("D", [64, 128, 256, 96, 80])
def test_hadamard_is_orthogonal(D):
    H = hadamard(D)
    assert H.shape == (D, D) and orthogonality_error(H) < 1e-5
    if D & (D - 1) == 0:
        assert torch.allclose(H.abs(), torch.full((D, D), D ** -0.5))


def test_hadamard_refuses_dims_without_a_usable_block():
    with pytest.raises(Int2ConfigError, match="head_dim 40"):
        hadamard(40)


def _outlier_keys(D):
    """K [512, 2, D] with 4 large outlier channels (as post-RoPE keys have), V [512, 2, D], q [4, 8, D]."""
    k, v, q = torch.randn(512, 2, D), torch.randn(512, 2, D), torch.randn(4, 8, D)
    ch = torch.randperm(D)[:4]
    k[:, :, ch] = k[:, :, ch] * 8 + torch.randn(4) * 10
    return k, v, q


def test_rotation_lowers_attention_error_on_channel_outliers():
    """Attention output vs fp32 when K has a few large outlier channels (as post-RoPE keys do)."""
    from aphrodite_int2kv.int2.reference import attend

    torch.manual_seed(0)
    D, H = 128, hadamard(128)
    plain_err, rot_err = [], []
    for _ in range(3):
        k, v, q = _outlier_keys(D)
        ref = attend(q, k, v, D ** -0.5)
        plain = attend(q, Q.fake_quantize(k, 32), Q.fake_quantize(v, 32), D ** -0.5)
        rot = attend(q @ H, Q.fake_quantize(k @ H, 32), Q.fake_quantize(v @ H, 32), D ** -0.5) @ H.T
        plain_err.append(((plain - ref).norm() / ref.norm()).item())
        rot_err.append(((rot - ref).norm() / ref.norm()).item())
    assert sum(rot_err) < 0.6 * sum(plain_err), (plain_err, rot_err)


def test_decode_query_rounding_adds_little_to_the_int2_error():
    """The folded decode tile scores int2 keys with the query rounded to int8 at a power-of-two
    step per row (reference.query_codes): the largest entry lands on 64..127, every entry within
    half a step, and on keys with outlier channels the attention error vs fp32 grows by < 5 % of
    the 2-bit error it already has."""
    from aphrodite_int2kv.int2.reference import LOG2E, attend, query_codes

    torch.manual_seed(1)
    D, H = 128, hadamard(128)
    q = 3.0 * torch.randn(4, 8, D)
    qh = query_codes(q, D ** -0.5)
    c = D ** -0.5 * LOG2E
    step = 2.0 ** (torch.floor(torch.log2((q * c).abs().amax(-1, keepdim=True))) - 6)
    ints = qh * c / step
    assert (ints - ints.round()).abs().max() < 1e-3           # (qh is back in q's units: / c, * c)
    ints = ints.round()
    assert ints.abs().amax(-1).ge(64).all() and ints.abs().max() <= 127
    assert ((qh - q) * c).abs().le(step / 2 + 1e-6).all() and not torch.equal(qh, q)
    base, rounded = [], []
    for _ in range(3):
        k, v, q = _outlier_keys(D)
        ref = attend(q, k, v, D ** -0.5)
        kq, vq = Q.fake_quantize(k @ H, 32), Q.fake_quantize(v @ H, 32)
        plain = attend(q @ H, kq, vq, D ** -0.5) @ H.T
        qr = query_codes(q @ H, D ** -0.5)
        folded = attend(q @ H, kq, vq, D ** -0.5, q_folded=qr, folded_keys=(0, 512)) @ H.T
        base.append(((plain - ref).norm() / ref.norm()).item())
        rounded.append(((folded - ref).norm() / ref.norm()).item())
    assert sum(rounded) < 1.05 * sum(base), (base, rounded)
    assert rounded != base


def _write(tmp_path, layers, name="rot.pt"):
    path = tmp_path / name
    torch.save({"layers": layers}, path)
    return str(path)


def test_rotation_file_roundtrip_per_layer_and_per_head(tmp_path):
    q, _ = torch.linalg.qr(torch.randn(2, 64, 64))
    path = str(tmp_path / "k.pt")
    save_rotation_file(path, {3: hadamard(64), 7: q})
    rots = load_rotation_file(path, 64, 2, [3, 7])
    assert rots[3]["rotation"].shape == (1, 64, 64) and rots[7]["rotation"].shape == (2, 64, 64)


@pytest.mark.parametrize("entry,match", [
    (torch.eye(32), r"layer 0: rotation has shape \[1, 32, 32\], expected \[64, 64\]"),
    (torch.full((64, 64), float("nan")), "layer 0: rotation contains NaN"),
    (torch.eye(64) * 1.1, "layer 0: rotation is not orthogonal"),
    (torch.stack([torch.eye(64)] * 3), r"expected \[64, 64\] or \[2, 64, 64\]"),
])
def test_rotation_file_errors_name_file_layer_and_problem(tmp_path, entry, match):
    path = _write(tmp_path, {0: {"rotation": entry}})
    with pytest.raises(Int2ConfigError, match=match) as err:
        load_rotation_file(path, 64, 2, [0])
    assert path in str(err.value)


def test_rotation_file_missing_layer_and_missing_file(tmp_path):
    path = _write(tmp_path, {0: {"rotation": torch.eye(64)}})
    with pytest.raises(Int2ConfigError, match=r"no entry for attention layer\(s\) \[4\]"):
        load_rotation_file(path, 64, None, [0, 4])
    with pytest.raises(Int2ConfigError, match="does not exist"):
        load_rotation_file(str(tmp_path / "nope.pt"), 64, None, [0])
    bad = tmp_path / "bad.pt"
    bad.write_text("not a torch file")
    with pytest.raises(Int2ConfigError, match="cannot be read"):
        load_rotation_file(str(bad), 64, None, [0])


def test_rotation_file_heads_are_split_across_tensor_parallel_ranks(tmp_path):
    """A calibrated file covers all KV heads; each TP rank must load its own heads (and offsets)."""
    from aphrodite_int2kv.int2.rotation import load_rotation_file, save_rotation_file, select_local_heads

    D, H = 64, 4
    rots = torch.stack([torch.linalg.qr(torch.randn(D, D))[0] for _ in range(H)])
    offs = torch.arange(H, dtype=torch.float32)[:, None].expand(H, D).contiguous()
    path = str(tmp_path / "k.pt")
    save_rotation_file(path, {0: rots}, {0: {"k_offset": offs}})
    for rank in range(2):
        got = load_rotation_file(path, D, 2, [0], tp=(rank, 2))[0]
        torch.testing.assert_close(got["rotation"], rots[2 * rank:2 * rank + 2])
        assert got["k_offset"][:, 0].tolist() == [2 * rank, 2 * rank + 1]
    # 2 KV heads over 4 ranks: each head replicated on two ranks
    assert [int(select_local_heads(offs[:2], 1, r, 4)[0, 0]) for r in range(4)] == [0, 0, 1, 1]
    # a shared rotation stays shared; a head count that fits no split is reported
    assert select_local_heads(rots[:1], 2, 1, 2).shape[0] == 1
    with pytest.raises(Exception, match="rotation has shape"):
        load_rotation_file(path, D, 3, [0], tp=(0, 2))


@pytest.mark.parametrize("D,G,shift", [(128, 64, 16), (128, 128, 16), (64, 32, 16), (64, 64, 16), (256, 256, 16),
                                       (128, 32, 0), (256, 64, 0), (256, 32, 0)])
def test_odd_slots_start_their_codes_on_sector_boundaries(D, G, shift):
    """docs/format.md "odd slots": in a heads-first page, with odd page offsets' slots rotated,
    every token's K and V code runs touch as few 32-byte sectors as their size allows, and the stored bytes are
    the logical slot rolled by odd_shift (read back exactly)."""
    from aphrodite_int2kv.int2.format import rotate_odd_slots

    L = SlotLayout(D, G)
    assert L.odd_shift == shift
    def sectors(first, size):
        return (first + size - 1) // 32 - first // 32 + 1

    for t in range(64):                        # token offset in a page, one head's run
        start = t * L.slot_bytes + (t % 2) * L.odd_shift
        for run in (start, start + L.v_codes):  # K codes, V codes: no run straddles a sector more than it must
            assert sectors(run, L.code_bytes) == -(-L.code_bytes // 32), (t, run)
    slots = torch.randint(0, 256, (4, 3, L.slot_bytes), dtype=torch.uint8)
    offsets = torch.tensor([0, 1, 6, 7])
    stored = rotate_odd_slots(slots, offsets, L)
    assert torch.equal(stored[0::2], slots[0::2])
    assert torch.equal(stored[1::2], torch.roll(slots[1::2], shift, -1))
    assert torch.equal(rotate_odd_slots(stored, offsets, L, stored=False), slots)
