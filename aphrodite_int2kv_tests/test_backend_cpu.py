"""The int2 attention impl (our engine glue: rotation, store, decode/prefill split, chunked-prefill
continuation, un-rotation) on CPU through the interpreted kernels, against fp32 references; on the
H200 the same tests run with real compilation (benchmarks/gpu_tests.py runs the kernel tests; this file runs as it is)."""

from __future__ import annotations

import functools

import pytest
import torch

from aphrodite_int2kv.int2 import reference as R
from aphrodite_int2kv.int2.format import SlotLayout
from aphrodite_int2kv.int2.quantizer import fake_quantize
from aphrodite_int2kv.int2.rotation import hadamard
from aphrodite_int2kv_tests.conftest import DEVICE, TOKENS

D, HQ, HKV, BS = 64, 6, 2, 16
# Under the interpreter every dot is fp32; on the GPU (run there with real compilation) the kernels'
# dots take fp16 operands: differences up to 1.3e-3 were seen on the H200 .
ATOL = 1e-4 if DEVICE == "cpu" else 5e-3


# every test here but the FORMAT=tiles ones at the end (which set it themselves) is about the
# per-token format, which is no longer the default
pytestmark = pytest.mark.usefixtures("tokens_format")


@pytest.fixture
def impl(engine, monkeypatch):
    """Plain int2 (no K centering), so that references are the plain quantizer's; the default
    data-free centering has tests of its own below."""
    monkeypatch.setenv("APHRODITE_INT2KV_GROUP_SIZE", "32")
    monkeypatch.setenv("APHRODITE_INT2KV_K_CENTER_FIRST", "0")
    from aphrodite_int2kv.engine.backend import Int2AttentionImpl

    return Int2AttentionImpl(HQ, D, D ** -0.5, HKV, None, None, "int2")


def engine_view(cache, layout="LBHNC"):
    """The pages `cache` [blocks, block_size, Hkv, slot] as the installed engine hands them to the
    impl: 0.21-0.23 as they are (the impl reads them heads first); 0.24 as the logical
    [blocks, Hkv, block_size, slot] view of its physical layout -- LBHNC, the one our backend asks
    for (the same bytes as 0.21's), or LBNHC (token-major) when another backend imposes it."""
    from aphrodite_int2kv.engine.kv_api import shape_based_kv_api

    if shape_based_kv_api():
        return cache
    nb, bs, h, slot = cache.shape
    return cache.view(nb, h, bs, slot) if layout == "LBHNC" else cache.transpose(1, 2)


def _meta(seq_lens, q_lens, block_table, slots, num_decodes):
    from aphrodite_int2kv.engine.backend import Int2Metadata

    qsl = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32, device=DEVICE)
    return Int2Metadata(seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=DEVICE),
                        slot_mapping=slots, block_table=block_table, query_start_loc=qsl,
                        num_actual_tokens=sum(q_lens), max_query_len=max(q_lens),
                        num_decodes=num_decodes, num_decode_tokens=num_decodes,
                        num_prefills=len(q_lens) - num_decodes)


def _slots(block_table, seq, start, n):
    pos = torch.arange(start, start + n, device=DEVICE)
    return block_table[seq][pos // BS].long() * BS + pos % BS


def _fq(x):
    """What the backend stores with the default level mode (APHRODITE_INT2KV_LEVELS unset)."""
    from aphrodite_int2kv.engine.options import Int2Options

    o = Int2Options()
    return fake_quantize(x, 32, lloyd_max=o.lloyd_max, std_range=o.std_range)


def _folded_q(q, rot=None):
    """The query the folded decode tile (the engine's default) scores int2 keys with
    (R.query_codes), back in the original basis: rounded in the rotated one. rot: [D, D] or one
    per KV head [HKV, D, D]; the Hadamard matrix when None."""
    rot = (hadamard(D) if rot is None else rot).to(DEVICE).float()
    rot = rot[None] if rot.dim() == 2 else rot
    per_head = rot.repeat_interleave(q.shape[1] // rot.shape[0], dim=0)        # [HQ, D, D]
    q_rot = torch.einsum("thd,hde->the", q.float(), per_head)
    return torch.einsum("the,hde->thd", R.query_codes(q_rot, D ** -0.5), per_head)


def _expected(q, k_all, v_all, q_start, quantized_until, decode=False):
    """fp32 attention of q (positions q_start..) over k_all/v_all, where keys before
    `quantized_until` are read back from the int2 cache (Hadamard-rotated 2-bit) and the rest exact.
    decode: q is one decoding token, whose int2 keys the folded tile scores with _folded_q."""
    H = hadamard(D).to(DEVICE)
    kq = R.rotate(_fq(R.rotate(k_all, H)), H.T)
    vq = R.rotate(_fq(R.rotate(v_all, H)), H.T)
    idx = torch.arange(k_all.shape[0], device=DEVICE)[:, None, None]
    k = torch.where(idx < quantized_until, kq, k_all)
    v = torch.where(idx < quantized_until, vq, v_all)
    return R.attend(q, k, v, D ** -0.5, causal_offset=q_start, q_folded=_folded_q(q) if decode else None,
                    folded_keys=(0, quantized_until))


def test_pages_are_heads_first(impl):
    """docs/format.md: a page holds KV head h's slots of its tokens as one contiguous run, so a
    decode program's tile is one run of bytes (on every engine version: 0.21-0.23 by our reading
    of the engine's [blocks, block_size, Hkv, slot] tensor, 0.24 by the LBHNC layout)."""
    from aphrodite_int2kv.engine.backend import Int2AttentionBackend
    from aphrodite_int2kv.engine.kv_api import shape_based_kv_api

    layer = type("L", (), {"layer_name": "model.layers.0.self_attn.attn"})()
    L = SlotLayout(D, 32)
    cache = torch.zeros(4, BS, HKV, L.slot_bytes, dtype=torch.uint8, device=DEVICE)
    k, v = torch.randn(1, HKV * D, device=DEVICE), torch.randn(1, HKV * D, device=DEVICE)
    impl.do_kv_cache_update(layer, k, v, engine_view(cache), torch.tensor([2 * BS + 5], device=DEVICE))
    runs = cache.view(4, HKV, BS, L.slot_bytes)          # the raw bytes, heads first
    written = runs.ne(0).any(-1).nonzero().tolist()
    assert written == [[2, h, 5] for h in range(HKV)], written
    if not shape_based_kv_api():    # 0.24: the layout the backend asks for first
        assert Int2AttentionBackend.supported_kv_cache_layouts()[0].name == "LBHNC"


@pytest.mark.parametrize("layout", ["LBHNC", "LBNHC"])
def test_prefill_then_mixed_decode_and_chunked_continuation(impl, layout):
    """Prefill, mixed decode + chunked prefill, in the pages as the engine hands them (0.24: both
    layouts our backend accepts; 0.21-0.23 have one, run once)."""
    from aphrodite_int2kv.engine.kv_api import shape_based_kv_api

    if layout == "LBNHC" and shape_based_kv_api():
        pytest.skip("0.21-0.23 have no layout choice")
    view = functools.partial(engine_view, layout=layout)
    torch.manual_seed(0)
    layer = type("L", (), {"layer_name": "model.layers.0.self_attn.attn"})()
    L = SlotLayout(D, 32)
    cache = torch.zeros(12, BS, HKV, L.slot_bytes, dtype=torch.uint8, device=DEVICE)
    block_table = torch.tensor([[3, 7, 1, 0], [5, 2, 9, 11]], dtype=torch.int32, device=DEVICE)
    kA, vA = torch.randn(21, HKV, D, device=DEVICE), torch.randn(21, HKV, D, device=DEVICE)
    kB, vB = torch.randn(47, HKV, D, device=DEVICE), torch.randn(47, HKV, D, device=DEVICE)
    qA, qB = torch.randn(21, HQ, D, device=DEVICE), torch.randn(47, HQ, D, device=DEVICE)

    # step 1: A's prompt (20 tokens) and B's first chunk (37 tokens), both prefills
    key, value, query = torch.cat([kA[:20], kB[:37]]), torch.cat([vA[:20], vB[:37]]), torch.cat([qA[:20], qB[:37]])
    slots = torch.cat([_slots(block_table, 0, 0, 20), _slots(block_table, 1, 0, 37)])
    impl.do_kv_cache_update(layer, key, value, view(cache), slots)
    out = torch.empty(57, HQ * D, device=DEVICE)
    impl.forward(layer, query.reshape(57, -1), key.reshape(57, -1), value.reshape(57, -1), view(cache),
                 _meta([20, 37], [20, 37], block_table, slots, 0), output=out)
    out = out.view(57, HQ, D)
    torch.testing.assert_close(out[:20], R.attend(qA[:20], kA[:20], vA[:20], D ** -0.5, causal_offset=0),
                               atol=ATOL, rtol=0)   # a first chunk sees only itself, in full precision

    # step 2 (mixed batch, decodes first): A decodes token 20, B continues with 10 more tokens
    key, value, query = torch.cat([kA[20:], kB[37:]]), torch.cat([vA[20:], vB[37:]]), torch.cat([qA[20:], qB[37:]])
    slots = torch.cat([_slots(block_table, 0, 20, 1), _slots(block_table, 1, 37, 10)])
    impl.do_kv_cache_update(layer, key, value, view(cache), slots)
    out = torch.empty(11, HQ * D, device=DEVICE)
    impl.forward(layer, query.reshape(11, -1), key.reshape(11, -1), value.reshape(11, -1), view(cache),
                 _meta([21, 47], [1, 10], block_table, slots, 1), output=out)
    out = out.view(11, HQ, D)
    # decode reads every key (its own included) back from the int2 cache
    torch.testing.assert_close(out[:1], _expected(qA[20:], kA, vA, 20, 21, decode=True), atol=ATOL, rtol=0)
    # the continuation reads B's first 37 keys from int2, its own 10 in full precision
    torch.testing.assert_close(out[1:], _expected(qB[37:], kB, vB, 37, 37), atol=ATOL, rtol=0)


def test_padded_tokens_are_not_stored(impl):
    layer = type("L", (), {"layer_name": "model.layers.0.self_attn.attn"})()
    cache = torch.full((2, BS, HKV, SlotLayout(D, 32).slot_bytes), 7, dtype=torch.uint8, device=DEVICE)
    k = torch.randn(4, HKV * D, device=DEVICE)
    impl.do_kv_cache_update(layer, k, k, engine_view(cache), torch.tensor([3, -1, -1, 17], device=DEVICE))
    nb, bs, h, slot = cache.shape
    written = (cache.view(nb, h, bs, slot) != 7).any(-1).any(1).flatten()   # per token (pages heads first)
    assert written.nonzero().flatten().tolist() == [3, 17]


def _rotation_file(tmp_path, offsets=None, per_head=False):
    from aphrodite_int2kv.int2.rotation import save_rotation_file

    g = torch.Generator().manual_seed(3)
    if per_head:   # a different orthogonal matrix per KV head
        rot = torch.stack([torch.linalg.qr(torch.randn(D, D, generator=g))[0] for _ in range(HKV)])
    else:
        rot = hadamard(D)
    path = str(tmp_path / "k.pt")
    save_rotation_file(path, {0: rot}, None if offsets is None else {0: {"k_offset": offsets}})
    return path, rot


def _run_prefill_then_decode(impl, k, v, q, steps=None):
    """Prompt of T-1 tokens as one prefill, then decode of the last token; returns both outputs.
    `steps`: other (start, tokens, decodes) steps of the one sequence instead."""
    layer = type("L", (), {"layer_name": "model.layers.0.self_attn.attn"})()
    T = k.shape[0]
    L = SlotLayout(D, 32)
    cache = torch.zeros(8, BS, HKV, L.slot_bytes, dtype=torch.uint8, device=DEVICE)
    block_table = torch.tensor([[4, 1, 6, 2]], dtype=torch.int32, device=DEVICE)
    outs = []
    for start, n, decodes in steps or ((0, T - 1, 0), (T - 1, 1, 1)):
        sl = _slots(block_table, 0, start, n)
        meta = _meta([start + n], [n], block_table, sl, decodes)
        impl.do_kv_cache_update(layer, k[start:start + n].reshape(n, -1), v[start:start + n].reshape(n, -1),
                                engine_view(cache), sl, attn_metadata=meta)
        out = torch.empty(n, HQ * D, device=DEVICE)
        impl.forward(layer, q[start:start + n].reshape(n, -1), k[start:start + n].reshape(n, -1),
                     v[start:start + n].reshape(n, -1), engine_view(cache), meta, output=out)
        outs.append(out.view(n, HQ, D))
    return outs


def test_k_centering_from_the_rotation_file(engine, monkeypatch, tmp_path):
    """K with a large per-channel constant (as post-RoPE K has): storing K - c changes no attention
    weight in full precision (q.c is the same for every key), and with 2-bit codes it removes most
    of the error, in prefill and in decode."""
    from aphrodite_int2kv.engine.backend import Int2AttentionImpl

    torch.manual_seed(1)
    T = 40
    c = 6.0 * torch.randn(HKV, D, device=DEVICE)
    k = torch.randn(T, HKV, D, device=DEVICE) + c
    v, q = torch.randn(T, HKV, D, device=DEVICE), torch.randn(T, HQ, D, device=DEVICE)
    exact = R.attend(q, k, v, D ** -0.5, causal_offset=0)
    # full precision: centering is exact
    torch.testing.assert_close(R.attend(q, k - c, v, D ** -0.5, causal_offset=0), exact, atol=1e-5, rtol=0)

    monkeypatch.setenv("APHRODITE_INT2KV_GROUP_SIZE", "32")
    monkeypatch.setenv("APHRODITE_INT2KV_K_CENTER_SKIP", "0")   # every key has the offset here
    errors = {}
    for name, offsets in (("plain", None), ("centered", c.cpu())):
        path, _ = _rotation_file(tmp_path, offsets)
        monkeypatch.setenv("APHRODITE_INT2KV_K_ROTATION", path)
        impl = Int2AttentionImpl(HQ, D, D ** -0.5, HKV, None, None, "int2")
        prefill, decode = _run_prefill_then_decode(impl, k, v, q)
        # a first prefill chunk attends in full precision: centered or not, it is exact
        torch.testing.assert_close(prefill, exact[:T - 1], atol=ATOL, rtol=0)
        errors[name] = (decode - exact[T - 1:]).norm() / exact[T - 1:].norm()
    assert errors["centered"] < 0.5 * errors["plain"], errors


@pytest.mark.parametrize("skip", [0, 4])
def test_k_centering_keeps_the_first_tokens_uncentered(engine, monkeypatch, tmp_path, skip):
    """APHRODITE_INT2KV_K_CENTER_SKIP: the first `skip` tokens are quantized without the offset and
    their scores get -q.c, so attention equals a reference built from exactly those reconstructions;
    the first token is an atypical key near the origin (an attention sink)."""
    from aphrodite_int2kv.engine.backend import Int2AttentionImpl

    torch.manual_seed(4)
    T = 40
    c = 6.0 * torch.randn(HKV, D, device=DEVICE)
    k = torch.randn(T, HKV, D, device=DEVICE) + c
    k[0] = 0.1 * torch.randn(HKV, D, device=DEVICE)
    v, q = torch.randn(T, HKV, D, device=DEVICE), torch.randn(T, HQ, D, device=DEVICE)
    path, _ = _rotation_file(tmp_path, c.cpu())
    monkeypatch.setenv("APHRODITE_INT2KV_GROUP_SIZE", "32")
    monkeypatch.setenv("APHRODITE_INT2KV_K_ROTATION", path)
    monkeypatch.setenv("APHRODITE_INT2KV_K_CENTER_SKIP", str(skip))
    impl = Int2AttentionImpl(HQ, D, D ** -0.5, HKV, None, None, "int2")
    _, decode = _run_prefill_then_decode(impl, k, v, q)
    H = hadamard(D).to(DEVICE)
    centered = R.rotate(_fq(R.rotate(k - c, H)), H.T) + c
    plain = R.rotate(_fq(R.rotate(k, H)), H.T)
    idx = torch.arange(T, device=DEVICE)[:, None, None]
    kq = torch.where(idx < skip, plain, centered)
    vq = R.rotate(_fq(R.rotate(v, H)), H.T)
    ref = R.attend(q[T - 1:], kq, vq, D ** -0.5, causal_offset=T - 1, q_folded=_folded_q(q[T - 1:]),
                   folded_keys=(skip, T), folded_center=c)
    torch.testing.assert_close(decode, ref, atol=ATOL, rtol=0)


def test_token_positions_from_the_batch(engine):
    from aphrodite_int2kv.engine.backend import token_positions

    qsl = torch.tensor([0, 1, 4, 9], dtype=torch.int32)     # a decode, a 3-token and a 5-token chunk
    seq = torch.tensor([10, 3, 25], dtype=torch.int32)
    # two padded tokens at the end (CUDA-graph padding) just continue the last request
    assert token_positions(qsl, seq, 11).tolist() == [9, 0, 1, 2, 20, 21, 22, 23, 24, 25, 26]


def test_per_kv_head_rotation_file_with_grouped_queries(engine, monkeypatch, tmp_path):
    """A calibrated file holds one rotation per KV head; each query head must use its KV head's."""
    from aphrodite_int2kv.engine.backend import Int2AttentionImpl

    torch.manual_seed(2)
    path, rot = _rotation_file(tmp_path, per_head=True)
    monkeypatch.setenv("APHRODITE_INT2KV_GROUP_SIZE", "32")
    monkeypatch.setenv("APHRODITE_INT2KV_K_ROTATION", path)
    monkeypatch.setenv("APHRODITE_INT2KV_K_CENTER_FIRST", "0")   # the rotation alone (no offsets in this file)
    impl = Int2AttentionImpl(HQ, D, D ** -0.5, HKV, None, None, "int2")
    T = 30
    k, v, q = torch.randn(T, HKV, D, device=DEVICE), torch.randn(T, HKV, D, device=DEVICE), torch.randn(T, HQ, D, device=DEVICE)
    _, decode = _run_prefill_then_decode(impl, k, v, q)
    # reference: keys quantized in their head's rotated basis, attention in the original basis
    H = hadamard(D).to(DEVICE)
    rk = rot.to(DEVICE)
    kq = torch.einsum("the,hde->thd", _fq(torch.einsum("thd,hde->the", k, rk)), rk)
    vq = R.rotate(_fq(R.rotate(v, H)), H.T)
    ref = R.attend(q[T - 1:], kq, vq, D ** -0.5, causal_offset=T - 1, q_folded=_folded_q(q[T - 1:], rk),
                   folded_keys=(0, T))
    # 5e-4: the backend rotates with a matmul, the reference with einsum; a last-bit difference can
    # move one element across a rounding boundary (seen: 2 of 384 outputs off by 2e-4 with the std
    # levels). A wrong head's rotation is off by ~1e-1.
    torch.testing.assert_close(decode, ref, atol=max(5e-4, ATOL), rtol=0)


def test_prefix_cache_hit_reads_the_shared_int2_blocks(impl):
    """Prefix caching: request B's block table starts with request A's cached blocks; B only
    prefills its new tokens, and its attention over the shared prefix equals the reference over
    A's stored int2 keys (blocks are position-addressed: nothing per request is kept in them)."""
    torch.manual_seed(5)
    layer = type("L", (), {"layer_name": "model.layers.0.self_attn.attn"})()
    L = SlotLayout(D, 32)
    cache = torch.zeros(10, BS, HKV, L.slot_bytes, dtype=torch.uint8, device=DEVICE)
    k, v = torch.randn(40, HKV, D, device=DEVICE), torch.randn(40, HKV, D, device=DEVICE)
    # A: 32 tokens (two full blocks, 6 and 2) prefilled and stored
    table_a = torch.tensor([[6, 2, 9]], dtype=torch.int32, device=DEVICE)
    sl = _slots(table_a, 0, 0, 32)
    meta = _meta([32], [32], table_a, sl, 0)
    impl.do_kv_cache_update(layer, k[:32].reshape(32, -1), v[:32].reshape(32, -1), engine_view(cache), sl,
                            attn_metadata=meta)
    # B: same first 32 tokens (a cache hit on blocks 6, 2), then 8 new tokens in its own block 4
    table_b = torch.tensor([[6, 2, 4]], dtype=torch.int32, device=DEVICE)
    sl_b = _slots(table_b, 0, 32, 8)
    meta_b = _meta([40], [8], table_b, sl_b, 0)
    q = torch.randn(8, HQ, D, device=DEVICE)
    impl.do_kv_cache_update(layer, k[32:].reshape(8, -1), v[32:].reshape(8, -1), engine_view(cache), sl_b,
                            attn_metadata=meta_b)
    out = torch.empty(8, HQ * D, device=DEVICE)
    impl.forward(layer, q.reshape(8, -1), k[32:].reshape(8, -1), v[32:].reshape(8, -1), engine_view(cache),
                 meta_b, output=out)
    torch.testing.assert_close(out.view(8, HQ, D), _expected(q, k, v, 32, 32), atol=ATOL, rtol=0)


def test_prefix_cache_hit_equals_recomputing_with_the_default_centering(engine, monkeypatch):
    """The defaults (data-free K centering on): request B reuses A's two cached blocks and prefills
    8 new tokens; its output equals recomputing B from scratch in a fresh cache (the offset is read
    from the shared blocks, the same bytes either way), and the cache bytes show centering at work."""
    from aphrodite_int2kv.engine.backend import Int2AttentionImpl

    monkeypatch.delenv("APHRODITE_INT2KV_K_CENTER_FIRST", raising=False)
    monkeypatch.setenv("APHRODITE_INT2KV_GROUP_SIZE", "32")
    torch.manual_seed(7)
    layer = type("L", (), {"layer_name": "model.layers.0.self_attn.attn"})()
    L = SlotLayout(D, 32)
    k = torch.randn(40, HKV, D, device=DEVICE) + 5.0 * torch.randn(HKV, D, device=DEVICE)
    v, q = torch.randn(40, HKV, D, device=DEVICE), torch.randn(8, HQ, D, device=DEVICE)

    def run(center_first, reuse):
        if center_first is not None:
            monkeypatch.setenv("APHRODITE_INT2KV_K_CENTER_FIRST", str(center_first))
        impl = Int2AttentionImpl(HQ, D, D ** -0.5, HKV, None, None, "int2")
        cache = torch.zeros(10, BS, HKV, L.slot_bytes, dtype=torch.uint8, device=DEVICE)
        table_b = torch.tensor([[6, 2, 4]], dtype=torch.int32, device=DEVICE)
        # the first 32 tokens: A's prefill into blocks 6, 2 (reused by B), or B's own first chunk
        table_first = torch.tensor([[6, 2, 9]], dtype=torch.int32, device=DEVICE) if reuse else table_b
        sl = _slots(table_first, 0, 0, 32)
        impl.do_kv_cache_update(layer, k[:32].reshape(32, -1), v[:32].reshape(32, -1), engine_view(cache), sl,
                                attn_metadata=_meta([32], [32], table_first, sl, 0))
        sl_b = _slots(table_b, 0, 32, 8)
        meta_b = _meta([40], [8], table_b, sl_b, 0)
        impl.do_kv_cache_update(layer, k[32:].reshape(8, -1), v[32:].reshape(8, -1), engine_view(cache), sl_b,
                                attn_metadata=meta_b)
        out = torch.empty(8, HQ * D, device=DEVICE)
        impl.forward(layer, q.reshape(8, -1), k[32:].reshape(8, -1), v[32:].reshape(8, -1), engine_view(cache),
                     meta_b, output=out)
        return out, cache[[6, 2]]

    hit, hit_bytes = run(None, reuse=True)
    again, again_bytes = run(None, reuse=False)
    assert torch.equal(hit, again) and torch.equal(hit_bytes, again_bytes)
    plain, plain_bytes = run(0, reuse=True)
    assert not torch.equal(hit_bytes, plain_bytes) and (hit - plain).abs().max() > 1e-3


@pytest.mark.parametrize("RW", [1, 8, 100])
def test_recent_window_in_the_engine_glue(impl, RW):
    """With the recent window (as the companion cache hands it to the impl): the store writes the
    new tokens' rotated K/V to the window pages too, decode reads positions >= L - R in full
    precision, a chunked continuation reads prefix positions >= prefix - (R - 1) from the window;
    older positions come from int2. R = 100 exceeds both sequences (everything full precision)."""
    torch.manual_seed(1)
    layer = type("L", (), {"layer_name": "model.layers.0.self_attn.attn"})()
    L = SlotLayout(D, 32)
    WBS = 3                                    # the int2/window page ratio of G = 32 (16 int2 tokens)
    cache = torch.zeros(12, BS, HKV, L.slot_bytes, dtype=torch.uint8, device=DEVICE)
    win = torch.zeros(40, WBS, HKV, 2 * D, device=DEVICE)         # [pages, window block, heads, K|V]
    k_win, v_win = win[..., :D], win[..., D:]
    block_table = torch.tensor([[3, 7, 1, 0], [5, 2, 9, 11]], dtype=torch.int32, device=DEVICE)
    wtable = (torch.randperm(39, device=DEVICE)[:38].view(2, 19) + 1).int()   # disjoint pages, 0 unused
    kA, vA, qA = (torch.randn(21, h, D, device=DEVICE) for h in (HKV, HKV, HQ))
    kB, vB, qB = (torch.randn(47, h, D, device=DEVICE) for h in (HKV, HKV, HQ))

    def wslots(seq, start, n):
        pos = torch.arange(start, start + n, device=DEVICE)
        return wtable[seq][pos // WBS].long() * WBS + pos % WBS

    from aphrodite_int2kv.engine.window import Int2WindowMetadata

    def step(parts, seq_lens, q_lens, decodes):
        key = torch.cat([p[0] for p in parts]); value = torch.cat([p[1] for p in parts])
        query = torch.cat([p[2] for p in parts])
        n = key.shape[0]
        slots = torch.cat([_slots(block_table, s, st, c) for s, st, c in zip((0, 1), [l - q for l, q in zip(seq_lens, q_lens)], q_lens)])
        wsl = torch.cat([wslots(s, l - q, q) for s, l, q in zip((0, 1), seq_lens, q_lens)])
        impl._window_state = lambda layer, dtype: (k_win, v_win, Int2WindowMetadata(wtable, wsl))
        impl.window = RW
        impl.do_kv_cache_update(layer, key.reshape(n, -1), value.reshape(n, -1), engine_view(cache), slots)
        out = torch.empty(n, HQ * D, device=DEVICE)
        impl.forward(layer, query.reshape(n, -1), key.reshape(n, -1), value.reshape(n, -1), engine_view(cache),
                     _meta(seq_lens, q_lens, block_table, slots, decodes), output=out)
        return out.view(n, HQ, D)

    step([(kA[:20], vA[:20], qA[:20]), (kB[:37], vB[:37], qB[:37])], [20, 37], [20, 37], 0)
    # the store put every new token's rotated K/V into the window pages, exactly
    H = hadamard(D).to(DEVICE)
    torch.testing.assert_close(k_win[wtable[1][36 // WBS], 36 % WBS], R.rotate(kB[36:37], H)[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(v_win[wtable[0][5 // WBS], 5 % WBS], R.rotate(vA[5:6], H)[0], atol=1e-5, rtol=0)
    out = step([(kA[20:], vA[20:], qA[20:]), (kB[37:], vB[37:], qB[37:])], [21, 47], [1, 10], 1)
    torch.testing.assert_close(out[:1], _expected(qA[20:], kA, vA, 20, max(0, 21 - RW), decode=True), atol=ATOL,
                               rtol=0)
    torch.testing.assert_close(out[1:], _expected(qB[37:], kB, vB, 37, max(0, 37 - (RW - 1))), atol=ATOL, rtol=0)
    if RW < 20:   # the window is what made those keys exact: int2 alone gives another answer
        assert (out[:1] - _expected(qA[20:], kA, vA, 20, 21)).abs().max() > 1e-2


def test_ring_window_orders_a_chunks_writes_after_its_reads(impl):
    """Ring mode (one window page per request, position p at offset p % W): a continuation of 10
    tokens with R = 8 and W = 12 writes offsets its own prefix window still needs (keys 39-46 land
    where keys 30-34 sit), so the impl stores a prefill's window keys only after the prefill has read
    them; decodes read their own key from the ring. Every other table column points at a page of NaN:
    reading the ring as a paged window would show."""
    torch.manual_seed(3)
    layer = type("L", (), {"layer_name": "model.layers.0.self_attn.attn"})()
    RW, W = 8, 12
    cache = torch.zeros(12, BS, HKV, SlotLayout(D, 32).slot_bytes, dtype=torch.uint8, device=DEVICE)
    win = torch.zeros(6, W, HKV, 2 * D, device=DEVICE)
    win[0] = float("nan")
    k_win, v_win = win[..., :D], win[..., D:]
    block_table = torch.tensor([[3, 7, 1, 0], [5, 2, 9, 11]], dtype=torch.int32, device=DEVICE)
    wtable = torch.zeros(2, 5, dtype=torch.int32, device=DEVICE)
    wtable[0, 0], wtable[1, 0] = 4, 2
    kA, vA, qA = (torch.randn(21, h, D, device=DEVICE) for h in (HKV, HKV, HQ))
    kB, vB, qB = (torch.randn(48, h, D, device=DEVICE) for h in (HKV, HKV, HQ))

    from aphrodite_int2kv.engine.window import Int2WindowMetadata

    impl.window = RW

    def step(parts, seq_lens, q_lens, decodes, rows=(0, 1)):
        key, value, query = (torch.cat([p[i] for p in parts]) for i in range(3))
        n = key.shape[0]
        starts = [l - q for l, q in zip(seq_lens, q_lens)]
        slots = torch.cat([_slots(block_table, r, st, q) for r, st, q in zip(rows, starts, q_lens)])
        rows = list(rows)
        wmeta = Int2WindowMetadata(block_table=wtable[rows], slot_mapping=torch.full_like(slots, -7), ring=True)
        impl._window_state = lambda layer, dtype: (k_win, v_win, wmeta)
        m = _meta(seq_lens, q_lens, block_table[rows], slots, decodes)
        impl.do_kv_cache_update(layer, key.reshape(n, -1), value.reshape(n, -1), engine_view(cache), slots,
                                attn_metadata=m)
        out = torch.empty(n, HQ * D, device=DEVICE)
        impl.forward(layer, query.reshape(n, -1), key.reshape(n, -1), value.reshape(n, -1), engine_view(cache), m,
                     output=out)
        return out.view(n, HQ, D)

    step([(kA[:20], vA[:20], qA[:20]), (kB[:37], vB[:37], qB[:37])], [20, 37], [20, 37], 0)
    H = hadamard(D).to(DEVICE)
    # only the last R keys of each prompt went into its page, at offset p % W
    torch.testing.assert_close(k_win[2, 36 % W], R.rotate(kB[36:37], H)[0], atol=1e-5, rtol=0)
    assert (k_win[2, 28 % W] == 0).all()                 # key 28 < 37 - R: not stored
    out = step([(kA[20:], vA[20:], qA[20:]), (kB[37:47], vB[37:47], qB[37:47])], [21, 47], [1, 10], 1)
    torch.testing.assert_close(out[:1], _expected(qA[20:], kA, vA, 20, 21 - RW, decode=True), atol=ATOL, rtol=0)
    torch.testing.assert_close(out[1:], _expected(qB[37:47], kB[:47], vB[:47], 37, 37 - (RW - 1)), atol=ATOL, rtol=0)
    # B's next decode reads keys 40-46 (written after the chunk's reads) and its own from the ring
    out = step([(kB[47:], vB[47:], qB[47:])], [48], [1], 1, rows=(1,))
    torch.testing.assert_close(out, _expected(qB[47:], kB, vB, 47, 48 - RW, decode=True), atol=ATOL, rtol=0)


def test_window_views_read_both_engine_layouts(engine):
    """0.21-0.23 hand the window cache as [pages, block, Hkv, 2D] in the model dtype; 0.24 as the
    logical [pages, Hkv, block, bytes] view of the same memory. Both give the same K and V."""
    from aphrodite_int2kv.engine.window import window_views

    P, WBS, H = 3, 5, 2
    raw = torch.randn(P, WBS, H, 2 * D, device=DEVICE).to(torch.bfloat16)
    k1, v1 = window_views(raw, H, D, torch.bfloat16, heads_first=False)
    logical = raw.view(torch.int8).transpose(1, 2)          # what 0.24's allocator hands out
    k2, v2 = window_views(logical, H, D, torch.bfloat16, heads_first=True)
    assert torch.equal(k1, k2) and torch.equal(v1, v2)
    assert torch.equal(k1, raw[..., :D]) and torch.equal(v2, raw[..., D:])
    assert k1.stride() == v1.stride() and k1.stride(-1) == 1     # what the kernels require


def test_data_free_k_centering_from_each_sequences_first_keys(engine, monkeypatch):
    """APHRODITE_INT2KV_K_CENTER_FIRST=16: K with a large per-channel constant; the prompt arrives in
    two chunks (10 tokens, then 29 that cross position 16), then one decode. The first 16 keys are
    stored uncentered, each sequence's offset is the mean of those 16 as the cache holds them, later
    keys are stored as K - c, and every score gets the same -q.c: attention equals a reference built
    from exactly those reconstructions, whose keys after the first 16 carry far less 2-bit error
    than plain int2's."""
    from aphrodite_int2kv.engine.backend import Int2AttentionImpl

    torch.manual_seed(6)   # drawn on the CPU: the same numbers on the GPU (its generator differs)
    T, N = 40, 16
    c_true = 6.0 * torch.randn(HKV, D)
    k = (torch.randn(T, HKV, D) + c_true).to(DEVICE)
    v, q = torch.randn(T, HKV, D).to(DEVICE), torch.randn(T, HQ, D).to(DEVICE)
    c_true = c_true.to(DEVICE)
    monkeypatch.setenv("APHRODITE_INT2KV_GROUP_SIZE", "32")

    def run(first):
        monkeypatch.setenv("APHRODITE_INT2KV_K_CENTER_FIRST", str(first))
        impl = Int2AttentionImpl(HQ, D, D ** -0.5, HKV, None, None, "int2")
        return _run_prefill_then_decode(impl, k, v, q, steps=((0, 10, 0), (10, T - 11, 0), (T - 1, 1, 1)))

    H = hadamard(D).to(DEVICE)
    kr = R.rotate(k, H)
    stored_first = _fq(kr[:N])
    c = stored_first.mean(0)                                   # the offset as the cache holds it
    kq = R.rotate(torch.cat([stored_first, _fq(kr[N:] - c) + c]), H.T)
    vq = R.rotate(_fq(R.rotate(v, H)), H.T)
    # the offsets are computed once per layer and step (the store's are reused by the attention)
    from aphrodite_int2kv.engine import backend as B
    calls = []
    real = B.sequence_centers
    monkeypatch.setattr(B, "sequence_centers", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    _, chunk2, decode = run(N)
    assert len(calls) == 3, f"{len(calls)} offset computations for 3 steps"
    monkeypatch.setattr(B, "sequence_centers", real)
    torch.testing.assert_close(decode, R.attend(q[T - 1:], kq, vq, D ** -0.5, causal_offset=T - 1,
                                                q_folded=_folded_q(q[T - 1:]), folded_keys=(N, T),
                                                folded_center=R.rotate(c[None], H.T)[0]),
                               atol=ATOL, rtol=0)
    # the second chunk reads positions 0..9 from int2 (uncentered, -q.c) and itself exactly
    k2 = torch.cat([kq[:10], k[10:T - 1]])
    v2 = torch.cat([vq[:10], v[10:T - 1]])
    torch.testing.assert_close(chunk2, R.attend(q[10:T - 1], k2, v2, D ** -0.5, causal_offset=10),
                               atol=ATOL, rtol=0)
    # what it buys: keys after the first 16 are stored without the constant, so their 2-bit error
    # (after removing the score-neutral offset) is far below plain int2's
    plain_kq = R.rotate(_fq(kr), H.T)
    err = lambda rec: ((rec[N:] - k[N:]).norm() / (k[N:] - c_true).norm()).item()   # noqa: E731
    assert err(kq) < 0.5 * err(plain_kq), (err(kq), err(plain_kq))
    # and without K_CENTER_FIRST the same engine stores plain int2 (the check can fail)
    assert not torch.allclose(run(0)[2], decode, atol=1e-3)


def test_data_free_centering_and_an_offsets_file_are_refused_together(engine, monkeypatch, tmp_path):
    from aphrodite_int2kv.engine.options import Int2Options
    from aphrodite_int2kv.int2.format import Int2ConfigError

    path, _ = _rotation_file(tmp_path, torch.zeros(HKV, D))
    with pytest.raises(Int2ConfigError, match="K_CENTER_FIRST=16 and the K offsets"):
        Int2Options.from_env({**TOKENS, "APHRODITE_INT2KV_K_CENTER_FIRST": "16", "APHRODITE_INT2KV_K_ROTATION": path})
    with pytest.raises(Int2ConfigError, match="K_CENTER_FIRST=999 must be between 0"):
        Int2Options.from_env({**TOKENS, "APHRODITE_INT2KV_K_CENTER_FIRST": "999"})
    assert "first 16 keys" in Int2Options.from_env({**TOKENS, "APHRODITE_INT2KV_K_CENTER_FIRST": "16"}).describe()
    # the default (auto) centers from the data unless the file gives offsets
    assert Int2Options.from_env({**TOKENS, "APHRODITE_INT2KV_K_ROTATION": path}).k_center_first == 0
    assert "file offsets" in Int2Options.from_env({**TOKENS, "APHRODITE_INT2KV_K_ROTATION": path}).describe()


def test_decode_tile_option(engine):
    """DECODE_TILE: auto = folded for uniform levels and per-code for Lloyd-Max; folded with
    Lloyd-Max and unknown names are refused, naming the variable; the kernel refuses it too."""
    from aphrodite_int2kv.engine.options import Int2Options
    from aphrodite_int2kv.int2.format import Int2ConfigError
    from aphrodite_int2kv.kernels.decode import int2_decode

    assert Int2Options.from_env(TOKENS).fold_decode
    assert "decode tile=folded" in Int2Options.from_env(TOKENS).describe()
    assert not Int2Options.from_env({**TOKENS, "APHRODITE_INT2KV_LEVELS": "lloyd-max"}).fold_decode
    assert not Int2Options.from_env({**TOKENS, "APHRODITE_INT2KV_DECODE_TILE": "per-code"}).fold_decode
    assert Int2Options.from_env({**TOKENS, "APHRODITE_INT2KV_DECODE_TILE": " Folded",
                                 "APHRODITE_INT2KV_LEVELS": "minmax"}).fold_decode
    with pytest.raises(Int2ConfigError, match="DECODE_TILE=folded needs uniform levels"):
        Int2Options.from_env({**TOKENS, "APHRODITE_INT2KV_DECODE_TILE": "folded", "APHRODITE_INT2KV_LEVELS": "lloyd-max"})
    with pytest.raises(Int2ConfigError, match="DECODE_TILE='fast' is not one of auto, folded, per-code"):
        Int2Options.from_env({**TOKENS, "APHRODITE_INT2KV_DECODE_TILE": "fast"})
    L = SlotLayout(D, 32)
    with pytest.raises(ValueError, match="folded tile .* needs uniform levels"):
        int2_decode(torch.zeros(1, HKV, D), torch.zeros(1, 16, HKV, L.slot_bytes, dtype=torch.uint8),
                    torch.zeros(1, 1, dtype=torch.int32), torch.ones(1, dtype=torch.int32), L, 1.0, 1,
                    lloyd_max=True, fold=True)


# -- FORMAT=tiles: the long-context channel-tile format through the impl ------------------------

def _tile_reference(q, k_all, v_all, q_start, tiles_until, layout):
    """fp32 attention of q (positions q_start..) over k_all / v_all (original basis), where keys
    before `tiles_until` are read back from their tile records (Hadamard-rotated, K 3-bit / V 2-bit
    channel tiles, tile 0's first TILE_SINKS left out of its ranges) and the rest, and those
    sinks, exact."""
    from aphrodite_int2kv.engine.options import TILE_SINKS
    from aphrodite_int2kv.int2.tile_format import decode_tile

    H = hadamard(D).to(DEVICE)
    T = layout.tile
    nt = k_all.shape[0] // T
    k, v = k_all.clone(), v_all.clone()
    if nt:
        kr = R.rotate(k_all[:nt * T], H).view(nt, T, HKV, D).transpose(1, 2)
        vr = R.rotate(v_all[:nt * T], H).view(nt, T, HKV, D).transpose(1, 2)
        dk, dv = decode_tile(_tile_records(kr.cpu(), vr.cpu(), layout), layout)
        kq = R.rotate(dk.transpose(1, 2).reshape(-1, HKV, D).to(DEVICE), H.T)
        vq = R.rotate(dv.transpose(1, 2).reshape(-1, HKV, D).to(DEVICE), H.T)
        k[:min(tiles_until, nt * T)] = kq[:tiles_until]
        v[:min(tiles_until, nt * T)] = vq[:tiles_until]
        k[:TILE_SINKS], v[:TILE_SINKS] = k_all[:TILE_SINKS], v_all[:TILE_SINKS]
    return R.attend(q, k, v, D ** -0.5, causal_offset=q_start)


def _tile_records(kr, vr, layout, first=True):
    """The torch encoder's records of tiles [nt, H, T, D]; tile 0 of a sequence (`first`) without
    its sinks in the ranges."""
    from aphrodite_int2kv.engine.options import TILE_SINKS
    from aphrodite_int2kv.int2.tile_format import encode_tile

    sinks = torch.arange(layout.tile) < TILE_SINKS
    head = encode_tile(kr[:1], vr[:1], layout, exclude=sinks if first else None)
    return torch.cat([head, encode_tile(kr[1:], vr[1:], layout)]) if kr.shape[0] > 1 else head


@pytest.mark.parametrize("ring", [False, True])
def test_tile_format_in_the_engine_glue(engine, monkeypatch, ring):
    """APHRODITE_INT2KV_FORMAT=tiles through Int2AttentionImpl over several engine steps (prompts,
    a chunked continuation, decodes that cross tile ends, decodes and a prefill in one batch), on
    the paged window and on the ring window: a tile is quantized when its last token is stored, from
    the window and the step's K/V, into the page and record the block table gives (byte for byte the
    torch encoder's record); attention reads tiles before each chunk's window, the window and the
    chunk in full precision (as the reference does, to 1e-4), and never a tile that is not whole."""
    from aphrodite_int2kv.engine.backend import Int2AttentionImpl
    from aphrodite_int2kv.engine.window import Int2WindowMetadata
    from aphrodite_int2kv.int2.tile_format import TileLayout

    monkeypatch.setenv("APHRODITE_INT2KV_FORMAT", "tiles")
    monkeypatch.setenv("APHRODITE_INT2KV_RECENT_WINDOW", "96")
    impl = Int2AttentionImpl(HQ, D, D ** -0.5, HKV, None, None, "int2")
    RW, T, TBS = 96, 64, 128
    layout = TileLayout(D, T)
    assert impl.tiles == layout and impl.window == RW
    torch.manual_seed(5)
    layer = type("L", (), {"layer_name": "model.layers.0.self_attn.attn"})()
    cache = torch.full((10, TBS, HKV, layout.token_bytes), 0xEE, dtype=torch.uint8, device=DEVICE)
    block_table = torch.tensor([[3, 7, 1, 0], [5, 2, 9, 8]], dtype=torch.int32, device=DEVICE)
    WBS = 24 if not ring else 100        # ring: one page of W >= R tokens per request
    win = torch.full((30, WBS, HKV, 2 * D), float("nan"), device=DEVICE)    # unwritten entries poison
    k_win, v_win = win[..., :D], win[..., D:]
    wtable = (torch.randperm(29, device=DEVICE)[:28].view(2, 14) + 1).int()
    if ring:
        wtable[:, 1:] = 0                                  # every column but the first: the NaN page 0
    kk = [torch.randn(300, HKV, D, device=DEVICE) * (1 + 2 * torch.rand(300, 1, 1, device=DEVICE)) for _ in range(2)]
    vv = [torch.randn(300, HKV, D, device=DEVICE) for _ in range(2)]
    qq = [torch.randn(300, HQ, D, device=DEVICE) for _ in range(2)]
    lens = [0, 0]

    def step(q_lens):
        """One engine step: request r gets q_lens[r] new tokens (0: not scheduled); decodes first."""
        rows = sorted((r for r in (0, 1) if q_lens[r]), key=lambda r: q_lens[r] > 1)
        starts = {r: lens[r] for r in rows}
        for r in rows:
            lens[r] += q_lens[r]
        key, value, query = (torch.cat([x[r][starts[r]:lens[r]] for r in rows]) for x in (kk, vv, qq))
        n = key.shape[0]
        pos = [torch.arange(starts[r], lens[r], device=DEVICE) for r in rows]
        slots = torch.cat([block_table[r][p // TBS].long() * TBS + p % TBS for r, p in zip(rows, pos)])
        wsl = torch.cat([wtable[r][p // WBS].long() * WBS + p % WBS for r, p in zip(rows, pos)])
        wmeta = Int2WindowMetadata(block_table=wtable[rows], slot_mapping=wsl, ring=ring)
        impl._window_state = lambda layer, dtype: (k_win, v_win, wmeta)
        decodes = sum(q_lens[r] == 1 for r in rows)
        m = _meta([lens[r] for r in rows], [q_lens[r] for r in rows], block_table[rows], slots, decodes)
        impl.do_kv_cache_update(layer, key.reshape(n, -1), value.reshape(n, -1), engine_view(cache), slots,
                                attn_metadata=m)
        out = torch.empty(n, HQ * D, device=DEVICE)
        impl.forward(layer, query.reshape(n, -1), key.reshape(n, -1), value.reshape(n, -1), engine_view(cache), m,
                     output=out)
        out, at = out.view(n, HQ, D), 0
        for r in rows:
            s, e = starts[r], lens[r]
            want = _tile_reference(qq[r][s:e], kk[r][:e], vv[r][:e], s, max(0, s - (RW - 1)), layout)
            torch.testing.assert_close(out[at:at + e - s], want, atol=ATOL, rtol=0)
            at += e - s

    step([180, 70])            # prompts: A's two whole tiles are quantized from the chunk itself
    step([1, 60])              # A decodes; B's continuation completes tile 1 from window + chunk
    for _ in range(11):        # A decodes to 192 (tile 2 completes at position 191)
        step([1, 0])
    step([1, 1])
    step([3, 100])             # a 3-token chunk and B's continuation past two tile ends
    # every whole tile's record is the torch encoder's, at the page and record the block table gives
    H = hadamard(D).to(DEVICE)
    heads_first = cache.view(10, HKV, TBS, layout.token_bytes)      # the bytes of every engine version's pages
    for r in (0, 1):
        for t in range(lens[r] // T):
            page, j = int(block_table[r, t * T // TBS]), (t * T % TBS) // T
            tok = slice(t * T, (t + 1) * T)
            want = _tile_records(R.rotate(kk[r][tok], H).transpose(0, 1).cpu()[None],
                                 R.rotate(vv[r][tok], H).transpose(0, 1).cpu()[None], layout, first=t == 0)[0]
            got = heads_first[page, :, j * T:(j + 1) * T].reshape(HKV, -1)[:, :layout.used_bytes].cpu()
            assert torch.equal(got, want[:, :layout.used_bytes]), (r, t)
    # a tile not yet whole has no record: A's last tile is still only in the window
    t = lens[0] // T
    page, j = int(block_table[0, t * T // TBS]), (t * T % TBS) // T
    assert (heads_first[page, :, j * T:(j + 1) * T] == 0xEE).all()
