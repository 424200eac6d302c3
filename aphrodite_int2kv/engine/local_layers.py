"""Sliding-window ("local") layers beside int2 layers: Gemma 2/3, Mistral-style local attention.

Models that interleave local attention (each token sees the last W tokens) with global attention
keep their long context in the global layers, so that is where int2 pays. Under
`--kv-cache-dtype int2` the global layers take int2; the local layers keep the engine's own cache
and attention backend, in the model dtype or fp8 (APHRODITE_INT2KV_LOCAL_KV_DTYPE). The patch
(patches/int2_kv_cache.py, G) builds each local layer with that dtype; this module sizes the pages.

Pages: the engine gives every KV-cache group pages of one byte size. A local page of `local_block`
tokens (a multiple of 16, the flash-attention kernels' page) holds local_block x (K + V bytes per
token); an int2 page holds whole 64-token tiles, 93 B per token and KV head at head_dim 128, and no
whole number of bf16 tokens (512 B) matches it. So the local page is the shared page, exactly
filled, and the int2 pages (and the recent window's) are padded up to it (`page_size_padded`, which
both engine generations stride by). The int2 block is the smallest multiple of 64 tokens whose page
wastes at most 5 % of the shared page: 256 tokens at head_dim 128 (23,808 B of a 48-token bf16 page
of 24,576 B per KV head, 3.1 %), 448 at 256 (1.0 %), 320 at 64 (4.3 %). Padding the local pages
instead would need a strided view the 0.21 flash-attention cache layout (K and V planes first)
does not have. docs/format.md, "Sliding-window models", has the arithmetic.
"""

from __future__ import annotations

import dataclasses

from aphrodite_int2kv.engine.options import INT2
from aphrodite_int2kv.int2.format import Int2ConfigError
LOCAL_BLOCK = 16        # the local page is a multiple of the flash-attention kernels' block
MAX_WASTE = 0.05        # the int2 block is the smallest whose padding stays within this share of the page


@dataclasses.dataclass(frozen=True)
class SharedPages:
    """One page size for the int2, recent-window and local groups."""
    int2_block: int         # tokens per int2 page
    local_block: int        # tokens per local page
    page_bytes: int         # the shared page: local_block x local bytes per token, int2 pages padded to it
    int2_bytes: int         # the int2 page before padding

    @property
    def waste(self) -> float:
        """The share of an int2 page that is padding."""
        return 1 - self.int2_bytes / self.page_bytes


def shared_pages(int2_token_bytes: int, local_token_bytes: int, int2_block: int | None = None,
                 align: int = 64) -> SharedPages:
    """Pages for int2 layers of `int2_token_bytes` per token (all KV heads) beside local layers of
    `local_token_bytes`: the given int2 block (a user's --block-size), or the smallest multiple of
    `align` (the tile) up to 16 tiles whose padding is <= MAX_WASTE, else the least padded."""
    if local_token_bytes <= int2_token_bytes:
        raise Int2ConfigError(f"int2 KV: the sliding-window layers' cache takes {local_token_bytes} B per token, "
                              f"not more than int2's {int2_token_bytes} B: no page size fits both")

    def pages(block):
        int2_bytes = block * int2_token_bytes
        unit = LOCAL_BLOCK * local_token_bytes
        local_block = -(-int2_bytes // unit) * LOCAL_BLOCK
        return SharedPages(block, local_block, local_block * local_token_bytes, int2_bytes)

    if int2_block is not None:
        return pages(int2_block)
    options = [pages(b) for b in range(align, 16 * align + 1, align)]
    fitting = [p for p in options if p.waste <= MAX_WASTE]
    return fitting[0] if fitting else min(options, key=lambda p: (p.waste, p.int2_block))


def local_kv_dtype() -> str:
    """The engine KV-cache dtype a local layer gets under int2: 'auto' (the model dtype) or 'fp8'."""
    from aphrodite_int2kv.engine.options import options

    return options().local_kv_dtype


def is_local_layer_build(cache_config, per_layer_sliding_window) -> bool:
    """Whether an `Attention` being built with these arguments is a local layer of an int2 model."""
    if cache_config is None or getattr(cache_config, "cache_dtype", None) != INT2:
        return False
    window = per_layer_sliding_window if per_layer_sliding_window is not None else cache_config.sliding_window
    return window is not None


def local_cache_config(cache_config):
    """A copy of the engine's cache config for one local layer: the local dtype instead of int2.
    (Attention.__init__ only reads it; the engine's own config object is left as it is.)"""
    import copy

    local = copy.copy(cache_config)
    object.__setattr__(local, "cache_dtype", local_kv_dtype())
    return local


def _attention_layers(aphrodite_config):
    from aphrodite.model_executor.layers.attention.attention import Attention

    ctx = aphrodite_config.compilation_config.static_forward_context
    return {name: layer for name, layer in ctx.items() if isinstance(layer, Attention)}


def kept_layers(layers):
    """The attention layers kept out of int2: sliding-window layers, and those the user listed in
    kv_cache_dtype_skip_layers (full attention in the model dtype; the same page sizing serves them)."""
    return {n: l for n, l in layers.items() if l.kv_cache_dtype != INT2}


def _token_bytes(layers, per_layer, what) -> int:
    sizes = {per_layer(layer) for layer in layers.values()}
    if len(sizes) != 1:
        raise Int2ConfigError(f"int2 KV: the {what} layers of this model cache different bytes per token "
                              f"({sorted(sizes)}); one page size cannot fit them. Use --kv-cache-dtype auto or fp8")
    return sizes.pop()


_pages_memo: list = []   # [(config, layers in its forward context, user block, options, pages)]: the last model asked about


def model_pages(aphrodite_config) -> SharedPages | None:
    """The shared pages of an int2 model with local layers (None: no local layers, nothing to share).
    Asked once the model is built (every layer in the static forward context), by every layer's
    spec, the window's, the block-size choice and the start-up line: worked out once per model
    (and settings), not by a scan of all layers at each of those calls."""
    if getattr(aphrodite_config.cache_config, "cache_dtype", None) != INT2:
        return None
    from aphrodite_int2kv.engine.options import options

    key = (len(aphrodite_config.compilation_config.static_forward_context), _user_block(aphrodite_config), options())
    if _pages_memo and _pages_memo[0][0] is aphrodite_config and _pages_memo[0][1:4] == key:
        return _pages_memo[0][4]
    pages = _model_pages(aphrodite_config)
    _pages_memo[:] = [(aphrodite_config, *key, pages)]
    return pages


def _model_pages(aphrodite_config) -> SharedPages | None:
    layers = _attention_layers(aphrodite_config)
    local = kept_layers(layers)
    if not local:
        return None
    if getattr(aphrodite_config.model_config, "is_hybrid", False):
        raise Int2ConfigError(f"--kv-cache-dtype int2 on a hybrid (GDN/Mamba) model does not support attention "
                              f"layers kept out of int2 ({layer_ranges(local)}: sliding windows or "
                              f"kv_cache_dtype_skip_layers): the Gated DeltaNet state pages and two attention page "
                              f"sizes cannot share one page yet. Use --kv-cache-dtype auto or fp8 for this model")
    int2 = {n: l for n, l in layers.items() if l.kv_cache_dtype == INT2}
    if not int2:
        windows = sorted({l.sliding_window for l in local.values() if l.sliding_window is not None})
        raise Int2ConfigError(f"--kv-cache-dtype int2: no attention layer of this model takes int2 (sliding "
                              f"windows of {windows} tokens, or kv_cache_dtype_skip_layers): int2 is for the layers "
                              f"that hold the whole context and would be active on none. Use --kv-cache-dtype "
                              f"auto or fp8 for this model")
    from aphrodite.utils.torch_utils import get_dtype_size

    from aphrodite_int2kv.engine.options import slot_bytes_for

    int2_tb = _token_bytes(int2, lambda l: l.num_kv_heads * slot_bytes_for(l.head_size), "int2")
    local_tb = _token_bytes(local, lambda l: l.num_kv_heads * (l.head_size + l.head_size_v)
                            * get_dtype_size(l.kv_cache_torch_dtype), "non-int2")
    return shared_pages(int2_tb, local_tb, _user_block(aphrodite_config))


def _user_block(aphrodite_config) -> int | None:
    """The block size the user asked for (--block-size), else None: the int2 block is fitted."""
    cache = aphrodite_config.cache_config
    return cache.block_size if getattr(cache, "user_specified_block_size", False) else None


def local_spec(spec, pages: SharedPages):
    """A local layer's engine spec with the shared page: `local_block` tokens, exactly filled."""
    out = dataclasses.replace(spec, block_size=pages.local_block, page_size_padded=None)
    if out.page_size_bytes != pages.page_bytes:
        raise Int2ConfigError(f"int2 KV: a sliding-window page of {pages.local_block} tokens is {out.page_size_bytes} "
                              f"B, not the shared {pages.page_bytes} B (a local layer of another shape?)")
    return out


def describe(aphrodite_config) -> str:
    """The start-up line's part on local layers ('' for a model without them)."""
    pages = model_pages(aphrodite_config)
    if pages is None:
        return ""
    layers = _attention_layers(aphrodite_config)
    local = sorted(kept_layers(layers), key=_index)
    one = layers[local[0]]
    windows = sorted({layers[n].sliding_window for n in local if layers[n].sliding_window is not None})
    what = f"sliding-window layers (window {'/'.join(map(str, windows))})" if windows else "skipped layers"
    return (f"; {len(local)} {what} ({layer_ranges(local)}) keep the engine's own {one.kv_cache_dtype} cache in pages "
            f"of {pages.local_block} tokens, the int2 pages of {pages.int2_block} tokens padded to them "
            f"({pages.waste:.1%} padding)")


def _index(name):
    nums = [int(p) for p in name.split(".") if p.isdigit()]
    return nums[0] if nums else -1


def layer_ranges(names) -> str:
    """layers 0-4, 6-10, ... from their names."""
    idx = sorted(_index(n) for n in names)
    runs, start = [], idx[0]
    for a, b in zip(idx, idx[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start}-{a}" if a != start else str(a))
            start = b
    return "layers " + ", ".join(runs)
