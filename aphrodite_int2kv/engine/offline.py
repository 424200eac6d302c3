"""The engine's own objects built without a GPU, for sizing and for tests: a model directory with
given head shapes, real `Attention` layers with the int2 backend in an engine config (the recent
window's companions included), the KV specs the model runner would collect from them, and 0.24's
KV-layout resolution. `benchmarks/engine_capacity.py` sizes the engine's KV cache with these, and
the tests build their engines with them; nothing here runs in a serving engine.
"""

from __future__ import annotations


def build_int2_layers(cfg, n, backend="int2"):
    """Real `Attention` layers as a model builds them (our __init__ wrapper adds the companions).
    This host is CPU-only, so the backend the CUDA platform would select for int2 is passed in."""
    from aphrodite.config import set_current_aphrodite_config
    from aphrodite.model_executor.layers.attention.attention import Attention

    from aphrodite_int2kv.engine.backend import Int2AttentionBackend

    hf = cfg.model_config.hf_config
    extra = {"attn_backend": Int2AttentionBackend} if backend == "int2" else {}
    with set_current_aphrodite_config(cfg):
        return [Attention(hf.num_attention_heads, hf.head_dim, hf.head_dim ** -0.5,
                          num_kv_heads=hf.num_key_value_heads, cache_config=cfg.cache_config,
                          prefix=f"model.layers.{i}.self_attn.attn", **extra) for i in range(n)]


def engine_specs(cfg):
    """What the model runner's get_kv_cache_spec collects from the static forward context."""
    from aphrodite.model_executor.layers.attention_layer_base import AttentionLayerBase

    from aphrodite_int2kv.engine.backend import Int2AttentionBackend
    from aphrodite_int2kv.engine.window import SUFFIX
    from aphrodite_int2kv.engine.kv_api import shape_based_kv_api

    specs = {}
    for name, layer in cfg.compilation_config.static_forward_context.items():
        if not isinstance(layer, AttentionLayerBase):
            continue
        spec = layer.get_kv_cache_spec(cfg)
        if not name.endswith(SUFFIX) and not shape_based_kv_api():
            spec = Int2AttentionBackend.customize_spec(spec)   # 0.24 asks the int2 layer's backend
        specs[name] = spec
    return specs


def heads_dir(tmp_path, heads, kv_heads, head_dim, max_positions=262144):
    from transformers import Qwen3Config

    Qwen3Config(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                max_position_embeddings=max_positions, architectures=["Qwen3ForCausalLM"],
                torch_dtype="bfloat16").save_pretrained(tmp_path)
    return str(tmp_path)


def resolve_layout(cfg, backends=None):
    """0.24 resolves one KV layout in the engine core before sizing; do what it does for the
    model's backends (ours by default)."""
    if hasattr(cfg.cache_config, "get_resolved_kv_cache_layout") and cfg.cache_config.kv_cache_layout is None:
        from aphrodite.v1.attention.backends.utils import get_supported_kv_cache_layouts

        from aphrodite_int2kv.engine.backend import Int2AttentionBackend

        cfg.cache_config.kv_cache_layout = get_supported_kv_cache_layouts(backends or [Int2AttentionBackend])[0].name
