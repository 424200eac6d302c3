"""The long-context suite's parts: the token-tile quantizers (int2/tiles.py), the tile-aware window
the harness reads them through, the chunked attention, and the items (copy, pass key, far windows)."""

from __future__ import annotations

import math

import pytest
import torch

from aphrodite_int2kv.int2 import tiles
from aphrodite_int2kv.int2.format import SlotLayout
from aphrodite_int2kv.int2.quantizer import decode_slots, encode_slots
from aphrodite_int2kv.quality import schemes as S


def _keys(T=96, H=2, D=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    # a per-channel offset (what makes keys hard per token) plus noise
    return torch.randn(T, H, D, generator=g) + 4 * torch.randn(1, H, D, generator=g)


@pytest.mark.parametrize("bits", [2, 3, 4])
@pytest.mark.parametrize("norm_balance", [True, False])
def test_channel_tiles_error_is_at_most_half_a_step_per_channel(bits, norm_balance):
    x = _keys()
    tile = 32
    rec = tiles.channel_tiles(x, tile, bits, norm_balance)
    norm = x.norm(dim=-1, keepdim=True).half().float() if norm_balance else torch.ones(x.shape[0], x.shape[1], 1)
    u, r = (x / norm).reshape(-1, tile, *x.shape[1:]), (rec / norm).reshape(-1, tile, *x.shape[1:])
    step = (u.amax(1, keepdim=True) - u.amin(1, keepdim=True)) / (2 ** bits - 1)
    # fp16 rounding of scale and zero moves the grid by far less than a step
    assert ((u - r).abs() <= step / 2 + 2e-3 * step + 1e-3 * u.abs().amax()).all()
    more = tiles.channel_tiles(x, tile, bits + 1, norm_balance) if bits < 4 else None
    if more is not None:   # one more bit: a smaller error
        assert (more - x).pow(2).mean() < (rec - x).pow(2).mean() / 2


def test_norm_balancing_keeps_one_loud_token_from_setting_the_tile():
    """A token 50x louder than its tile: without norm balancing it stretches every channel's range
    and the other tokens lose their resolution; with it, the rest of the tile is read back as if
    the loud token were ordinary."""
    x = _keys(T=32)
    loud = x.clone()
    loud[5] *= 50
    plain = tiles.channel_tiles(loud, 32, 2, norm_balance=False)
    balanced = tiles.channel_tiles(loud, 32, 2, norm_balance=True)
    others = torch.arange(32) != 5
    err = lambda rec: (rec[others] - x[others]).pow(2).mean() / x[others].pow(2).mean()   # noqa: E731
    assert err(balanced) < 0.1 < err(plain)


def test_excluded_sinks_take_no_part_in_the_tile_ranges():
    x = _keys(T=64)
    wild = x.clone()
    wild[:4] = 1e4 * torch.randn(4, *x.shape[1:])
    sinks = torch.arange(64) < 4
    a = tiles.channel_tiles(wild, 32, 2, exclude=sinks)
    b = tiles.channel_tiles(x, 32, 2, exclude=sinks)
    assert torch.equal(a[4:], b[4:])          # whatever the sinks hold, the rest is coded the same
    assert not torch.equal(tiles.channel_tiles(wild, 32, 2)[4:32], b[4:32])
    only_sinks = tiles.channel_tiles(wild[:4], 32, 2, exclude=sinks[:4])
    assert torch.isfinite(only_sinks).all()


def test_token_groups_at_two_bits_is_the_int2_slot_quantizer():
    """2-bit token groups with std levels are the first int2 format's arithmetic (encode_slots /
    decode_slots, which the store kernel implements bit for bit)."""
    x = _keys(T=40)
    for G in (32, 64):
        kd, vd = decode_slots(encode_slots(x, x, SlotLayout(64, G), std_range=True), SlotLayout(64, G))
        assert torch.equal(tiles.token_groups(x, G, 2), kd)
        assert torch.equal(tiles.token_groups(x, G, 2, levels="minmax"),
                           decode_slots(encode_slots(x, x, SlotLayout(64, G)), SlotLayout(64, G))[0])


def test_bits_per_element_count_codes_metadata_norms_and_the_staging_window():
    assert tiles.channel_tile_bits(3, 64, 128) == 3 + 0.5 + 0.125
    assert tiles.channel_tile_bits(2, 32, 64, norm_balance=False) == 3.0
    s = S.Scheme("t", "tiles", k_bits=3, v_bits=2, tile=64, v_tiles=True, sink=4, recent=128)
    base = (3.625 + 2.625) / 2
    window = 4 + 128 + 64
    assert s.bits_per_element(128, context=32768) == pytest.approx((base * (32768 - window) + 16 * window) / 32768)
    assert s.bits_per_element(128, context=100) == 16.0
    with pytest.raises(ValueError, match="5 bits"):
        tiles.channel_tiles(_keys(), 32, 5)


def test_a_tile_is_read_in_full_precision_until_it_has_left_the_window_whole():
    s = S.Scheme("t", "tiles", tile=32, recent=128, sink=4)
    t = torch.arange(400)[:, None]
    j = torch.arange(400)[None, :]
    full = S.full_precision_mask(s, t, j)
    # tile 0 (tokens 0..31) leaves the window once its last token is 128 behind: from query 159 on
    assert full[158, 10] and not full[159, 10] and full[159, 3]     # token 3 is a sink
    # the recent window itself is always full precision
    assert all(full[q, q - 127:q + 1].all() for q in range(127, 400))
    # every key older than the window and its tile is read quantized
    assert not full[399, 4:240].any() and full[399, 256:].all()


def test_chunked_attention_is_the_whole_matrix_attention(monkeypatch):
    """Chunking the queries (full-precision columns only where the window reaches) gives what one
    chunk over every column gives, and for `fp` plain causal softmax attention."""
    g = torch.Generator().manual_seed(1)
    T, Hq, Hkv, D = 300, 6, 2, 64
    q, k, v = (torch.randn(T, h, D, generator=g) for h in (Hq, Hkv, Hkv))
    for scheme in (S.Scheme("t", "tiles", k_bits=2, v_bits=2, tile=32, recent=64, sink=4),
                   S.Scheme("k", "kivi", recent=64), S.Scheme("fp", "fp")):
        attn = S.attention_fn(scheme, S.KVTransform(scheme, D, Hkv, 1), D ** -0.5)
        monkeypatch.setattr(S, "QUERY_CHUNK", 10_000)
        whole = attn(0, q, k, v)
        monkeypatch.setattr(S, "QUERY_CHUNK", 64)
        assert torch.allclose(attn(0, q, k, v), whole, atol=1e-5)
    kk, vv = (x.repeat_interleave(3, 1).transpose(0, 1) for x in (k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(0, 1), kk, vv, is_causal=True)
    assert torch.allclose(whole, ref.transpose(0, 1), atol=1e-5)
    quantized = S.Scheme("t", "tiles", k_bits=2, v_bits=2, tile=32, recent=64, sink=4)
    far = S.attention_fn(quantized, S.KVTransform(quantized, D, Hkv, 1), D ** -0.5)(0, q, k, v)
    assert torch.allclose(far[:95], whole[:95], atol=1e-5)   # every key still in full precision
    assert not torch.allclose(far[200:], whole[200:], atol=1e-3)


class _Tok:
    """A byte-level stand-in tokenizer for the item builders (the real one is tested through
    the CLI on the real model)."""

    def encode(self, text):
        return type("E", (), {"ids": list(text.encode())})()

    def decode(self, ids):
        return bytes(ids).decode()


def test_copy_items_repeat_the_passage_at_the_distance_and_score_the_second_copy():
    from aphrodite_int2kv.quality.longctx import copy_items

    ids = list(range(300_000))
    (label, seq, rows, targets), = copy_items(ids, [1024], passages=1)
    assert label == "copy@1024" and len(seq) == 256 + 1024 + 256
    assert torch.equal(seq[256:512], seq[256 + 1024:])            # the two copies
    assert torch.equal(seq[rows + 1], targets) and targets.numel() == 256 - 8
    assert len(set(seq[:256 + 1024].tolist())) == 256 + 1024     # nothing else repeats
    with pytest.raises(ValueError, match="shorter than the passage"):
        copy_items(ids, [100])


def test_passkey_items_state_the_key_once_at_its_depth_and_score_its_digits():
    from aphrodite_int2kv.quality.longctx import passkey_items

    tok = _Tok()
    items = passkey_items(tok, 2048, [0.1, 0.9])
    for (label, seq, rows, targets), depth in zip(items, (0.1, 0.9)):
        text = tok.decode(seq.tolist())
        key = tok.decode(targets.tolist())
        assert len(seq) == 2048 and key.isdigit() and len(key) == 5
        assert text.count(key) == 3                         # twice in the needle, once as the answer
        assert abs(text.index(key) / len(text) - depth) < 0.08     # on a filler-sentence boundary (90 bytes)
        assert text.endswith(f"The pass key is {key}") and torch.equal(seq[rows + 1], targets)


def test_far_windows_score_the_second_half():
    from aphrodite_int2kv.quality.longctx import far_windows

    (label, seq, rows, targets), = far_windows(list(range(10_000)), "t", 4096, 1, start=1000)
    assert label == "far@4096:t" and seq[0] == 1000 and targets[0] == 1000 + 2048 and len(targets) == 2048
    with pytest.raises(ValueError, match="too few"):
        far_windows(list(range(5000)), "t", 4096, 2, start=0)


def test_longctx_on_the_real_model_separates_todays_int2_from_the_tile_format(tmp_path, capsys):
    """The suite end to end on SmolLM2 (short settings): full precision copies the passage, today's
    int2 default loses most of it, the 3-bit-key tile format keeps most of it."""
    import json

    from aphrodite_int2kv.cli import main as cli

    out = tmp_path / "lc.json"
    assert cli(["longctx", "--distances", "512", "--passages", "1", "--far", "", "--passkeys", "",
                "--only", "engine default,K3 V2 tile64 v_tiles=True meta_bits=8", "--schemes", "candidates",
                "--json", str(out)]) == 0
    rows = {r["scheme"]: r for r in json.loads(out.read_text())["rows"]}
    copy = {name.split(":")[0]: r["tasks"]["copy@512"]["top1"] for name, r in rows.items()}
    fp, today = copy["fp"], copy["engine default"]
    tiles_row = next(v for n, v in copy.items() if n.startswith("tiles K3 V2 tile64"))
    assert fp > 0.85 and today < fp - 0.15 and tiles_row > fp - 0.08, copy
    assert "copy 512" in capsys.readouterr().out


def test_eight_bit_tile_metadata_costs_little_and_counts_half_the_bits():
    """e4m3 scale and zero under an fp16 peak per tile and head: the reconstruction error stays
    within 10 % of fp16 metadata's, and the metadata costs 16 bits per channel and tile (plus the
    two peaks) instead of 32."""
    x = _keys(T=128)
    err = {mb: (tiles.channel_tiles(x, 32, 3, meta_bits=mb) - x).pow(2).mean() for mb in (16, 8)}
    assert err[8] < 1.1 * err[16]
    assert (tiles.channel_tiles(x, 32, 2, meta_bits=8) - x).pow(2).mean() > err[8]
    assert tiles.channel_tile_bits(3, 32, 128, meta_bits=8) == 3 + 0.5 + 32 / (32 * 128) + 0.125
    with pytest.raises(ValueError, match="12-bit metadata"):
        tiles.channel_tiles(x, 32, 3, meta_bits=12)


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("T", [32, 64])
def test_tile_records_read_back_what_the_harness_measured(D, T):
    """The byte layout of the channel-tile format (int2/tile_format.py): a record encoded from a
    tile of rotated K/V (2 heads, sinks excluded) decodes to exactly what the harness's scheme (K3
    / V2 channel tiles, norm balancing, 8-bit metadata) reads back, and its size is what the
    bits-per-element arithmetic counts."""
    from aphrodite_int2kv.int2.tile_format import TileLayout, decode_tile, encode_tile

    layout = TileLayout(D, T)
    k, v = _keys(T=T, H=2, D=D, seed=1), _keys(T=T, H=2, D=D, seed=2)
    k[0] *= 30                                                   # a sink, excluded
    sinks = torch.arange(T) < 4
    rec = encode_tile(k.transpose(0, 1), v.transpose(0, 1), layout, exclude=sinks)
    assert rec.dtype == torch.uint8 and rec.shape == (2, layout.tile_bytes) and layout.tile_bytes % 16 == 0
    kd, vd = decode_tile(rec, layout)
    assert torch.equal(kd.transpose(0, 1)[4:], tiles.channel_tiles(k, T, 3, exclude=sinks, meta_bits=8)[4:])
    assert torch.equal(vd.transpose(0, 1)[4:], tiles.channel_tiles(v, T, 2, exclude=sinks, meta_bits=8)[4:])
    # every byte of the record is one field's: codes, norms, metadata, peaks, then padding only
    assert layout.used_bytes == T * (3 * D // 8 + D // 4 + 4) + 4 * D + 8
    bits = (tiles.channel_tile_bits(3, T, D, meta_bits=8) + tiles.channel_tile_bits(2, T, D, meta_bits=8)) / 2
    assert layout.bits_per_element() == pytest.approx(bits, abs=math.lcm(16, T) * 8 / (2 * T * D))
    assert layout.tile_bytes == layout.token_bytes * T       # pages of whole tiles: whole bytes per token
    flipped = rec.clone()
    flipped[0, layout.k_high] ^= 1                                # one high bit of token 0, element 0
    assert decode_tile(flipped, layout)[0][0, 0, 0] != kd[0, 0, 0]


def test_bit_planes_round_trip_and_place_elements_as_documented():
    from aphrodite_int2kv.int2.tile_format import pack_bit_plane, unpack_bit_plane

    bits = torch.randint(0, 2, (5, 128), generator=torch.Generator().manual_seed(0))
    packed = pack_bit_plane(bits)
    assert packed.shape == (5, 16) and torch.equal(unpack_bit_plane(packed), bits)
    one = torch.zeros(128, dtype=torch.long)
    one[3 + 2 * 16] = 1                                           # element j + p*D/8 with j = 3, p = 2
    assert pack_bit_plane(one).tolist() == [0, 0, 0, 4] + [0] * 12


def test_tile_layout_refuses_what_it_cannot_hold():
    from aphrodite_int2kv.int2.format import Int2ConfigError
    from aphrodite_int2kv.int2.tile_format import TileLayout, encode_tile

    with pytest.raises(Int2ConfigError, match="head_dim 96"):
        TileLayout(96, 32)
    with pytest.raises(Int2ConfigError, match="tile of 48 tokens"):
        TileLayout(128, 48)
    with pytest.raises(ValueError, match=r"expected \[\.\.\., 32, 128\]"):
        encode_tile(torch.zeros(16, 128), torch.zeros(16, 128), TileLayout(128, 32))


def test_folded_decode_arithmetic_equals_attention_over_the_decoded_tile():
    """What the decode kernel will compute per tile (K scales folded into the query, one q . zero
    per row, norms applied to the dots; V's scale and zero applied once to p . codes): the same
    scores and P.V as attention over the decoded tile, to fp32 rounding."""
    from aphrodite_int2kv.int2.tile_format import TileLayout, decode_tile, encode_tile, folded_pv, folded_scores

    layout = TileLayout(128, 64)
    k, v = _keys(T=64, H=2, D=128, seed=3).transpose(0, 1), _keys(T=64, H=2, D=128, seed=4).transpose(0, 1)
    rec = encode_tile(k, v, layout)
    kd, vd = decode_tile(rec, layout)
    q = torch.randn(2, 8, 128, generator=torch.Generator().manual_seed(5))      # 8 query rows per KV head
    s = folded_scores(q, rec, layout)
    assert torch.allclose(s, q @ kd.transpose(-1, -2), rtol=1e-4, atol=1e-3 * s.abs().max().item())
    p = (s / 128 ** 0.5).softmax(-1)
    assert torch.allclose(folded_pv(p, rec, layout), p @ vd, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(s, q @ k.transpose(-1, -2), rtol=1e-3)            # it is the quantized tile


def test_the_quick_suite_and_the_candidate_rows():
    """--quick replaces the suite's four flags by a smaller set; the default rows are the
    references, int2 as shipped and the chosen tile format, each sweep row a distinct scheme."""
    import argparse

    from aphrodite_int2kv.quality.longctx import QUICK, add_suite_arguments, suite_flags

    p = argparse.ArgumentParser()
    add_suite_arguments(p)
    full, quick = suite_flags(p.parse_args([])), suite_flags(p.parse_args(["--quick"]))
    assert full["distances"] == [1024, 3072, 6144] and len(full["passkeys"][0].split(",")) == 5
    assert quick == dict(distances=[1024, 3072], passages=1, far=["4096:moby-dick"], passkeys=["4096:0.5"])
    assert QUICK["passages"] == 1
    rows = S.longctx_schemes()
    assert [r.kind for r in rows[:3]] == ["fp", "fp8", "int2"] and rows[2].name.startswith("engine default")
    assert {(r.k_bits, r.v_bits, r.tile, r.meta_bits, r.v_tiles) for r in rows if r.kind == "tiles"} == {
        (3, 2, 32, 8, True), (3, 2, 64, 8, True), (4, 2, 64, 8, True)}   # the last: APHRODITE_INT2KV_K_BITS=4
    sweep = S.longctx_schemes(sweep=True)
    assert len({r.name for r in sweep}) == len(sweep) and len({dataclasses_key(r) for r in sweep}) == len(sweep)
    # the row of what the engine stores with FORMAT=tiles: 4 sinks, no staging tile -- exactly the
    # first 4 and the last 128 positions in full precision (the design rows also keep the tile being filled)
    import dataclasses

    import torch

    eng = S.engine_tiles_scheme()
    assert eng in rows and eng.sink == 4 and not eng.tile_staging and (eng.tile, eng.k_bits, eng.v_bits) == (64, 3, 2)
    assert S.engine_tiles_scheme(4) in rows and "K_BITS=4" in S.engine_tiles_scheme(4).name
    t, j = torch.tensor([[1000]]), torch.arange(1001)[None]
    assert int(S.full_precision_mask(eng, t, j).sum()) == 128 + 4
    assert int(S.full_precision_mask(dataclasses.replace(eng, tile_staging=True), t, j).sum()) == 1001 - 832 + 4
    assert eng.bits_per_element(128) < dataclasses.replace(eng, tile_staging=True).bits_per_element(128)


def dataclasses_key(s):
    import dataclasses

    return tuple(v for k, v in dataclasses.asdict(s).items() if k != "name")
