"""The recent window: a full-precision sliding-window cache next to every int2 layer, owned by the
engine's own block manager (docs/format.md, "Recent window").

For each int2 layer `X` the plugin registers a companion `X.int2_window` in the engine's static
forward context (as aphrodite's DeepSeek-V4 compressor registers its state caches). Its KV spec is a
`SlidingWindowSpec(sliding_window=R)` in the model dtype, so the engine allocates its pages, frees
the ones that slid out of the window, prefix-caches and preempts them, and counts them in its
capacity line. The companion is never called by the model: the int2 layer's impl writes it in
`do_kv_cache_update` and reads it in `forward`, finding its cache and metadata by name.

Pages: the engine needs one page size for all groups, so the window's block size is chosen to make
its page exactly as large as the int2 page: window_block = int2_block * slot_bytes / (2 D dtype).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar

import torch

from aphrodite.model_executor.layers.attention_layer_base import AttentionLayerBase
from aphrodite.v1.attention.backend import (AttentionBackend, AttentionCGSupport, AttentionMetadata,
                                            AttentionMetadataBuilder, MultipleOf)

from aphrodite_int2kv.int2.format import Int2ConfigError

SUFFIX = ".int2_window"


def window_name(layer_name: str) -> str:
    return layer_name + SUFFIX


def window_page_multiple(head_size: int, slot_bytes: int, dtype_size: int = 2) -> int:
    """The int2 block sizes whose page holds whole window tokens are the multiples of this."""
    den = 2 * head_size * dtype_size
    return den // math.gcd(slot_bytes, den)


def window_block_size(int2_block_size: int, head_size: int, slot_bytes: int, dtype_size: int = 2) -> int:
    """Tokens per window page such that the page has the int2 page's bytes."""
    num, den = int2_block_size * slot_bytes, 2 * head_size * dtype_size
    if num % den:
        unit = window_page_multiple(head_size, slot_bytes, dtype_size)
        raise Int2ConfigError(
            f"int2 KV recent window: an int2 page of {int2_block_size} tokens ({slot_bytes} B per token and "
            f"head) is not a whole number of full-precision window tokens ({den} B); use a block size that is "
            f"a multiple of {unit} (--block-size), or APHRODITE_INT2KV_RECENT_WINDOW=0")
    return num // den


class Int2WindowBackend(AttentionBackend):
    """Sizes and describes the window cache; it has no attention impl of its own."""
    accept_output_buffer: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16]

    @staticmethod
    def get_name() -> str:
        return "INT2_WINDOW"

    @staticmethod
    def get_impl_cls():
        raise NotImplementedError("the int2 window cache is read by the int2 layer's impl")

    @staticmethod
    def get_builder_cls():
        return Int2WindowMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes() -> list[int | MultipleOf]:
        return [MultipleOf(1)]   # our kernels take any page size

    # 0.21-0.23: [blocks, window_block, kv_heads, K|V] in the model dtype (K in [..., :D], V in [..., D:]).
    @staticmethod
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size, cache_dtype_str="auto"):
        return (num_blocks, block_size, num_kv_heads, 2 * head_size)

    # 0.24+: the same bytes, described as a layout
    @classmethod
    def customize_spec(cls, spec):
        return spec

    @classmethod
    def supported_kv_cache_layouts(cls):
        from aphrodite.v1.kv_cache_layout import KVCacheLayout

        return (KVCacheLayout.LBNHC,)


@dataclasses.dataclass
class Int2WindowMetadata(AttentionMetadata):
    block_table: torch.Tensor    # [num_reqs, max_window_blocks] (pages that slid out point at the null page)
    slot_mapping: torch.Tensor   # [num_tokens] window slot of each new token (-1: padding)


class Int2WindowMetadataBuilder(AttentionMetadataBuilder[Int2WindowMetadata]):
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.ALWAYS

    def __init__(self, kv_cache_spec, layer_names, aphrodite_config, device):
        super().__init__(kv_cache_spec, layer_names, aphrodite_config, device)

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
        cam = common_attn_metadata
        return Int2WindowMetadata(block_table=cam.block_table_tensor, slot_mapping=cam.slot_mapping)


class Int2WindowLayer(torch.nn.Module, AttentionLayerBase):
    """The companion of one int2 layer (not a child module of it: no weights, not in the model tree)."""

    def __init__(self, int2_layer_name: str, num_kv_heads: int, head_size: int, window: int,
                 slot_bytes: int, static_forward_context: dict):
        super().__init__()
        self.layer_name = window_name(int2_layer_name)
        self.num_kv_heads, self.head_size, self.window, self.slot_bytes = num_kv_heads, head_size, window, slot_bytes
        self.kv_cache = torch.tensor([])
        if self.layer_name in static_forward_context:
            raise ValueError(f"Duplicate layer name: {self.layer_name}")
        static_forward_context[self.layer_name] = self

    def get_attn_backend(self):
        return Int2WindowBackend

    def get_kv_cache_spec(self, aphrodite_config):
        dtype = aphrodite_config.model_config.dtype
        if dtype not in (torch.float16, torch.bfloat16):
            raise Int2ConfigError(f"int2 KV recent window: model dtype {dtype} is not float16/bfloat16")
        block = window_block_size(aphrodite_config.cache_config.block_size, self.head_size, self.slot_bytes,
                                  dtype.itemsize)
        common = dict(block_size=block, num_kv_heads=self.num_kv_heads, head_size=self.head_size,
                      dtype=dtype, sliding_window=self.window)
        if not window_budget_managed():
            return SlidingWindowSpec(**common)
        return Int2WindowSpec(**common, hit_alignment=math.lcm(aphrodite_config.cache_config.block_size, block))


def window_views(cache: torch.Tensor, num_kv_heads: int, head_size: int, dtype: torch.dtype,
                 heads_first: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(k_win, v_win) [blocks, window_block, kv_heads, D] views of the engine's window cache tensor:
    0.21-0.23 hand [blocks, window_block, kv_heads, 2D] in `dtype`; 0.24 the logical
    [blocks, kv_heads, window_block, bytes] view of the same bytes."""
    if heads_first:
        cache = cache.transpose(1, 2)
    if cache.dtype != dtype:
        cache = cache.view(dtype)
    assert cache.shape[2:] == (num_kv_heads, 2 * head_size), cache.shape
    return cache[..., :head_size], cache[..., head_size:]


# -- Block budget of the window (0.21-0.23 block manager) --------------------------------------
#
# The engine's SlidingWindowManager gives every newly scheduled token a page, because attention
# kernels read a chunk's own keys from the cache; it therefore budgets each request for
# R - 1 + max_num_batched_tokens window tokens (2,175 bf16 tokens at the defaults: as many bytes
# as ~11,600 int2 tokens), and that budget is what its capacity line and admission use. Our prefill
# reads the chunk's keys from the activations, so only positions still inside the window after the
# step need a page: Int2WindowManager pads the rest with the null page (their writes land there,
# never read), and Int2WindowSpec budgets two windows per request (the one before and the one after
# a chunk, both alive during the step).

from aphrodite.utils.math_utils import cdiv  # noqa: E402
from aphrodite.v1.core import single_type_kv_cache_manager as _stm  # noqa: E402
from aphrodite.v1.kv_cache_interface import SlidingWindowSpec  # noqa: E402


@dataclasses.dataclass(frozen=True, kw_only=True)
class Int2WindowSpec(SlidingWindowSpec):
    """A sliding-window spec whose per-request budget is two windows plus one hit-point window, not
    a window plus a chunk. hit_alignment: the engine's prefix-hit granularity, lcm(int2 block,
    window block) (0: no hit-point pages)."""
    hit_alignment: int = 0

    def max_admission_blocks_per_request(self, max_num_batched_tokens: int, max_model_len: int) -> int:
        live = min(self.sliding_window - 1, max_model_len)
        hit_point = cdiv(self.sliding_window - 1, self.block_size) if self.hit_alignment else 0
        return 2 * (cdiv(live, self.block_size) + 1) + hit_point


class Int2WindowManager(_stm.SlidingWindowManager):
    """Pages only for positions still inside the window after the scheduled step, plus the window
    of one prefix-cache hit point per step (0.21-0.23 API)."""

    def __init__(self, kv_cache_spec, **kwargs):
        super().__init__(kv_cache_spec, **kwargs)
        self._dead_below: dict[str, int] = {}   # per request: blocks below this index are null

    def _first_live_block(self, num_tokens: int) -> int:
        return self.get_num_skipped_tokens(num_tokens) // self.block_size

    def _hit_point_blocks(self, num_tokens: int, first_new: int, live_from: int) -> range:
        """Window blocks that get a real page although they slide out after this step: those of
        [h - R + 1, h) for h, the last multiple of the hit alignment below num_tokens. Freed the next
        step like any slid-out page, they stay in the prefix cache, so a later request that shares
        the first h tokens (a re-sent prompt, a chunk boundary) finds the window a hit at h needs."""
        align = getattr(self.kv_cache_spec, "hit_alignment", 0)
        if not (align and self.enable_caching):
            return range(0)
        end = (num_tokens - 1) // align * align // self.block_size
        return range(max(end - cdiv(self.sliding_window - 1, self.block_size), first_new), min(end, live_from))

    def get_num_blocks_to_allocate(self, request_id, num_tokens, new_computed_blocks, total_computed_tokens,
                                   num_tokens_main_model, apply_admission_cap=False):
        required = cdiv(num_tokens, self.block_size)
        live_from = self._first_live_block(num_tokens)
        if request_id in self.num_cached_block:   # running: no new prefix hits
            held = len(self.req_to_blocks[request_id])
            return max(required - max(held, live_from), 0) + len(self._hit_point_blocks(num_tokens, held, live_from))
        skipped = self.get_num_skipped_tokens(total_computed_tokens) // self.block_size
        held = max(len(new_computed_blocks), skipped)
        evictable = self._get_num_evictable_blocks(new_computed_blocks[skipped:])
        return (max(required - max(held, live_from), 0) + evictable
                + len(self._hit_point_blocks(num_tokens, held, live_from)))

    def allocate_new_blocks(self, request_id, num_tokens, num_tokens_main_model):
        blocks = self.req_to_blocks[request_id]
        first_new = len(blocks)
        live_from = self._first_live_block(num_tokens)
        if first_new < live_from:   # positions out of the window after this step: the null page
            keep = self._hit_point_blocks(num_tokens, first_new, live_from)
            real = iter(self.block_pool.get_new_blocks(len(keep)))
            blocks.extend(next(real) if i in keep else self._null_block for i in range(first_new, live_from))
        super().allocate_new_blocks(request_id, num_tokens, num_tokens_main_model)
        # every new entry, null pages included: a running request's block table on the worker is
        # extended with exactly this list, so leaving the nulls out would shift its later pages
        return blocks[first_new:]

    def remove_skipped_blocks(self, request_id, total_computed_tokens):
        # null pages may sit between live ones (a chunk's interior), so scan from the last cut
        # instead of stopping at the first null page as the base class does
        blocks = self.req_to_blocks[request_id]
        end = min(self.get_num_skipped_tokens(total_computed_tokens) // self.block_size, len(blocks))
        start = self._dead_below.get(request_id, 0)
        removed = []
        for i in range(start, end):
            if blocks[i] is not self._null_block:
                removed.append(blocks[i])
                blocks[i] = self._null_block
        if end > start:
            self._dead_below[request_id] = end
        self.block_pool.free_blocks(removed)

    def free(self, request_id):
        self._dead_below.pop(request_id, None)
        super().free(request_id)


_BASE_API = {
    "remove_skipped_blocks": ["self", "request_id", "total_computed_tokens"],
    "allocate_new_blocks": ["self", "request_id", "num_tokens", "num_tokens_main_model"],
    "get_num_blocks_to_allocate": ["self", "request_id", "num_tokens", "new_computed_blocks",
                                   "total_computed_tokens", "num_tokens_main_model", "apply_admission_cap"],
}


@functools.lru_cache(maxsize=None)   # asked per layer at spec time; the answer is per process
def window_budget_managed() -> bool:
    """True when the installed block manager has the API Int2WindowManager overrides (0.21-0.23);
    then the manager is registered for Int2WindowSpec. 0.24 rewrote its sliding-window manager:
    there the window uses the engine's own SlidingWindowSpec and budget."""
    import inspect

    base = _stm.SlidingWindowManager
    for name, params in _BASE_API.items():
        if list(inspect.signature(getattr(base, name)).parameters) != params:
            return False
    _stm.spec_manager_map.setdefault(Int2WindowSpec, Int2WindowManager)
    return True
