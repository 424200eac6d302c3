"""The engine's KV-cache API, per generation: the one place that knows which one is installed.

aphrodite 0.21-0.23 size and shape a layer's cache from its `KVCacheSpec` alone (shape-based:
int2 layers report a `TQFullAttentionSpec` whose slot is the int2 slot); 0.24 asks the attention
backend (layout-based: `customize_spec` and the layout the backend names). The backend
(backend.py) and the patch that registers int2 (patches/int2_kv_cache.py) both ask here.
"""

from __future__ import annotations

from aphrodite_int2kv.engine.options import slot_bytes_for


def shape_based_kv_api() -> bool:
    """True on 0.21-0.23 (the engine has `TQFullAttentionSpec`), False on the layout-based 0.24."""
    import aphrodite.v1.kv_cache_interface as kvi

    return hasattr(kvi, "TQFullAttentionSpec")


def int2_spec(block_size: int, num_kv_heads: int, head_size: int, **extra):
    """Shape-based API: the spec of an int2 layer, one int2 slot per token and KV head."""
    import torch
    from aphrodite.v1.kv_cache_interface import TQFullAttentionSpec

    extra.pop("dtype", None)
    extra.pop("head_size_v", None)
    return TQFullAttentionSpec(block_size=block_size, num_kv_heads=num_kv_heads, head_size=head_size,
                               head_size_v=head_size, dtype=torch.uint8, tq_slot_size=slot_bytes_for(head_size))


# Why a model with sliding-window layers gets no int2 beside bf16 (or fp8) sliding-window layers on
# aphrodite 0.21-0.24: the engine gives every KV-cache group pages of one size. 0.21-0.23 scale a
# group's block size up by the ratio of the largest page to its own, which must be a whole number,
# and an int2 slot (80 bytes at head_dim 128, 48 at 64, 160 at 256) holds a factor 5 or 3 that no
# power-of-two bf16 page divides by: start-up fails there. 0.24 pads the int2 page up to the bf16
# page instead, so the int2 layers would take as much memory as bf16 (both checked against the
# engine's get_kv_cache_configs in test_engine_int2.py).
SLIDING_WINDOW_MODELS = (
    "--kv-cache-dtype int2 does not support models with sliding-window layers on aphrodite 0.21-0.24 "
    "(e.g. Gemma 2/3, Mistral-family local attention): their layers cannot be int2, and kept in "
    "the model dtype (kv_cache_dtype_skip_layers=['sliding_window']) they force the engine to give "
    "the int2 layers pages of their size (0.21-0.23 cannot, 0.24 pads the int2 pages: no memory "
    "saved). Use --kv-cache-dtype fp8 or auto for this model")
