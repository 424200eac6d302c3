"""The engine's own objects built without a GPU, for sizing and for tests: a model directory with
given head shapes, real `Attention` layers with the int2 backend in an engine config (the recent
window's companions included), the KV specs the model runner would collect from them, and 0.24's
KV-layout resolution. `benchmarks/engine_capacity.py` sizes the engine's KV cache with these, and
the tests build their engines with them; nothing here runs in a serving engine.
"""

from __future__ import annotations


def use_cpu_platform():
    """Select aphrodite's CPU platform where none was detected (0.21.0 cannot infer the CPU device),
    sizing the KV cache as a CUDA GPU would: on a CPU with AVX-512 BF16, 0.24's CpuPlatform keeps
    Gated DeltaNet states in float32 for its own CPU kernels, which doubles their pages and so the
    hybrid models' page size on some machines and not on others; a GPU keeps the model's dtype."""
    import aphrodite.platforms as platforms
    import torch

    if type(platforms.current_platform).__name__ == "UnspecifiedPlatform":
        from aphrodite.platforms.cpu import CpuPlatform

        platforms._current_platform = CpuPlatform()
    if type(platforms.current_platform).__name__ == "CpuPlatform":
        torch.cpu._is_avx512_bf16_supported = lambda: False


def build_int2_layers(cfg, n, backend="int2", window=None, period=6, sinks=False):
    """Real `Attention` layers as a model builds them (our __init__ wrapper adds the companions).
    This host is CPU-only, so the backend the CUDA platform would select for int2 is passed in
    (backend="int2"; another value leaves the choice to this host's platform). With a `window`,
    Gemma 3's pattern: layer i is global when (i + 1) % period == 0, else local with that sliding
    window (as Gemma3Attention passes it), which our wrapper builds with the local dtype and its own
    backend. sinks: the global layers carry learned attention sinks, as gpt-oss's do (the CPU
    platform's backend, which the local layers get here, takes none)."""
    import torch

    from aphrodite.config import set_current_aphrodite_config
    from aphrodite.model_executor.layers.attention.attention import Attention

    from aphrodite_int2kv.engine.backend import Int2AttentionBackend

    hf = cfg.model_config.hf_config
    layers = []
    with set_current_aphrodite_config(cfg):
        for i in range(n):
            if window is not None and (i + 1) % period:
                extra = {"per_layer_sliding_window": window}
            else:
                extra = {"attn_backend": Int2AttentionBackend} if backend == "int2" else {}
                if sinks:
                    extra["sinks"] = torch.zeros(hf.num_attention_heads)
            layers.append(Attention(hf.num_attention_heads, hf.head_dim, hf.head_dim ** -0.5,
                                    num_kv_heads=hf.num_key_value_heads, cache_config=cfg.cache_config,
                                    prefix=f"model.layers.{i}.self_attn.attn", **extra))
    return layers


def engine_specs(cfg):
    """What the model runner's get_kv_cache_spec collects from the static forward context."""
    from aphrodite.model_executor.layers.attention_layer_base import AttentionLayerBase

    from aphrodite_int2kv.engine.window import SUFFIX
    from aphrodite_int2kv.engine.kv_api import shape_based_kv_api

    specs = {}
    for name, layer in cfg.compilation_config.static_forward_context.items():
        if not isinstance(layer, AttentionLayerBase):
            continue
        spec = layer.get_kv_cache_spec(cfg)
        if not name.endswith(SUFFIX) and not shape_based_kv_api():
            spec = layer.get_attn_backend().customize_spec(spec)   # 0.24 asks each layer's own backend
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


HYBRID27B = ("hybrid27b shapes (64 layers: 16 full attention with 24 q / 4 KV heads of 256, "
             "48 Gated DeltaNet)")


def hybrid27b_dir(path, max_positions):
    """A Qwen3-Next config with Qwen3.5-27B's attention and Gated DeltaNet shapes (64 layers, 1 full
    attention in 4: 24 q / 4 KV heads of 256; GDN with 16 key / 48 value heads of 128). The KV cache
    does not depend on the hidden size or the experts, kept small."""
    from transformers import Qwen3NextConfig

    Qwen3NextConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=64,
                    num_attention_heads=24, num_key_value_heads=4, head_dim=256,
                    linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
                    linear_num_key_heads=16, linear_num_value_heads=48, num_experts=4, num_experts_per_tok=2,
                    moe_intermediate_size=64, shared_expert_intermediate_size=64, decoder_sparse_step=1,
                    mlp_only_layers=[], layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 16,
                    max_position_embeddings=max(max_positions, 4096), torch_dtype="bfloat16").save_pretrained(path)
    return str(path)


def hybrid_specs(cfg, kv):
    """The KV specs of a hybrid27b_dir model in `cfg` with KV dtype `kv` ("auto" = bf16), as the CUDA
    platform configures it: the block size from 16 up through the engine's _align_hybrid_block_size
    (Triton's alignment for other dtypes, int2's backend for int2), the 16 attention layers (ours, with
    the recent window's companions, for int2), the 48 GDN states padded to the attention page."""
    import torch
    from aphrodite.model_executor.models import ModelRegistry
    from aphrodite.platforms.interface import Platform
    from aphrodite.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
    from aphrodite.v1.attention.backends.triton_attn import TritonAttentionBackend
    from aphrodite.v1.kv_cache_interface import FullAttentionSpec, MambaSpec, get_kv_quant_mode

    from aphrodite_int2kv.engine.backend import Int2AttentionBackend

    cfg.cache_config.block_size = 16        # the CUDA platform's default, which the alignment starts from
    Platform._align_hybrid_block_size(cfg, Int2AttentionBackend if kv == "int2" else TritonAttentionBackend)
    cc = cfg.cache_config
    if kv == "int2":
        build_int2_layers(cfg, 16)
        attn = engine_specs(cfg)
    else:
        dtype = torch.bfloat16 if kv == "auto" else STR_DTYPE_TO_TORCH_DTYPE[kv]
        attn = {f"model.layers.{4 * i + 3}.self_attn.attn": FullAttentionSpec(
            block_size=cc.block_size, num_kv_heads=4, head_size=256, head_size_v=256, dtype=dtype,
            kv_quant_mode=get_kv_quant_mode(kv)) for i in range(16)}
    model_cls, _ = ModelRegistry.resolve_model_cls(cfg.model_config.architecture, model_config=cfg.model_config)
    gdn = MambaSpec(block_size=cfg.model_config.max_model_len, shapes=model_cls.get_mamba_state_shape_from_config(cfg),
                    dtypes=model_cls.get_mamba_state_dtype_from_config(cfg), page_size_padded=cc.mamba_page_size_padded)
    return dict(attn, **{f"model.layers.{4 * i + j}.linear_attn": gdn for i in range(16) for j in range(3)})
