"""`int2` in the real engine's config, CLI, backend registry and KV sizing (CPU, both KV APIs)."""

from __future__ import annotations

import pytest
import torch

from aphrodite_int2kv.engine.options import Int2Options
from aphrodite_int2kv.int2.format import Int2ConfigError, SlotLayout
from aphrodite_int2kv_tests.conftest import TOKENS, run_python
from aphrodite_int2kv.engine.offline import build_int2_layers as _build_int2_layers
from aphrodite_int2kv.engine.offline import engine_specs as _engine_specs
from aphrodite_int2kv.engine.offline import heads_dir as _heads_dir
from aphrodite_int2kv.engine.offline import resolve_layout as _resolve_layout


@pytest.fixture(scope="module")
def registered(engine):
    import aphrodite_int2kv

    states = {o.name: o.state for o in aphrodite_int2kv.register()}
    assert states["int2-kv-cache-dtype"] == "applied", states
    return engine


def _dense_dir(tmp_path):
    from transformers import Qwen3Config

    Qwen3Config(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=128,
                max_position_embeddings=4096).save_pretrained(tmp_path)
    return str(tmp_path)


def test_cli_lists_and_parses_int2(engine):
    code = (
        "import argparse\n"
        "from aphrodite.engine.arg_utils import AsyncEngineArgs\n"
        "try:\n    from aphrodite.utils.argparse_utils import FlexibleArgumentParser\n"
        "except ImportError:\n    from aphrodite.utils import FlexibleArgumentParser\n"
        "p = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())\n"   # loads plugins first
        "act = next(a for a in p._actions if '--kv-cache-dtype' in a.option_strings)\n"
        "print('CHOICES', sorted(act.choices))\n"
        "print('PARSED', p.parse_args(['--kv-cache-dtype', 'int2']).kv_cache_dtype)\n"
        "try:\n    p.parse_args(['--kv-cache-dtype', 'int3'])\nexcept SystemExit:\n    print('REJECTED int3')\n"
    )
    res = run_python(code, cpu_platform=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "'int2'" in res.stdout.split("CHOICES", 1)[1].splitlines()[0]
    assert "PARSED int2" in res.stdout and "REJECTED int3" in res.stdout


def test_cache_config_accepts_int2_and_still_rejects_junk(registered):
    from pydantic import ValidationError

    from aphrodite.config.cache import CacheConfig

    assert CacheConfig(cache_dtype="int2").cache_dtype == "int2"
    with pytest.raises(ValidationError):
        CacheConfig(cache_dtype="int3")


def test_create_engine_config_with_int2_on_a_dense_model(registered, tmp_path):
    from aphrodite.engine.arg_utils import EngineArgs

    cfg = EngineArgs(model=_dense_dir(tmp_path), kv_cache_dtype="int2", max_model_len=1024,
                     skip_tokenizer_init=True).create_engine_config()
    assert cfg.cache_config.cache_dtype == "int2"
    from aphrodite.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE

    assert STR_DTYPE_TO_TORCH_DTYPE["int2"] is torch.uint8


def test_speculative_decoding_is_refused_at_start_up(registered, tmp_path):
    """int2 + speculative decoding is not verified: the worker's metadata builder stops start-up
    with an error naming the feature and the way out; without speculation nothing is raised."""
    from aphrodite.engine.arg_utils import EngineArgs

    from aphrodite_int2kv.engine.backend import check_engine_features
    from aphrodite_int2kv.int2.format import Int2ConfigError

    base = dict(model=_dense_dir(tmp_path), kv_cache_dtype="int2", max_model_len=1024, skip_tokenizer_init=True)
    check_engine_features(EngineArgs(**base).create_engine_config())
    try:
        cfg = EngineArgs(**base, speculative_config={"method": "ngram", "num_speculative_tokens": 2,
                                                     "prompt_lookup_max": 3}).create_engine_config()
    except Exception as exc:   # an engine version may refuse ngram on CPU before we can
        pytest.skip(f"this engine cannot build an ngram speculative config here: {exc}")
    with pytest.raises(Int2ConfigError, match="speculative decoding.*--speculative-config"):
        check_engine_features(cfg)


def test_custom_backend_slot_points_at_int2(registered):
    from aphrodite.v1.attention.backends.registry import AttentionBackendEnum

    from aphrodite_int2kv.engine.backend import Int2AttentionBackend

    cls = AttentionBackendEnum.CUSTOM.get_class()
    assert cls is Int2AttentionBackend
    assert cls.supports_kv_cache_dtype("int2") and not cls.supports_kv_cache_dtype("auto")
    assert AttentionBackendEnum[cls.get_name()] is AttentionBackendEnum.CUSTOM
    # no built-in backend claims int2, so int2 layers can only land on ours
    for name in ("TRITON_ATTN", "FLASH_ATTN"):
        try:
            other = AttentionBackendEnum[name].get_class()
        except Exception:
            continue
        assert not other.supports_kv_cache_dtype("int2"), name


@pytest.mark.usefixtures("tokens_format")
@pytest.mark.parametrize("head_size,heads,G", [(128, 2, 32), (256, 4, 64), (64, 3, 32)])
def test_kv_page_is_int2_bytes(registered, monkeypatch, head_size, heads, G):
    monkeypatch.setenv("APHRODITE_INT2KV_GROUP_SIZE", str(G))
    slot = SlotLayout(head_size, G).slot_bytes
    from aphrodite_int2kv.engine.backend import Int2AttentionBackend
    from aphrodite_int2kv.engine.kv_api import shape_based_kv_api

    if shape_based_kv_api():   # 0.21-0.23: the wrapped Attention.get_kv_cache_spec
        from aphrodite.model_executor.layers.attention.attention import Attention

        layer = type("L", (), dict(kv_cache_dtype="int2", num_kv_heads=heads, head_size=head_size,
                                   sliding_window=None, layer_name="model.layers.3.self_attn.attn"))()
        cfg = type("C", (), {"cache_config": type("CC", (), {"block_size": 16})()})()
        spec = Attention.get_kv_cache_spec(layer, cfg)
        assert Int2AttentionBackend.get_kv_cache_shape(7, 16, heads, head_size) == (7, 16, heads, slot)
    else:                      # 0.24: the backend customizes the engine's own spec
        from aphrodite.v1.kv_cache_interface import FullAttentionSpec

        spec = Int2AttentionBackend.customize_spec(FullAttentionSpec(
            block_size=16, num_kv_heads=heads, head_size=head_size, dtype=torch.uint8))
        bf16 = FullAttentionSpec(block_size=16, num_kv_heads=heads, head_size=head_size, dtype=torch.bfloat16)
        assert Int2AttentionBackend.customize_spec(bf16) is bf16   # skip layers stay bf16
    assert spec.page_size_bytes == 16 * heads * slot
    bf16_page = 16 * heads * head_size * 2 * 2
    assert bf16_page / spec.page_size_bytes == pytest.approx(SlotLayout(head_size, G).ratio_vs())


def test_int2_impl_refuses_what_it_cannot_serve(registered):
    from aphrodite_int2kv.engine.backend import Int2AttentionBackend, Int2AttentionImpl

    # a sliding-window layer never reaches int2 (the patch builds it with the local dtype)
    with pytest.raises(Int2ConfigError, match="sliding window of 256 tokens.*LOCAL_KV_DTYPE"):
        Int2AttentionImpl(4, 128, 128 ** -0.5, 2, None, 256, "int2")
    with pytest.raises(Int2ConfigError, match="head size 96"):
        Int2AttentionImpl(4, 96, 96 ** -0.5, 2, None, None, "int2")
    # learned attention sinks (gpt-oss): the tile format (the default) takes one logit per query head
    sinks = torch.nn.Parameter(torch.tensor([0.5, -2.0, 3.0, 0.0]), requires_grad=False)
    impl = Int2AttentionImpl(4, 64, 64 ** -0.5, 2, None, None, "int2", sinks=sinks)
    impl.process_weights_after_loading(torch.bfloat16)     # the kernels' log2 units, once per loading
    first = impl._sinks_log2
    assert torch.allclose(first, sinks * 1.4426950408889634)
    sinks.data.copy_(torch.ones(4))                         # reloaded weights: the same buffer, new values
    impl.process_weights_after_loading(torch.bfloat16)
    assert impl._sinks_log2 is first and torch.allclose(first, torch.full((4,), 1.4426950408889634))
    with pytest.raises(Int2ConfigError, match=r"attention sinks of shape \(8,\) for 4 query heads"):
        Int2AttentionImpl(4, 64, 64 ** -0.5, 2, None, None, "int2", sinks=torch.zeros(8))
    assert Int2AttentionBackend.supports_sink()
    Int2AttentionImpl(4, 128, 128 ** -0.5, 2, None, None, "int2")  # the supported case builds


@pytest.mark.usefixtures("tokens_format")
def test_the_per_token_format_refuses_attention_sinks(registered):
    from aphrodite_int2kv.engine.backend import Int2AttentionImpl

    with pytest.raises(Int2ConfigError, match="attention sinks with APHRODITE_INT2KV_FORMAT=tokens"):
        Int2AttentionImpl(4, 64, 64 ** -0.5, 2, None, None, "int2", sinks=torch.zeros(4))


@pytest.mark.parametrize("env,match", [
    ({**TOKENS, "APHRODITE_INT2KV_GROUP_SIZE": "48"}, "GROUP_SIZE=48 is not 'auto' or one of"),
    ({**TOKENS, "APHRODITE_INT2KV_GROUP_SIZE": "abc"}, "GROUP_SIZE='abc' is not 'auto' or one of"),
    ({**TOKENS, "APHRODITE_INT2KV_K_CLIP": "1.7", "APHRODITE_INT2KV_LEVELS": "minmax"}, "K_CLIP: clip ratio 1.7"),
    ({**TOKENS, "APHRODITE_INT2KV_LEVELS": "lloyd-max", "APHRODITE_INT2KV_V_CLIP": "0.9"}, "V_CLIP=0.9.*'lloyd-max'"),
    ({**TOKENS, "APHRODITE_INT2KV_K_CLIP": "0.9"}, "K_CLIP=0.9: clip ratios shrink the min/max range only.*LEVELS=minmax"),
    ({**TOKENS, "APHRODITE_INT2KV_LEVELS": "lloyd"}, "LEVELS='lloyd' is not one of std, minmax, lloyd-max"),
    ({"APHRODITE_INT2KV_LLOYD_MAX": "1"}, "LLOYD_MAX was replaced by APHRODITE_INT2KV_LEVELS"),
    ({"APHRODITE_INT2KV_K_ROTATION": "/nope/rot.pt"}, "K_ROTATION='/nope/rot.pt'"),
    ({**TOKENS, "APHRODITE_INT2KV_K_CENTER_SKIP": "-1"}, "K_CENTER_SKIP=-1 must be between 0 and 256"),
    ({"APHRODITE_INT2KV_K_CENTER_SKIP": "four"}, "K_CENTER_SKIP='four' is not an integer"),
    ({**TOKENS, "APHRODITE_INT2KV_RECENT_WINDOW": "-5"}, "RECENT_WINDOW=-5 must be between 0 .off. and 65536"),
    ({"APHRODITE_INT2KV_RECENT_WINDOW": "1k"}, "RECENT_WINDOW='1k' is not an integer"),
    ({"APHRODITE_INT2KV_FORMAT": "tile"}, "FORMAT='tile' is not one of tiles, tokens"),
    ({"APHRODITE_INT2KV_LOCAL_KV_DTYPE": "int2"}, "LOCAL_KV_DTYPE='int2' is not one of auto, fp8"),
    ({"APHRODITE_INT2KV_FORMAT": "tiles", "APHRODITE_INT2KV_GROUP_SIZE": "32"},
     "GROUP_SIZE: setting.s. of the per-token format, which APHRODITE_INT2KV_FORMAT=tiles does not use"),
    ({"APHRODITE_INT2KV_FORMAT": "tiles", "APHRODITE_INT2KV_RECENT_WINDOW": "32"},
     "RECENT_WINDOW=32: APHRODITE_INT2KV_FORMAT=tiles keeps a tile's tokens in the recent window.*at least 64"),
    # the per-token settings without FORMAT: the default (tiles) does not use them, and says so
    ({"APHRODITE_INT2KV_LEVELS": "minmax"},
     "LEVELS: setting.s. of the per-token format, which APHRODITE_INT2KV_FORMAT=tiles .the default. does not "
     "use; unset them, or set APHRODITE_INT2KV_FORMAT=tokens"),
    ({"APHRODITE_INT2KV_RECENT_WINDOW": "0"}, "RECENT_WINDOW=0: .*a smaller window needs APHRODITE_INT2KV_FORMAT=tokens"),
])
def test_option_errors_name_the_variable(env, match):
    with pytest.raises(Int2ConfigError, match=match):
        Int2Options.from_env(env)


def test_tile_format_option():
    """FORMAT=tiles, the default: no K centering (the per-channel zeros take the offset), bytes per
    token of a 64-token tile record; FORMAT=tokens gives the per-token slots."""
    from aphrodite_int2kv.engine.options import slot_bytes_for

    t = Int2Options.from_env({"APHRODITE_INT2KV_FORMAT": " Tiles "})
    assert t.tiles and (t.k_center_first, t.k_center_skip) == (0, 0)
    assert [slot_bytes_for(d, t) for d in (64, 128, 256)] == [49, 93, 181]
    assert "format=tiles (K 3-bit / V 2-bit" in t.describe(128)
    assert Int2Options.from_env({}) == t and Int2Options.from_env({}).tiles
    tok = Int2Options.from_env(TOKENS)
    assert not tok.tiles and slot_bytes_for(128, tok) == 80
    # 4-bit keys: a second 2-bit plane (T D / 8 bytes more per record than the 3-bit high plane)
    k4 = Int2Options.from_env({"APHRODITE_INT2KV_K_BITS": "4"})
    assert k4.k_bits == 4 and [slot_bytes_for(d, k4) for d in (64, 128, 256)] == [57, 109, 213]
    assert "format=tiles (K 4-bit / V 2-bit" in k4.describe(128)
    with pytest.raises(Int2ConfigError, match="K_BITS=2 is not one of 3, 4"):
        Int2Options.from_env({"APHRODITE_INT2KV_K_BITS": "2"})
    with pytest.raises(Int2ConfigError, match="K_BITS is a setting of the tile format"):
        Int2Options.from_env({**TOKENS, "APHRODITE_INT2KV_K_BITS": "4"})


def test_options_defaults_and_values():
    assert Int2Options.from_env({}) == Int2Options() and Int2Options().tiles
    d = Int2Options.from_env(TOKENS)   # the per-token format's measured defaults (benchmarks/results/quality_smollm2.json)
    assert (d.levels, d.std_range, d.lloyd_max) == ("std", True, False)
    o = Int2Options.from_env({**TOKENS, "APHRODITE_INT2KV_GROUP_SIZE": "64", "APHRODITE_INT2KV_LEVELS": "minmax",
                              "APHRODITE_INT2KV_V_ROTATION": "none", "APHRODITE_INT2KV_K_CLIP": "0.9"})
    assert (o.group_size, o.std_range, o.lloyd_max, o.v_rotation, o.k_clip) == (64, False, False, "none", 0.9)
    assert Int2Options.from_env({**TOKENS, "APHRODITE_INT2KV_LEVELS": "lloyd-max"}).lloyd_max
    # data-free K centering is on by default in the per-token format (16 keys); 0 or 'auto' can be given
    assert (d.k_center_first, d.k_center_skip) == (16, 4) and "first 16 keys" in d.describe()
    assert Int2Options.from_env({**TOKENS, "APHRODITE_INT2KV_K_CENTER_FIRST": "0"}).k_center_first == 0
    assert Int2Options.from_env({**TOKENS, "APHRODITE_INT2KV_K_CENTER_FIRST": "auto"}).k_center_first == 16


def _hybrid_dir(tmp_path):
    from transformers import Qwen3NextConfig

    Qwen3NextConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=256,
                    linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
                    linear_num_key_heads=2, linear_num_value_heads=4, num_experts=4,
                    num_experts_per_tok=2, moe_intermediate_size=64, shared_expert_intermediate_size=64,
                    decoder_sparse_step=1, mlp_only_layers=[],
                    layer_types=["linear_attention"] * 3 + ["full_attention"],
                    max_position_embeddings=4096).save_pretrained(tmp_path)
    return str(tmp_path)


@pytest.mark.usefixtures("tokens_format")
def test_hybrid_pages_carry_int2_capacity(registered, tmp_path):
    """Qwen3-Next-style hybrid (1 attention layer in 4): the attention page is sized from int2's
    real bytes and the GDN state page is padded to it, so a page holds 6.4x the tokens of bf16's
    (G = 64, the default at head_dim 256) for ~half the bytes. Without the alignment fix the int2
    page would be sized at 8 bits."""
    from aphrodite.engine.arg_utils import EngineArgs
    from aphrodite.platforms.interface import Platform

    from aphrodite_int2kv.engine.backend import Int2AttentionBackend

    model = _hybrid_dir(tmp_path)
    pages = {}
    for kv in ("auto", "int2"):
        cfg = EngineArgs(model=model, kv_cache_dtype=kv, max_model_len=1024,
                         skip_tokenizer_init=True).create_engine_config()
        Platform._align_hybrid_block_size(cfg, Int2AttentionBackend)
        per_token = 2 * SlotLayout(256, 64).slot_bytes if kv == "int2" else 2 * 2 * 256 * 2
        cc = cfg.cache_config
        pages[kv] = (cc.block_size, cc.block_size * per_token)
        assert cc.mamba_page_size_padded in (None, cc.block_size * per_token)
    (bf16_tokens, bf16_bytes), (int2_tokens, int2_bytes) = pages["auto"], pages["int2"]
    tokens_per_byte = (int2_tokens / int2_bytes) / (bf16_tokens / bf16_bytes)
    assert tokens_per_byte == pytest.approx(SlotLayout(256, 64).ratio_vs()) == pytest.approx(6.4)
    assert int2_bytes < bf16_bytes  # the shared page (attention or GDN state) got smaller


def test_hybrid_alignment_without_the_fix_sizes_int2_as_bytes(registered, tmp_path):
    from aphrodite.engine.arg_utils import EngineArgs
    from aphrodite.platforms.interface import Platform

    from aphrodite_int2kv.engine.backend import Int2AttentionBackend
    from aphrodite_int2kv.engine.kv_api import shape_based_kv_api

    if not shape_based_kv_api():
        pytest.skip("0.24 sizes hybrid pages through the backend's customize_spec: no fix needed")
    upstream = Platform.__dict__["_align_hybrid_block_size"].__func__.__wrapped__
    cfg = EngineArgs(model=_hybrid_dir(tmp_path), kv_cache_dtype="int2", max_model_len=1024,
                     skip_tokenizer_init=True).create_engine_config()
    upstream(Platform, cfg, Int2AttentionBackend)
    eight_bit_per_token = 2 * 2 * 256  # K+V, 2 heads, 256 dims, 1 byte each
    assert cfg.cache_config.mamba_page_size_padded == cfg.cache_config.block_size * eight_bit_per_token


def test_shared_pages_fit_int2_to_the_local_pages():
    """The int2 block is the smallest multiple of a tile whose page, padded to a whole number of
    16-token local pages, wastes <= 5 %; a user's block is kept as given."""
    from aphrodite_int2kv.engine.local_layers import shared_pages

    def fit(head, local_bytes_per_elem=2, heads=1, block=None):
        p = shared_pages(heads * slot_bytes_for(head, Int2Options()), heads * 2 * head * local_bytes_per_elem, block)
        return p.int2_block, p.local_block, round(p.waste, 3)

    from aphrodite_int2kv.engine.options import slot_bytes_for

    assert fit(128) == (256, 48, 0.031) == fit(128, heads=16)      # 23,808 of 24,576 B per KV head
    assert fit(256) == (448, 80, 0.01)
    assert fit(64) == (320, 64, 0.043)
    assert fit(128, local_bytes_per_elem=1) == (128, 48, 0.031)    # fp8 local layers: half the bytes, half the block
    assert fit(128, block=128) == (128, 32, 0.273)                 # --block-size 128: kept, 27 % padding
    with pytest.raises(Int2ConfigError, match="no page size fits both"):
        from aphrodite_int2kv.engine.local_layers import shared_pages as sp
        sp(512, 512)


@pytest.mark.parametrize("local_dtype", ["auto", "fp8"])
def test_sliding_window_layers_keep_the_engine_cache_beside_int2(registered, tmp_path, monkeypatch, local_dtype):
    """Gemma-3-style (5 local : 1 global): under --kv-cache-dtype int2 the global layers are int2 on
    our backend; the local layers are built by the engine with the local dtype (model dtype or fp8)
    and the engine's own backend; the engine's config object keeps int2."""
    from aphrodite.engine.arg_utils import EngineArgs

    from aphrodite_int2kv.engine.backend import Int2AttentionBackend
    from aphrodite_int2kv.engine.offline import build_int2_layers

    monkeypatch.setenv("APHRODITE_INT2KV_LOCAL_KV_DTYPE", local_dtype)
    cfg = EngineArgs(model=_dense_long_dir(tmp_path), kv_cache_dtype="int2", max_model_len=32768,
                     skip_tokenizer_init=True).create_engine_config()
    layers = build_int2_layers(cfg, 12, window=1024)
    local = [l for i, l in enumerate(layers) if (i + 1) % 6]
    glob = [layers[5], layers[11]]
    assert {l.kv_cache_dtype for l in local} == {local_dtype} and {l.sliding_window for l in local} == {1024}
    assert all(not issubclass(l.attn_backend, Int2AttentionBackend) for l in local)
    assert {l.kv_cache_dtype for l in glob} == {"int2"} and all(l.attn_backend is Int2AttentionBackend for l in glob)
    assert cfg.cache_config.cache_dtype == "int2"
    ctx = cfg.compilation_config.static_forward_context
    assert sorted(n for n in ctx if n.endswith(".int2_window")) == [
        "model.layers.11.self_attn.attn.int2_window", "model.layers.5.self_attn.attn.int2_window"]


def _gemma_configs(tmp_path, max_model_len, local_dtype=None, monkeypatch=None, n=12):
    """(bf16 config, int2 config) of a Gemma-3-style stack with Qwen3-8B-like heads (32 q / 8 KV of
    128, window 1024), every layer built as the model builds it."""
    from aphrodite.engine.arg_utils import EngineArgs
    from aphrodite.config import set_current_aphrodite_config

    from aphrodite_int2kv.engine.backend import Int2AttentionBackend
    from aphrodite_int2kv.engine.offline import build_int2_layers

    model = _heads_dir(tmp_path, 32, 8, 128, max_positions=max_model_len)
    out = []
    for kv in ("auto", "int2"):
        cfg = EngineArgs(model=model, kv_cache_dtype=kv, max_model_len=max_model_len,
                         skip_tokenizer_init=True).create_engine_config()
        build_int2_layers(cfg, n, "int2" if kv == "int2" else "platform", window=1024)
        if kv == "int2":
            with set_current_aphrodite_config(cfg):      # what update_block_size_for_backend asks
                cfg.cache_config.block_size = Int2AttentionBackend.get_preferred_block_size(16)
        out.append(cfg)
    return out


def test_sliding_window_model_pages_share_one_size_and_int2_saves(registered, tmp_path):
    """The engine's own get_kv_cache_configs accepts the mix on both engine generations (0.21 used
    to fail with "page size not divisible", 0.24 to pad int2 up to bf16): the local pages (48 bf16
    tokens) are the shared page, exactly filled; the int2 pages (256 tokens) and the windows' are
    padded to it; capacity by the engine's own arithmetic is 2.2x bf16's at 32K (5 local layers of
    1,024 tokens budgeted a window plus a 2,048-token prefill chunk per request by the engine) and
    3.4x at 128K."""
    from aphrodite.v1.core.kv_cache_utils import get_kv_cache_configs, get_max_concurrency_for_kv_cache_config
    from aphrodite.v1.kv_cache_interface import SlidingWindowSpec

    from aphrodite_int2kv.engine import local_layers

    scans = []
    real = local_layers._model_pages
    ratios = {}
    for ctx in (32768, 131072):
        bf16, int2 = _gemma_configs(tmp_path / str(ctx), ctx)

        assert int2.cache_config.block_size == 256
        local_layers._model_pages = lambda cfg: scans.append(cfg) or real(cfg)
        try:
            specs = _engine_specs(int2)
        finally:
            local_layers._model_pages = real
        # the 14 specs of this model come from one look at its layers (it was seen once already,
        # choosing the block size), not a scan of all layers per spec
        assert scans == [] and len(specs) == 14
        local = specs["model.layers.0.self_attn.attn"]
        glob = specs["model.layers.5.self_attn.attn"]
        win = specs["model.layers.5.self_attn.attn.int2_window"]
        assert isinstance(local, SlidingWindowSpec) and local.dtype == torch.bfloat16 and local.block_size == 48
        assert local.page_size_padded is None and local.page_size_bytes == 48 * 8 * 128 * 2 * 2
        assert glob.block_size == 256 and glob.page_size_padded == local.page_size_bytes
        assert glob.real_page_size_bytes == 256 * 8 * 93
        assert win.page_size_bytes == local.page_size_bytes and win.block_size == 32
        concurrency = {}
        for name, cfg, sp in (("bf16", bf16, _engine_specs(bf16)), ("int2", int2, specs)):
            _resolve_layout(cfg, None if name == "int2" else [])
            (conf,) = get_kv_cache_configs(cfg, [sp], [8 << 30])
            assert len({g.kv_cache_spec.page_size_bytes for g in conf.kv_cache_groups}) == 1
            concurrency[name] = get_max_concurrency_for_kv_cache_config(cfg, conf)
        ratios[ctx] = concurrency["int2"] / concurrency["bf16"]
    assert 2.1 < ratios[32768] < 2.3 and 3.3 < ratios[131072] < 3.6, ratios


def test_a_model_with_no_int2_layer_is_refused(registered, tmp_path):
    """Every layer local (a model-level sliding window, Mistral-7B-v0.1 style): int2 would be
    active on none; the first spec asked says so instead of serving bf16 under an int2 flag."""
    from aphrodite.engine.arg_utils import EngineArgs
    from aphrodite.config import set_current_aphrodite_config
    from aphrodite.model_executor.layers.attention.attention import Attention

    cfg = EngineArgs(model=_dense_long_dir(tmp_path), kv_cache_dtype="int2", max_model_len=8192,
                     skip_tokenizer_init=True).create_engine_config()
    hf = cfg.model_config.hf_config
    with set_current_aphrodite_config(cfg):
        layer = Attention(hf.num_attention_heads, hf.head_dim, hf.head_dim ** -0.5, num_kv_heads=hf.num_key_value_heads,
                          cache_config=cfg.cache_config, prefix="model.layers.0.self_attn.attn",
                          per_layer_sliding_window=4096)
    assert layer.kv_cache_dtype == "auto"
    with pytest.raises(Int2ConfigError, match="no attention layer of this model takes int2.*auto or fp8"):
        layer.get_kv_cache_spec(cfg)


def test_a_hybrid_model_with_sliding_window_layers_is_refused(registered, tmp_path):
    """GDN state pages beside two attention page sizes: not sized yet, refused with the reason."""
    from aphrodite.engine.arg_utils import EngineArgs
    from aphrodite.config import set_current_aphrodite_config
    from aphrodite.model_executor.layers.attention.attention import Attention

    from aphrodite_int2kv.engine.backend import Int2AttentionBackend
    from aphrodite_int2kv.engine.local_layers import model_pages

    cfg = EngineArgs(model=_hybrid_dir(tmp_path), kv_cache_dtype="int2", max_model_len=1024,
                     skip_tokenizer_init=True).create_engine_config()
    with set_current_aphrodite_config(cfg):
        for i, extra in ((2, {"per_layer_sliding_window": 256}), (3, {"attn_backend": Int2AttentionBackend})):
            Attention(4, 256, 256 ** -0.5, num_kv_heads=2, cache_config=cfg.cache_config,
                      prefix=f"model.layers.{i}.self_attn.attn", **extra)
    with pytest.raises(Int2ConfigError, match="hybrid .GDN/Mamba. model does not support attention layers kept out"
                                              " of int2 .layers 2: sliding windows"):
        model_pages(cfg)


def test_start_up_line_names_the_int2_and_the_local_layers(registered, tmp_path):
    from aphrodite_int2kv.engine.local_layers import describe, layer_ranges

    _, int2 = _gemma_configs(tmp_path, 32768)
    line = describe(int2)
    assert "10 sliding-window layers (window 1024) (layers 0-4, 6-10) keep the engine's own auto cache" in line
    assert "pages of 48 tokens, the int2 pages of 256 tokens padded to them (3.1% padding)" in line
    assert layer_ranges(["model.layers.5.self_attn.attn", "model.layers.11.self_attn.attn"]) == "layers 5, 11"


def test_int2_on_a_non_cuda_platform_stops_at_layer_build(registered, tmp_path):
    """The CPU platform selects its own attention backend for an int2 layer: start-up must stop there
    with the reason, not run int2 pages through another backend."""
    from aphrodite.engine.arg_utils import EngineArgs

    cfg = EngineArgs(model=_dense_long_dir(tmp_path), kv_cache_dtype="int2", max_model_len=4096,
                     skip_tokenizer_init=True).create_engine_config()
    with pytest.raises(Int2ConfigError, match="needs the CUDA platform.*CpuPlatform"):
        _build_int2_layers(cfg, 1, backend="platform")


def _dense_long_dir(tmp_path):
    """Qwen3-8B-like heads (32q / 8kv of 128)."""
    return _heads_dir(tmp_path, 32, 8, 128, max_positions=32768)


def _bf16_tokens(model, specs, mem, max_model_len, block_size=16):
    """The tokens the engine's own KV config gives bf16 KV in `mem` bytes: one bf16 full-attention
    spec (of the model's KV heads and head size) for every int2 layer of `specs`."""
    from aphrodite.engine.arg_utils import EngineArgs
    from aphrodite.v1.core.kv_cache_utils import get_kv_cache_configs, get_max_concurrency_for_kv_cache_config
    from aphrodite.v1.kv_cache_interface import FullAttentionSpec

    cfg = EngineArgs(model=model, max_model_len=max_model_len, skip_tokenizer_init=True).create_engine_config()
    kv_heads = cfg.model_config.get_num_kv_heads(cfg.parallel_config)
    bf16 = {n: FullAttentionSpec(block_size=block_size, num_kv_heads=kv_heads,
                                 head_size=cfg.model_config.get_head_size(), dtype=torch.bfloat16)
            for n in specs if not n.endswith(".int2_window")}
    _resolve_layout(cfg)
    (conf,) = get_kv_cache_configs(cfg, [bf16], [mem])
    return get_max_concurrency_for_kv_cache_config(cfg, conf) * max_model_len


@pytest.mark.usefixtures("tokens_format")
def test_recent_window_is_an_engine_sliding_window_group_and_capacity_stays_5x(registered, tmp_path, monkeypatch):
    """Each int2 layer gets a full-precision companion whose spec is a SlidingWindowSpec(R) with a
    page of exactly the int2 page's bytes; the engine's own grouping puts the windows in their own
    group and its own capacity arithmetic (max concurrency x max_model_len, as the start-up line
    reports it) still gives >= 5x bf16's tokens at 32K (Qwen3-8B-like heads; 5.87x with the default
    G = 64)."""
    from aphrodite.config import set_current_aphrodite_config
    from aphrodite.engine.arg_utils import EngineArgs
    from aphrodite.v1.core.kv_cache_utils import get_kv_cache_configs, get_max_concurrency_for_kv_cache_config
    from aphrodite.v1.kv_cache_interface import SlidingWindowSpec

    from aphrodite_int2kv.engine.backend import Int2AttentionBackend

    monkeypatch.delenv("APHRODITE_INT2KV_RECENT_WINDOW", raising=False)
    model = _dense_long_dir(tmp_path)
    cfg = EngineArgs(model=model, kv_cache_dtype="int2", max_model_len=32768,
                     skip_tokenizer_init=True).create_engine_config()
    with set_current_aphrodite_config(cfg):
        assert Int2AttentionBackend.get_preferred_block_size(16) == 128   # what the CUDA platform asks
    cfg.cache_config.block_size = 128
    _build_int2_layers(cfg, 4)
    specs = _engine_specs(cfg)
    windows = {n: s for n, s in specs.items() if n.endswith(".int2_window")}
    assert len(windows) == 4 and len(specs) == 8
    w = next(iter(windows.values()))
    int2 = specs["model.layers.0.self_attn.attn"]
    assert isinstance(w, SlidingWindowSpec) and w.sliding_window == 128 and w.dtype == torch.bfloat16
    assert w.block_size == 20 and w.page_size_bytes == int2.page_size_bytes   # 128 x 80 B = 20 x 512 B per head

    mem = 8 << 30
    _resolve_layout(cfg)
    (conf,) = get_kv_cache_configs(cfg, [specs], [mem])
    assert sorted(g.kv_cache_spec.block_size for g in conf.kv_cache_groups) == [20, 128]
    int2_tokens = get_max_concurrency_for_kv_cache_config(cfg, conf) * 32768
    ratio = int2_tokens / _bf16_tokens(model, specs, mem, 32768)
    from aphrodite_int2kv.engine.window import window_budget_managed

    assert window_budget_managed()   # our window manager on 0.21-0.23 and 0.24
    # 6.4x for int2 alone; our window manager budgets 2 x 8 pages of 20 tokens per request for
    # the windows before and after a chunk, plus 7 for the window of a prefix-hit point
    # (9 % of the 256 int2 pages at 32K). (0.24's own sliding-window budget, a window plus a
    # prefill chunk, gave 1.44x-3.9x: benchmarks/results/window_capacity_cpu.json.)
    assert w.max_admission_blocks_per_request(2048, 32768) == 23
    cfg.cache_config.enable_prefix_caching = False        # no hit points to keep: 2 x 8 pages
    off = _engine_specs(cfg)[next(iter(windows))]
    assert off.hit_alignment == 0 and off.max_admission_blocks_per_request(2048, 32768) == 16
    cfg.cache_config.enable_prefix_caching = True
    assert ratio == pytest.approx(SlotLayout(128, 64).ratio_vs() * 256 / (256 + 23), rel=0.01), ratio
    assert 5.0 <= ratio, ratio


@pytest.mark.usefixtures("tokens_format")
def test_window_off_registers_no_companion(registered, tmp_path, monkeypatch):
    from aphrodite.engine.arg_utils import EngineArgs

    monkeypatch.setenv("APHRODITE_INT2KV_RECENT_WINDOW", "0")
    cfg = EngineArgs(model=_dense_long_dir(tmp_path), kv_cache_dtype="int2", max_model_len=4096,
                     skip_tokenizer_init=True).create_engine_config()
    _build_int2_layers(cfg, 2)
    assert [n for n in cfg.compilation_config.static_forward_context if n.endswith(".int2_window")] == []


def test_missing_companions_stop_start_up(registered, tmp_path):
    from aphrodite.engine.arg_utils import EngineArgs

    from aphrodite_int2kv.engine.backend import check_window_companions

    cfg = EngineArgs(model=_dense_long_dir(tmp_path), kv_cache_dtype="int2", max_model_len=4096,
                     skip_tokenizer_init=True).create_engine_config()
    with pytest.raises(Int2ConfigError, match="window caches of 1 int2 layers.*RECENT_WINDOW=0"):
        check_window_companions(cfg, ["model.layers.0.self_attn.attn"])
    _build_int2_layers(cfg, 1)
    check_window_companions(cfg, ["model.layers.0.self_attn.attn"])


def test_window_page_must_be_whole_tokens():
    from aphrodite_int2kv.engine.window import window_block_size

    assert window_block_size(2128, 256, SlotLayout(256, 32).slot_bytes) == 399   # the hybrid27b page
    assert window_block_size(256, 128, SlotLayout(128, 64).slot_bytes) == 40
    with pytest.raises(Int2ConfigError, match="multiple of 32 .*--block-size.*RECENT_WINDOW=0"):
        window_block_size(16 * 133, 128, SlotLayout(128, 64).slot_bytes)


@pytest.mark.usefixtures("tokens_format")
def test_hybrid_window_page_equals_the_gdn_state_page(registered, tmp_path):
    """On the hybrid the aligned attention page (= the padded GDN state page) also holds a whole
    number of window tokens, so the three page sizes agree: with the window on, the backend asks
    for pages in multiples of 32 tokens at G = 64 (16 is enough for the kernels)."""
    from aphrodite.engine.arg_utils import EngineArgs
    from aphrodite.platforms.interface import Platform

    from aphrodite_int2kv.engine.backend import Int2AttentionBackend
    from aphrodite_int2kv.engine.window import window_block_size

    cfg = EngineArgs(model=_hybrid_dir(tmp_path), kv_cache_dtype="int2", max_model_len=1024,
                     skip_tokenizer_init=True).create_engine_config()
    cfg.cache_config.block_size = 16   # the CUDA platform's starting point (the CPU platform's is 128)
    Platform._align_hybrid_block_size(cfg, Int2AttentionBackend)
    cc = cfg.cache_config
    # 0.21: the GDN state needs 432 tokens of int2 page; a multiple of 16 would give 432 x 160 B per
    # head, 67.5 window tokens (the tiny Qwen3.5 on the H200 stopped there): 448 = 14 x 32 holds 70.
    # (0.24 sizes the hybrid page through the backend's spec and lands on another multiple of 32.)
    from aphrodite_int2kv.engine.kv_api import shape_based_kv_api

    assert cc.block_size % 32 == 0
    if shape_based_kv_api():
        assert cc.block_size == 448
    slot = SlotLayout(256, 64).slot_bytes
    wbs = window_block_size(cc.block_size, 256, slot)
    assert wbs * 2 * 256 * 2 == cc.block_size * slot
    assert cc.mamba_page_size_padded in (None, cc.block_size * 2 * slot)


def _manager_kwargs(factory, batched_tokens, block_size):
    """get_manager_for_kv_cache_spec's budget argument: max_num_batched_tokens (0.21) or
    max_in_flight_tokens plus the scheduler block size (0.24)."""
    import inspect

    params = inspect.signature(factory).parameters
    if "max_in_flight_tokens" in params:
        return {"max_in_flight_tokens": batched_tokens, "scheduler_block_size": block_size}
    return {"max_num_batched_tokens": batched_tokens}


def _middle_args(mgr, computed):
    """0.24's get_num_blocks_to_allocate takes num_local_computed_tokens before num_tokens_main_model."""
    import inspect

    from aphrodite.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    params = inspect.signature(SlidingWindowManager.get_num_blocks_to_allocate).parameters
    return (computed,) if "num_local_computed_tokens" in params else ()


def _window_manager(spec, num_blocks):
    """Our window manager as the engine builds it for `spec`, over a fresh BlockPool (no caching)."""
    from aphrodite.v1.core.block_pool import BlockPool
    from aphrodite.v1.core.single_type_kv_cache_manager import get_manager_for_kv_cache_spec

    from aphrodite_int2kv.engine.window import Int2WindowManager

    pool = BlockPool(num_gpu_blocks=num_blocks, enable_caching=False, hash_block_size=spec.block_size)
    mgr = get_manager_for_kv_cache_spec(spec, **_manager_kwargs(get_manager_for_kv_cache_spec, 2048, spec.block_size),
                                        max_model_len=32768, block_pool=pool, enable_caching=False,
                                        kv_cache_group_id=1)
    assert isinstance(mgr, Int2WindowManager)
    return mgr, pool


def _schedule(mgr, computed, num_tokens):
    """One scheduler step of request "r" (computed -> num_tokens): drop what slid out, count, then
    allocate. Returns (the count, the new blocks)."""
    mgr.remove_skipped_blocks("r", computed)
    need = mgr.get_num_blocks_to_allocate("r", num_tokens, [], computed, *_middle_args(mgr, computed), num_tokens)
    if computed == 0:
        (getattr(mgr, "allocate_new_computed_blocks", None) or mgr.add_local_computed_blocks)("r", [], 0, 0)
    return need, mgr.allocate_new_blocks("r", num_tokens, num_tokens)


@pytest.mark.parametrize("sinks", [0, 4])
def test_window_manager_keeps_only_the_live_window_pages(registered, sinks):
    """The engine's BlockPool driven as its scheduler does (remove_skipped_blocks, count,
    allocate per step) through our window manager: chunked prefill then decode. After each step
    exactly the pages of positions >= L - R + 1 are real, the budget is never exceeded, the count
    predicts the allocation, the worker's block table (the first step's full list, then each step's
    returned blocks appended, as the scheduler sends them) maps every live position to its page,
    and every page returns to the pool at the end. With sinks (FORMAT=tiles) the first page is held
    too, from the first step to the end."""
    from aphrodite_int2kv.engine.window import Int2WindowSpec, window_budget_managed

    assert window_budget_managed()
    R, W = 128, 48
    spec = Int2WindowSpec(block_size=W, num_kv_heads=8, head_size=128, dtype=torch.bfloat16, sliding_window=R,
                          sinks=sinks)
    mgr, pool = _window_manager(spec, 200)
    cap = spec.max_admission_blocks_per_request(2048, 32768)
    free0 = pool.get_num_free_blocks()
    computed, peak, table = 0, 0, []
    steps = [256, 512, 768, 1000] + list(range(1001, 1061))
    for num_tokens in steps:
        need, new = _schedule(mgr, computed, num_tokens)
        assert len([b for b in new if not b.is_null]) == need
        blocks = mgr.req_to_blocks["r"]
        table = [b.block_id for b in blocks] if computed == 0 else table + [b.block_id for b in new]
        assert len(table) == len(blocks)
        assert all(table[i] == blocks[i].block_id for i in range(len(blocks)) if not blocks[i].is_null)
        real = [i for i, b in enumerate(blocks) if not b.is_null]
        peak = max(peak, len(real))
        first_live = max(0, num_tokens - R + 1) // W
        assert all(not blocks[i].is_null for i in range(first_live, len(blocks)))   # the window has pages
        assert blocks[0].is_null == (not sinks and first_live > 0)                   # the sinks' page
        assert len(blocks) == -(-num_tokens // W)
        computed = num_tokens
    assert peak <= cap < 11                  # the engine's own SlidingWindowManager budgets 47 pages here
    mgr.remove_skipped_blocks("r", computed)
    real = [i for i, b in enumerate(mgr.req_to_blocks["r"]) if not b.is_null]
    assert len(real) <= -(-(R - 1) // W) + 1 + (1 if sinks else 0) and (0 in real) == bool(sinks)
    mgr.free("r")
    assert pool.get_num_free_blocks() == free0


def test_window_metadata_builder_builds(registered, tmp_path):
    """The engine instantiates the companion's builder per KV-cache group: it must construct with the
    engine's arguments and hand the window group's block table and slots through."""
    from aphrodite.engine.arg_utils import EngineArgs

    from aphrodite_int2kv.engine.window import Int2WindowBackend, Int2WindowSpec

    cfg = EngineArgs(model=_dense_long_dir(tmp_path), kv_cache_dtype="int2", max_model_len=4096,
                     skip_tokenizer_init=True).create_engine_config()
    spec = Int2WindowSpec(block_size=48, num_kv_heads=8, head_size=128, dtype=torch.bfloat16, sliding_window=128)
    builder = Int2WindowBackend.get_builder_cls()(spec, ["model.layers.0.self_attn.attn.int2_window"], cfg,
                                                   torch.device("cpu"))
    cam = type("CAM", (), dict(block_table_tensor=torch.arange(6).view(2, 3), slot_mapping=torch.arange(5)))()
    meta = builder.build(0, cam)
    assert meta.block_table is cam.block_table_tensor and meta.slot_mapping is cam.slot_mapping
    assert Int2WindowBackend.get_kv_cache_shape(7, 48, 8, 128) == (7, 48, 8, 256)


def _run_prompt(mgr, rid, prompt, hash_block, chunk):
    """One request through the engine's KVCacheManager as the scheduler drives it: prefix lookup,
    then chunked prefill of the rest. Returns (request, cached tokens, per-group hit blocks)."""
    from aphrodite.sampling_params import SamplingParams
    from aphrodite.utils.hashing import sha256
    from aphrodite.v1.core.kv_cache_utils import get_request_block_hasher
    from aphrodite.v1.request import Request

    req = Request(rid, list(prompt), SamplingParams(max_tokens=1), None,
                  block_hasher=get_request_block_hasher(hash_block, sha256))
    hit_blocks, hit, *boundary = mgr.get_computed_blocks(req)
    if boundary:   # 0.24: the scheduler pins a shared prefix the sparse groups have not cached yet
        req.shared_prefix_boundary = boundary[0]
    groups = [list(b) for b in hit_blocks.blocks]
    first = True
    while req.num_computed_tokens < len(prompt):
        done = req.num_computed_tokens + (hit if first else 0)
        n = min(chunk, len(prompt) - done)
        assert mgr.allocate_slots(req, n, num_new_computed_tokens=hit if first else 0,
                                  new_computed_blocks=hit_blocks if first else None) is not None
        req.num_computed_tokens = done + n
        first = False
    return req, hit, groups


def _kv_manager(cfg, specs):
    """The engine's KV-cache config for `specs` (2 GiB) and its KVCacheManager with prefix caching,
    prefix hits aligned to lcm and hashed at gcd of the groups' block sizes, chunks of 500 tokens.
    Returns (config, manager, the groups' block sizes sorted)."""
    import inspect
    import math

    from aphrodite.utils.hashing import sha256
    from aphrodite.v1.core.kv_cache_manager import KVCacheManager
    from aphrodite.v1.core.kv_cache_utils import get_kv_cache_configs, init_none_hash

    _resolve_layout(cfg)
    (conf,) = get_kv_cache_configs(cfg, [specs], [2 << 30])
    sizes = sorted(g.kv_cache_spec.block_size for g in conf.kv_cache_groups)
    init_none_hash(sha256)
    budget = ({"scheduler_block_size": math.lcm(*sizes), "max_in_flight_tokens": 500}
              if "scheduler_block_size" in inspect.signature(KVCacheManager).parameters
              else {"max_num_batched_tokens": 500})
    mgr = KVCacheManager(conf, max_model_len=32768, hash_block_size=math.gcd(*sizes), enable_caching=True, **budget)
    return conf, mgr, sizes


@pytest.mark.usefixtures("tokens_format")
@pytest.mark.parametrize("hit_points", [True, False])
def test_window_pages_at_hit_points_give_prefix_hits(registered, tmp_path, monkeypatch, hit_points):
    """The engine's KVCacheManager (coordinator, block pool, block hashing) on the KV-cache config the
    engine builds for int2 + recent window (Qwen3-8B-like heads): a 3,000-token prompt prefilled in
    chunks of 500, finished, then sent again, and two more prompts sharing its first 1,700 tokens.
    Each step keeps the window of its last hit point (a multiple of lcm(int2 block, window block)),
    so the re-sent prompt hits at the last such point below its length and the shared prefix at the
    last chunk's point inside it, with real cached window pages for the R - 1 positions before the
    hit. Without hit-point pages (hit_alignment 0) both hits are 0."""
    import dataclasses
    import math

    from aphrodite.engine.arg_utils import EngineArgs

    from aphrodite_int2kv.engine.window import Int2WindowSpec, window_budget_managed

    assert window_budget_managed()
    monkeypatch.delenv("APHRODITE_INT2KV_RECENT_WINDOW", raising=False)
    monkeypatch.delenv("APHRODITE_INT2KV_GROUP_SIZE", raising=False)
    cfg = EngineArgs(model=_dense_long_dir(tmp_path), kv_cache_dtype="int2", max_model_len=32768,
                     skip_tokenizer_init=True, enable_prefix_caching=True).create_engine_config()
    cfg.cache_config.block_size = 128
    _build_int2_layers(cfg, 2)
    specs = _engine_specs(cfg)
    if not hit_points:
        specs = {n: dataclasses.replace(s, hit_alignment=0) if isinstance(s, Int2WindowSpec) else s
                 for n, s in specs.items()}
    conf, mgr, sizes = _kv_manager(cfg, specs)
    assert sizes == [20, 128]                       # G = 64: 128 x 80 B = 20 x 512 B per head
    align, hash_block = math.lcm(*sizes), math.gcd(*sizes)
    free0 = mgr.block_pool.get_num_free_blocks()
    prompt = [(7 * i) % 50_000 + 1 for i in range(3000)]
    shared = prompt[:1700] + [(11 * i) % 50_000 + 3 for i in range(900)]
    first, hit, _ = _run_prompt(mgr, "a", prompt, hash_block, 500)
    assert hit == 0
    mgr.free(first)
    again, hit_again, groups = _run_prompt(mgr, "b", prompt, hash_block, 500)
    mgr.free(again)
    other, hit_shared, _ = _run_prompt(mgr, "c", shared, hash_block, 500)
    mgr.free(other)
    fourth, hit_fourth, _ = _run_prompt(mgr, "d", shared[:1700] + [5] * 300, hash_block, 500)
    mgr.free(fourth)
    if not hit_points:
        assert hit_again == 0 and hit_shared == 0 and hit_fourth == 0
    else:
        assert hit_again == (len(prompt) - 1) // align * align == 2560
        # chunk ends 500, 1000, 1500 keep the windows of 0, 640, 1280: the shared 1,700 tokens hit at 1280
        # (chunk ends that are not multiples of 640 give no hit points of their own). 0.24 caches
        # sliding-window pages sparsely (prefix_cache_retention_interval 0: the prompt's end and a
        # shared prefix once a request has shown it), so there the first sharer misses and pins the
        # boundary, and the next one hits.
        sparse = getattr(conf, "prefix_cache_retention_interval", None) == 0
        assert (hit_shared, hit_fourth) == ((0, 1280) if sparse else (1280, 1280))
        win = next(i for i, g in enumerate(conf.kv_cache_groups) if isinstance(g.kv_cache_spec, Int2WindowSpec))
        wb = sizes[0]
        need = range((hit_again - 127) // wb, hit_again // wb)
        assert all(not groups[win][i].is_null for i in need)
    assert mgr.block_pool.get_num_free_blocks() == free0


@pytest.mark.parametrize("sinks", [4, 0])
def test_tile_window_prefix_hit_brings_the_sinks_page(registered, tmp_path, monkeypatch, sinks):
    """FORMAT=tiles through the engine's KVCacheManager (coordinator, block pool, hashing): a
    3,000-token prompt prefilled in chunks of 500, finished, and sent again. The hit (at a multiple of
    the 128-token alignment) brings the window pages before it and, with the sinks, the request's
    first window page, which the first request held for its life and the prefix cache kept. Without
    sinks in the spec (the engine's own sliding-window lookup) that page is the null page."""
    import dataclasses
    import math

    from aphrodite.engine.arg_utils import EngineArgs

    from aphrodite_int2kv.engine.window import Int2WindowSpec

    monkeypatch.setenv("APHRODITE_INT2KV_FORMAT", "tiles")
    monkeypatch.delenv("APHRODITE_INT2KV_RECENT_WINDOW", raising=False)
    cfg = EngineArgs(model=_dense_long_dir(tmp_path), kv_cache_dtype="int2", max_model_len=32768,
                     skip_tokenizer_init=True, enable_prefix_caching=True).create_engine_config()
    cfg.cache_config.block_size = 128
    _build_int2_layers(cfg, 2)
    specs = {n: dataclasses.replace(s, sinks=sinks) if isinstance(s, Int2WindowSpec) else s
             for n, s in _engine_specs(cfg).items()}
    conf, mgr, sizes = _kv_manager(cfg, specs)
    assert sizes == [16, 128]
    align, hash_block = math.lcm(*sizes), math.gcd(*sizes)
    free0 = mgr.block_pool.get_num_free_blocks()
    win = next(i for i, g in enumerate(conf.kv_cache_groups) if isinstance(g.kv_cache_spec, Int2WindowSpec))
    prompt = [(7 * i) % 50_000 + 1 for i in range(3000)]
    first, hit, _ = _run_prompt(mgr, "a", prompt, hash_block, 500)
    held = mgr.coordinator.single_type_managers[win].req_to_blocks["a"][0]
    assert hit == 0 and held.is_null == (not sinks)
    mgr.free(first)
    again, hit_again, groups = _run_prompt(mgr, "b", prompt, hash_block, 500)
    assert hit_again == (len(prompt) - 1) // align * align
    assert all(not b.is_null for b in groups[win][(hit_again - 127) // 16:])       # the window before the hit
    if sinks:
        assert groups[win][0] is held                                              # the sinks' page, cached
        assert mgr.coordinator.single_type_managers[win].req_to_blocks["b"][0] is held
    else:
        assert groups[win][0].is_null
    mgr.free(again)
    assert mgr.block_pool.get_num_free_blocks() == free0


def test_window_budget_counts_the_steps_in_flight(registered):
    """0.24 frees window pages only once a step is processed: with async scheduling (2 concurrent
    batches) a request holds the window before the oldest step in flight, the window after each step
    and each step's hit-point window."""
    from aphrodite_int2kv.engine.window import Int2WindowSpec

    common = dict(block_size=20, num_kv_heads=8, head_size=128, dtype=torch.bfloat16, sliding_window=128)
    window, hit = -(-127 // 20) + 1, -(-127 // 20)            # 8 and 7 pages of 20 tokens
    for steps in (1, 2, 3):
        spec = Int2WindowSpec(**common, hit_alignment=640, steps_in_flight=steps)
        assert spec.max_admission_blocks_per_request(max_in_flight_tokens=4096, max_model_len=32768) == \
            (1 + steps) * window + steps * hit
    assert Int2WindowSpec(**common).max_admission_blocks_per_request(2048, 32768) == 2 * window
    # a max_model_len shorter than the window caps the window's pages
    assert Int2WindowSpec(**common).max_admission_blocks_per_request(2048, 30) == 2 * (-(-30 // 20) + 1)


def test_ring_window_holds_one_page_per_request(registered):
    """Ring mode (prefix caching off, a page of >= R tokens): the engine's BlockPool driven as its
    scheduler does, through chunked prefill and decode: the request holds exactly one page from its
    first step to its end, the count predicts every allocation, the budget is that one page, and
    the page returns to the pool. A ring smaller than the window is refused."""
    from aphrodite_int2kv.engine.window import Int2WindowSpec, window_budget_managed

    assert window_budget_managed()
    common = dict(num_kv_heads=4, head_size=256, dtype=torch.bfloat16, sliding_window=128)
    with pytest.raises(Int2ConfigError, match="ring of 100 tokens cannot hold a window of 128"):
        Int2WindowSpec(block_size=100, **common, ring=True)
    spec = Int2WindowSpec(block_size=400, **common, ring=True)
    assert spec.max_admission_blocks_per_request(2048, 32768) == 1
    mgr, pool = _window_manager(spec, 50)
    free0 = pool.get_num_free_blocks()
    computed, page = 0, None
    for num_tokens in [2048, 4096, 5000] + list(range(5001, 5030)):
        need, new = _schedule(mgr, computed, num_tokens)
        assert len(new) == need == (1 if computed == 0 else 0)
        blocks = mgr.req_to_blocks["r"]
        assert len(blocks) == 1 and not blocks[0].is_null
        page = page or blocks[0]
        assert blocks[0] is page
        assert pool.get_num_free_blocks() == free0 - 1
        computed = num_tokens
    mgr.free("r")
    assert pool.get_num_free_blocks() == free0


@pytest.mark.usefixtures("tokens_format")
@pytest.mark.parametrize("ctx, ring_pages, paged_pages, bf16_pages", [(32848, 17, 20, 86), (131152, 56, 59, 331)])
def test_hybrid_ring_window_keeps_5x(registered, tmp_path, monkeypatch, ctx, ring_pages, paged_pages, bf16_pages):
    """hybrid27b's shapes (the H200 capacity benchmark: 16 attention layers with 4 KV heads of 256,
    48 GDN states of 1,634,304 B padded to the attention page; int2 pages of 2,560 tokens, bf16 of
    400) through the engine's own grouping and capacity arithmetic at 32K and 128K with prefix
    caching off, the benchmark's setting. The window is a ring of one page per request: at 32K
    13 int2 + 3 GDN + 1 window pages against bf16's 83 + 3 -> 5.06x (measured on the H200: 5.06x);
    with the paged window (4 window pages, measured: 4.30x) the same arithmetic stays below 5x.
    At 128K: 52 + 3 + 1 against 328 + 3 -> 5.91x (paged: 5.61x)."""
    import dataclasses

    from aphrodite.engine.arg_utils import EngineArgs
    from aphrodite.v1.core.kv_cache_utils import get_kv_cache_configs, get_max_concurrency_for_kv_cache_config
    from aphrodite.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

    from aphrodite_int2kv.engine.window import Int2WindowSpec

    monkeypatch.delenv("APHRODITE_INT2KV_RECENT_WINDOW", raising=False)
    monkeypatch.delenv("APHRODITE_INT2KV_GROUP_SIZE", raising=False)
    model = _heads_dir(tmp_path, 24, 4, 256)

    def capacity(cfg, attn_specs):
        page = next(s for n, s in attn_specs.items() if not n.endswith(".int2_window")).page_size_bytes
        gdn = MambaSpec(block_size=ctx, shapes=((10240, 3), (48, 128, 128)), dtypes=(torch.bfloat16,) * 2,
                        page_size_padded=page)
        specs = dict(attn_specs, **{f"model.layers.{100 + i}.linear_attn": gdn for i in range(48)})
        _resolve_layout(cfg)
        (conf,) = get_kv_cache_configs(cfg, [specs], [40 << 30])
        return get_max_concurrency_for_kv_cache_config(cfg, conf) * ctx

    cfg = EngineArgs(model=model, kv_cache_dtype="int2", max_model_len=ctx, skip_tokenizer_init=True,
                     enable_prefix_caching=False).create_engine_config()
    cfg.cache_config.block_size = 2560
    _build_int2_layers(cfg, 16)
    specs = _engine_specs(cfg)
    window = next(s for n, s in specs.items() if n.endswith(".int2_window"))
    assert isinstance(window, Int2WindowSpec) and window.ring and window.block_size == 400
    int2 = capacity(cfg, specs)
    paged = capacity(cfg, {n: dataclasses.replace(s, ring=False) if isinstance(s, Int2WindowSpec) else s
                           for n, s in specs.items()})

    bf16_cfg = EngineArgs(model=model, max_model_len=ctx, skip_tokenizer_init=True,
                          enable_prefix_caching=False).create_engine_config()
    bf16 = capacity(bf16_cfg, {f"model.layers.{i}.self_attn.attn": FullAttentionSpec(
        block_size=400, num_kv_heads=4, head_size=256, dtype=torch.bfloat16) for i in range(16)})
    assert int2 / bf16 == pytest.approx(bf16_pages / ring_pages, rel=0.01) and int2 / bf16 >= 5.0, int2 / bf16
    assert paged / bf16 == pytest.approx(bf16_pages / paged_pages, rel=0.01), paged / bf16
    # with prefix caching on, the window stays paged (hit points need pages of their own)
    cfg.cache_config.enable_prefix_caching = True
    assert not _engine_specs(cfg)[next(n for n in specs if n.endswith(".int2_window"))].ring


@pytest.mark.parametrize("ctx, fitted", [(32768, 2368), (131072, 2304)])
def test_hybrid_page_fitted_to_max_model_len(registered, tmp_path, monkeypatch, ctx, fitted):
    """FORMAT=tiles on hybrid27b's shapes (Qwen3.5-27B: 16 attention layers with 4 KV heads of 256,
    48 GDN layers), prefix caching off. Upstream's alignment gives the smallest int2 page that
    holds a GDN state, 2,304 tokens; at 32K a request would hold 15 of them, the last 22 % full.
    The page is fitted to max_model_len: 14 pages of 2,368 tokens (+ 3 GDN and 1 window pages per
    attention layer: 18 x 2,368 < 19 x 2,304 tokens' bytes), the GDN state padded to it, and the
    engine's own capacity arithmetic gives >= 4.5x bf16 (4.39x unfitted). At 128K the smallest page
    already fits (57 pages, 99.8 % full) and stays. A block size the user gives is kept."""
    from aphrodite.engine.arg_utils import EngineArgs
    from aphrodite.v1.core.kv_cache_utils import get_kv_cache_configs, get_max_concurrency_for_kv_cache_config

    from aphrodite_int2kv.engine import offline
    from aphrodite_int2kv.int2.tile_format import TileLayout

    monkeypatch.setenv("APHRODITE_INT2KV_FORMAT", "tiles")
    monkeypatch.delenv("APHRODITE_INT2KV_RECENT_WINDOW", raising=False)
    model = offline.hybrid27b_dir(tmp_path, ctx)

    def tokens(kv, **kw):
        cfg = EngineArgs(model=model, max_model_len=ctx, skip_tokenizer_init=True, enable_prefix_caching=False,
                         **({} if kv == "auto" else {"kv_cache_dtype": kv}), **kw).create_engine_config()
        specs = offline.hybrid_specs(cfg, kv)
        _resolve_layout(cfg)
        (conf,) = get_kv_cache_configs(cfg, [specs], [64 << 30])
        return get_max_concurrency_for_kv_cache_config(cfg, conf) * ctx, cfg.cache_config

    int2, cc = tokens("int2")
    assert cc.block_size == fitted and cc.mamba_page_size_padded == fitted * TileLayout(256, 64).token_bytes * 4
    bf16, bcc = tokens("auto")
    assert bcc.block_size == 400            # bf16's page is upstream's, unfitted
    per_request = (-(-ctx // fitted) + 3 + 1) * fitted * TileLayout(256, 64).token_bytes
    bf16_request = (-(-ctx // 400) + 3) * 400 * 2 * 256 * 2
    assert int2 / bf16 == pytest.approx(bf16_request / per_request, rel=0.01)
    if ctx == 32768:
        assert int2 / bf16 >= 4.5, int2 / bf16
        unfitted = (15 + 3 + 1) * 2304 * TileLayout(256, 64).token_bytes
        assert per_request < unfitted
    _, given = tokens("int2", block_size=2304)
    assert given.block_size == 2304


def test_hybrid_prefix_caching_with_the_window_fails_with_the_fix(registered, tmp_path, monkeypatch):
    """0.21 cannot hash a hybrid's prefixes once the window adds a smaller page (its coordinator
    asserts at start-up, seen on the H200): the window's spec refuses it first, naming the flag,
    where the installed engine's own block-size resolver shows that failure (0.24's does not)."""
    from aphrodite.engine.arg_utils import EngineArgs

    from aphrodite_int2kv.engine.window import _check_hybrid_prefix_hashing
    from aphrodite_int2kv.engine.kv_api import shape_based_kv_api

    monkeypatch.delenv("APHRODITE_INT2KV_RECENT_WINDOW", raising=False)
    if shape_based_kv_api():   # 0.21-0.23
        with pytest.raises(Int2ConfigError, match="--no-enable-prefix-caching.*RECENT_WINDOW=0"):
            _check_hybrid_prefix_hashing(448, 70)
    else:
        _check_hybrid_prefix_hashing(448, 70)
    _check_hybrid_prefix_hashing(448, 448)   # equal pages hash fine everywhere
    # through the window's spec on a hybrid engine config with prefix caching on
    cfg = EngineArgs(model=_hybrid_dir(tmp_path), kv_cache_dtype="int2", max_model_len=1024,
                     skip_tokenizer_init=True, enable_prefix_caching=True).create_engine_config()
    cfg.cache_config.block_size = 448
    _build_int2_layers(cfg, 1)
    if shape_based_kv_api():
        with pytest.raises(Int2ConfigError, match="--no-enable-prefix-caching"):
            _engine_specs(cfg)
    else:
        _engine_specs(cfg)


def test_mla_layers_refuse_int2_with_the_fix(registered):
    """An MLA model (DeepSeek-style latent KV) with --kv-cache-dtype int2 stops where its attention
    layer is built, naming the layer and the dtypes that work; other dtypes reach the layer's own
    constructor (which fails here on the stand-in projection, not on our check)."""
    from aphrodite.config import CacheConfig
    from aphrodite.model_executor.layers.attention.mla_attention import MLAAttention

    args = dict(num_heads=8, scale=0.1, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                q_lora_rank=None, kv_lora_rank=512, kv_b_proj=None, prefix="model.layers.0.self_attn.mla_attn")
    with pytest.raises(Int2ConfigError, match=r"int2 does not support MLA.*model.layers.0.self_attn.mla_attn.*auto or fp8"):
        MLAAttention(cache_config=CacheConfig(cache_dtype="int2"), **args)
    with pytest.raises(Exception) as other:
        MLAAttention(cache_config=CacheConfig(cache_dtype="auto"), **args)
    assert not isinstance(other.value, Int2ConfigError)
    import aphrodite_int2kv
    aphrodite_int2kv.register()                     # idempotent: still one check, not two
    with pytest.raises(Int2ConfigError):
        MLAAttention(cache_config=CacheConfig(cache_dtype="int2"), **args)


@pytest.mark.parametrize("k_bits,token_bytes,floor", [(3, 93, 4.95), (4, 109, 4.24)])
def test_tile_format_pages_in_the_engine_config(registered, tmp_path, monkeypatch, k_bits, token_bytes, floor):
    """APHRODITE_INT2KV_FORMAT=tiles through the engine's own KV config (Qwen3-8B-like heads, 32K):
    int2 pages of two 64-token tiles (93 B per token and head; 109 B with K_BITS=4), the window in
    pages of 16 tokens padded to the int2 page (93 B per token divides no 512-B window token), so
    the engine groups them (one page size), hits prefixes every 128 tokens, and its capacity
    arithmetic gives ~5x bf16 with the window counted (5.50x for the records alone; K_BITS=4:
    4.25x, 4.70x)."""
    from aphrodite.config import set_current_aphrodite_config
    from aphrodite.engine.arg_utils import EngineArgs
    from aphrodite.v1.core.kv_cache_utils import get_kv_cache_configs, get_max_concurrency_for_kv_cache_config

    from aphrodite_int2kv.engine.backend import Int2AttentionBackend
    from aphrodite_int2kv.engine.window import Int2WindowSpec
    from aphrodite_int2kv.int2.tile_format import TileLayout

    monkeypatch.setenv("APHRODITE_INT2KV_FORMAT", "tiles")
    monkeypatch.setenv("APHRODITE_INT2KV_K_BITS", str(k_bits))
    monkeypatch.delenv("APHRODITE_INT2KV_RECENT_WINDOW", raising=False)
    model = _dense_long_dir(tmp_path)
    cfg = EngineArgs(model=model, kv_cache_dtype="int2", max_model_len=32768, skip_tokenizer_init=True,
                     enable_prefix_caching=True).create_engine_config()
    with set_current_aphrodite_config(cfg):
        block = Int2AttentionBackend.get_preferred_block_size(16)
    assert block == 128
    cfg.cache_config.block_size = block
    _build_int2_layers(cfg, 4)
    specs = _engine_specs(cfg)
    int2 = specs["model.layers.0.self_attn.attn"]
    w = specs["model.layers.0.self_attn.attn.int2_window"]
    assert int2.page_size_bytes == 128 * token_bytes * 8 == 128 * TileLayout(128, 64, k_bits).token_bytes * 8
    assert isinstance(w, Int2WindowSpec) and w.block_size == 16 and w.page_size_bytes == int2.page_size_bytes
    assert w.hit_alignment == 128
    _resolve_layout(cfg)
    mem = 8 << 30
    (conf,) = get_kv_cache_configs(cfg, [specs], [mem])
    assert sorted(g.kv_cache_spec.block_size for g in conf.kv_cache_groups) == [16, 128]
    tokens = get_max_concurrency_for_kv_cache_config(cfg, conf) * 32768
    ratio = tokens / _bf16_tokens(model, specs, mem, 32768)
    # 256 int2 pages at 32K; the window: 2 x 9 pages of 16 tokens + 8 for a hit point + the sinks' page
    assert w.sinks == 4 and w.max_admission_blocks_per_request(2048, 32768) == 27
    assert ratio == pytest.approx(TileLayout(128, 64, k_bits).ratio_vs() * 256 / (256 + 27), rel=0.01), ratio
    assert ratio >= floor, ratio
