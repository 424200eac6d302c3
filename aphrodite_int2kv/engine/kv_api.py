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
