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

Two ways to hold the window in those pages (docs/format.md, "Recent window"):
- paged (with prefix caching, or when a page holds fewer than R tokens): a page per window_block
  positions, pages that slid out freed, the window of the last prefix-hit point kept;
- ring (prefix caching off and a page holds >= R tokens, e.g. hybrid models, whose page the GDN
  state makes large): one page per request for its whole life, position p at offset p mod
  window_block, like the GDN state. A hybrid request then pays one window page instead of 4.
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


def window_block_size(int2_block_size: int, head_size: int, slot_bytes: int, dtype_size: int = 2,
                      padded: bool = False, page_bytes: int | None = None) -> int:
    """Tokens per window page such that the page has the int2 page's bytes (per KV head; `page_bytes`
    where the int2 page is itself padded, on sliding-window models). padded (the tile format, whose
    93 B per token at head_dim 128 divide no window token): the largest divisor of the int2 block
    that fits the page, the rest of the page left as padding, so that prefix-hit points stay at
    multiples of the int2 block."""
    num, den = page_bytes or int2_block_size * slot_bytes, 2 * head_size * dtype_size
    if padded:
        fit = num // den
        return max(d for d in range(1, min(fit, int2_block_size) + 1) if int2_block_size % d == 0)
    if num % den:
        unit = window_page_multiple(head_size, slot_bytes, dtype_size)
        raise Int2ConfigError(
            f"int2 KV recent window: an int2 page of {int2_block_size} tokens ({slot_bytes} B per token and "
            f"head) is not a whole number of full-precision window tokens ({den} B); use a block size that is "
            f"a multiple of {unit} (--block-size), or APHRODITE_INT2KV_RECENT_WINDOW=0")
    return num // den


def window_slot(pos: torch.Tensor, page_tokens: int, sinks: int, ring: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(block-table column, offset in the page) of positions `pos` in the window cache, as the
    kernels read it (kernels/common.py window_slot): paged, position p at offset p % page_tokens of
    column p // page_tokens; a ring, one page whose first `sinks` slots hold the sequence's first
    positions for its whole life and whose other slots are a ring over the positions after them."""
    if not ring:
        return pos // page_tokens, pos % page_tokens
    slots = page_tokens - sinks
    return torch.zeros_like(pos), torch.where(pos < sinks, pos, sinks + (pos - sinks) % slots)


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
    slot_mapping: torch.Tensor   # [num_tokens] window slot of each new token (-1: padding; unused in ring mode)
    ring: bool = False           # one page per request, position p at offset p mod window_block (column 0)


class Int2WindowMetadataBuilder(AttentionMetadataBuilder[Int2WindowMetadata]):
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.ALWAYS

    def __init__(self, kv_cache_spec, layer_names, aphrodite_config, device):
        super().__init__(kv_cache_spec, layer_names, aphrodite_config, device)
        self._ring = bool(getattr(kv_cache_spec, "ring", False))
        _log_window(kv_cache_spec, layer_names, aphrodite_config)

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
        cam = common_attn_metadata
        return Int2WindowMetadata(block_table=cam.block_table_tensor, slot_mapping=cam.slot_mapping,
                                  ring=self._ring)


def _log_window(spec, layer_names, aphrodite_config) -> None:
    """The window's start-up line, from the spec the engine sized it with."""
    try:
        from aphrodite.logger import init_logger

        if getattr(spec, "ring", False):
            how = f"a ring of one page ({spec.block_size} tokens) per request (prefix caching off)"
        else:
            per_req = spec.max_admission_blocks_per_request(
                aphrodite_config.scheduler_config.max_num_batched_tokens, aphrodite_config.model_config.max_model_len)
            how = f"sliding-window pages of {spec.block_size} tokens, at most {per_req} per request"
        init_logger("aphrodite.int2kv").info("int2 recent window of %d tokens on %d layers: %s", spec.sliding_window,
                                             len(layer_names), how)
    except Exception as exc:  # logging must never stop the engine
        import logging

        logging.getLogger("aphrodite_int2kv").warning("int2 window start-up line failed: %s", exc)


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
        from aphrodite_int2kv.engine.options import TILE_SINKS, options

        from aphrodite_int2kv.engine.local_layers import model_pages

        pages = model_pages(aphrodite_config)     # sliding-window models: the shared page (local_layers.py)
        int2_block = pages.int2_block if pages else aphrodite_config.cache_config.block_size
        padded = options().tiles or pages is not None
        sinks = TILE_SINKS if options().tiles else 0
        int2_page = pages.page_bytes if pages else int2_block * self.slot_bytes * self.num_kv_heads
        block = window_block_size(int2_block, self.head_size, self.slot_bytes, dtype.itemsize, padded=padded,
                                  page_bytes=int2_page // self.num_kv_heads)
        common = dict(block_size=block, num_kv_heads=self.num_kv_heads, head_size=self.head_size,
                      dtype=dtype, sliding_window=self.window)
        if padded and int2_page != block * self.num_kv_heads * 2 * self.head_size * dtype.itemsize:
            common["page_size_padded"] = int2_page        # the int2 page's bytes; the engine strides by it
        if not window_budget_managed():
            if sinks:
                raise Int2ConfigError("APHRODITE_INT2KV_FORMAT=tiles keeps each sequence's first tokens in the recent "
                                      "window, which needs the plugin's window manager; this engine's block manager "
                                      "has an API it does not know: use APHRODITE_INT2KV_FORMAT=tokens")
            return SlidingWindowSpec(**common)
        cache = aphrodite_config.cache_config
        if cache.enable_prefix_caching and aphrodite_config.model_config.is_hybrid:
            _check_hybrid_prefix_hashing(cache.block_size, block)
        if not cache.enable_prefix_caching and block >= self.window + sinks:
            return Int2WindowSpec(**common, ring=True, sinks=sinks)
        # hit points only where prefix caching is on (else they would only cost pages)
        # (with sliding-window layers beside, a hit is also a whole number of their pages)
        align = math.lcm(int2_block, block, pages.local_block if pages else 1) if cache.enable_prefix_caching else 0
        return Int2WindowSpec(**common, hit_alignment=align, steps_in_flight=_steps_in_flight(aphrodite_config),
                              sinks=sinks)


@functools.lru_cache(maxsize=None)   # asked per window layer at spec time; the answer is per engine
def _check_hybrid_prefix_hashing(int2_block: int, window_block: int) -> None:
    """Hybrid model + prefix caching + the window: aphrodite 0.21 sets the cache block size to the
    smallest group's (the window's) after sizing, then finds the GDN groups' blocks different from
    it and hashes prefixes at the lcm of all blocks, which its coordinator refuses
    ("block_size must be divisible by hash_block_size", seen on the H200). Asked of the installed
    engine's own resolve_kv_cache_block_sizes with these block sizes; refused here with the fix."""
    from types import SimpleNamespace as NS

    try:
        from aphrodite.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes
        from aphrodite.v1.kv_cache_interface import MambaSpec

        gdn = MambaSpec(block_size=int2_block, shapes=((1,),), dtypes=(torch.float32,), mamba_cache_mode="align")
        groups = [NS(kv_cache_spec=NS(block_size=int2_block, prefix_cacheable=True)), NS(kv_cache_spec=gdn),
                  NS(kv_cache_spec=NS(block_size=window_block, prefix_cacheable=True))]
        cfg = NS(cache_config=NS(block_size=min(int2_block, window_block), enable_prefix_caching=True,
                                 hash_block_size=None, prefix_match_unit=None),
                 parallel_config=NS(decode_context_parallel_size=1, prefill_context_parallel_size=1),
                 kv_transfer_config=None)
        _, hash_block = resolve_kv_cache_block_sizes(NS(kv_cache_groups=groups), cfg)
    except Exception:   # an engine whose resolver takes other inputs: not this failure
        return
    if int2_block % hash_block or window_block % hash_block:
        raise Int2ConfigError(
            f"int2 KV recent window on a hybrid model with prefix caching: this aphrodite version would hash "
            f"prefixes in blocks of {hash_block} tokens, which its own hybrid coordinator refuses (int2 pages of "
            f"{int2_block} tokens, window pages of {window_block}). Start with --no-enable-prefix-caching (the "
            f"default on hybrid models; the window is then one page per request), or "
            f"APHRODITE_INT2KV_RECENT_WINDOW=0")


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


# -- Block budget of the window (the engine's block manager, 0.21-0.24) --------------------------
#
# The engine's SlidingWindowManager gives every newly scheduled token a page, because attention
# kernels read a chunk's own keys from the cache; it therefore budgets each request for
# R - 1 + max_num_batched_tokens window tokens (2,175 bf16 tokens at the defaults: as many bytes
# as ~11,600 int2 tokens), and that budget is what its capacity line and admission use. Our prefill
# reads the chunk's keys from the activations, so only positions still inside the window after the
# step need a page: Int2WindowManager pads the rest with the null page (their writes land there,
# never read), keeps the window of one prefix-hit point per step, and Int2WindowSpec budgets the
# windows alive during a step (see max_admission_blocks_per_request). In ring mode a request holds
# one page from its first step to its end (the int2 impl orders the ring's writes after its reads).
#
# The manager API differs between 0.21-0.23 and 0.24 (an extra positional argument of
# get_num_blocks_to_allocate; remove_skipped_blocks on the processed-token basis; managers found
# through KVCacheSpecRegistry instead of spec_manager_map); the methods below take both.

from aphrodite.utils.math_utils import cdiv  # noqa: E402
from aphrodite.v1.core import single_type_kv_cache_manager as _stm  # noqa: E402
from aphrodite.v1.kv_cache_interface import SlidingWindowSpec  # noqa: E402


@dataclasses.dataclass(frozen=True, kw_only=True)
class Int2WindowSpec(SlidingWindowSpec):
    """A sliding-window spec whose per-request budget is the windows alive during a step, not a
    window plus a chunk. hit_alignment: the engine's prefix-hit granularity, lcm(int2 block,
    window block) (0: no hit-point pages); steps_in_flight: the engine's concurrent batches (0.24's
    async scheduling frees pages only once a step is processed); ring: one page per request, held
    for its whole life (needs block_size >= sliding_window + sinks and no prefix caching); sinks:
    the request's first positions, held for its whole life (paged: its first page is never freed,
    and a prefix hit needs it; ring: the page's first slots)."""
    hit_alignment: int = 0
    steps_in_flight: int = 1
    ring: bool = False
    sinks: int = 0

    def __post_init__(self):
        parent = getattr(super(), "__post_init__", None)   # 0.21 has one, 0.24 not
        if parent is not None:
            parent()
        if self.ring and (self.block_size < self.sliding_window + self.sinks or self.hit_alignment):
            raise Int2ConfigError(f"int2 KV recent window: a ring of {self.block_size} tokens cannot hold a window of "
                                  f"{self.sliding_window} and {self.sinks} sinks (or prefix-hit points, "
                                  f"{self.hit_alignment})")
        if self.sinks > self.block_size:
            raise Int2ConfigError(f"int2 KV recent window: {self.sinks} sinks do not fit a window page of "
                                  f"{self.block_size} tokens; use a larger --block-size")

    def max_admission_blocks_per_request(self, *args, **kwargs) -> int:
        """Per request: the window before the oldest step in flight, the window after each step in
        flight, and each such step's hit-point window (1 step: 2 windows + 1 hit point).
        (0.21 names the first argument max_num_batched_tokens, 0.24 max_in_flight_tokens; neither
        matters here, since the chunk's own positions get no page.)"""
        if self.ring:
            return 1
        max_model_len = kwargs.get("max_model_len", args[1] if len(args) > 1 else None)
        live = self.sliding_window - 1 if max_model_len is None else min(self.sliding_window - 1, max_model_len)
        window = cdiv(live, self.block_size) + 1
        hit_point = cdiv(self.sliding_window - 1, self.block_size) if self.hit_alignment else 0
        steps = max(1, self.steps_in_flight)
        return (1 + steps) * window + steps * hit_point + (1 if self.sinks else 0)


class Int2WindowManager(_stm.SlidingWindowManager):
    """Pages only for positions still inside the window after the scheduled step, plus the window
    of one prefix-hit point per step, plus (spec.sinks) the request's first page for its life."""

    def __init__(self, kv_cache_spec, **kwargs):
        super().__init__(kv_cache_spec, **kwargs)
        self._dead_below: dict[str, int] = {}   # per request: blocks below this index are null

    @classmethod
    def find_longest_cache_hit(cls, block_hashes, max_length, kv_cache_group_ids, block_pool, kv_cache_spec,
                               *args, **kwargs):
        """The engine's sliding-window hit, which needs only the window before the hit point; with
        sinks, the request's first page too (a hit without it is no hit)."""
        found = super().find_longest_cache_hit(block_hashes, max_length, kv_cache_group_ids, block_pool,
                                               kv_cache_spec, *args, **kwargs)
        if not getattr(kv_cache_spec, "sinks", 0):
            return found
        with_length = _manager_api() == "0.24"         # 0.24 returns (blocks, hit length)
        computed = found[0] if with_length else found
        if not computed[0] or computed[0][0] is not block_pool.null_block:
            return found
        resolve = getattr(_stm, "resolve_block_hashes", None)   # 0.24: hashes at the group's block size
        if resolve is not None:
            alignment = kwargs.get("alignment_tokens", args[1] if len(args) > 1 else None)
            block_hashes = resolve(block_hashes, block_pool.hash_block_size, kv_cache_spec.block_size,
                                   supports_fine_grained_hash_lookup=cls.supports_fine_grained_hash_lookup,
                                   alignment_tokens=alignment)
        first = block_pool.get_cached_block(block_hashes[0], kv_cache_group_ids)
        if first is None:
            empty = tuple([] for _ in computed)
            return (empty, 0) if with_length else empty
        for blocks, block in zip(computed, first):
            blocks[0] = block
        return found

    def _hold_first_page(self, request_id, new_computed_blocks) -> None:
        """A prefix hit's first page (the sinks), which the engine replaced by the null page as out
        of the window: held by the request again."""
        if not self.kv_cache_spec.sinks or not new_computed_blocks:
            return
        blocks, first = self.req_to_blocks[request_id], new_computed_blocks[0]
        if blocks and blocks[0] is self._null_block and first is not self._null_block:
            if self.enable_caching:
                self.block_pool.touch([first])
            blocks[0] = first

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
                                   *_rest, apply_admission_cap=False, **_kw):
        # *_rest: num_tokens_main_model (0.21) or num_local_computed_tokens, num_tokens_main_model (0.24)
        if self.kv_cache_spec.ring:
            return 0 if self.req_to_blocks.get(request_id) else 1
        required = cdiv(num_tokens, self.block_size)
        live_from = self._first_live_block(num_tokens)
        held = len(self.req_to_blocks.get(request_id, ()))
        if request_id in self.num_cached_block:   # running: no new prefix hits
            return max(required - max(held, live_from), 0) + len(self._hit_point_blocks(num_tokens, held, live_from))
        skipped = self.get_num_skipped_tokens(total_computed_tokens) // self.block_size
        local = len(new_computed_blocks) + held
        evictable = self._get_num_evictable_blocks(new_computed_blocks[max(0, skipped - held):])
        first_new = max(local, skipped)
        sinks = 0
        if self.kv_cache_spec.sinks:     # the first page: a new one, or the hit's if it was skipped above
            if first_new == 0 and live_from > 0:
                sinks = 1
            elif skipped > held and new_computed_blocks and not held:
                sinks = self._get_num_evictable_blocks(new_computed_blocks[:1])
        return (max(required - max(first_new, live_from), 0) + evictable + sinks
                + len(self._hit_point_blocks(num_tokens, first_new, live_from)))

    def allocate_new_blocks(self, request_id, num_tokens, num_tokens_main_model):
        blocks = self.req_to_blocks[request_id]
        if self.kv_cache_spec.ring:   # the request's one page, on its first step (never zeroed: every
            if blocks:                # position is written before it is read)
                return []
            blocks.extend(self.block_pool.get_new_blocks(1))
            return list(blocks)
        first_new = len(blocks)
        live_from = self._first_live_block(num_tokens)
        if first_new < live_from:   # positions out of the window after this step: the null page
            keep = set(self._hit_point_blocks(num_tokens, first_new, live_from))
            if self.kv_cache_spec.sinks and first_new == 0:
                keep.add(0)         # except the first page: the sinks
            pages = self.block_pool.get_new_blocks(len(keep))
            if getattr(self, "_record_new_block_ids", False):   # 0.24: worker-side zeroing
                self.new_block_ids.extend(b.block_id for b in pages)
            real = iter(pages)
            blocks.extend(next(real) if i in keep else self._null_block for i in range(first_new, live_from))
        super().allocate_new_blocks(request_id, num_tokens, num_tokens_main_model)
        # every new entry, null pages included: a running request's block table on the worker is
        # extended with exactly this list, so leaving the nulls out would shift its later pages
        return blocks[first_new:]

    def remove_skipped_blocks(self, request_id, computed_tokens, *_rest, **_kw):
        # null pages may sit between live ones (a chunk's interior), so scan from the last cut
        # instead of stopping at the first null page as the engine's managers do
        if self.kv_cache_spec.ring:   # the ring page lives as long as the request
            return
        blocks = self.req_to_blocks[request_id]
        end = min(self.get_num_skipped_tokens(computed_tokens) // self.block_size, len(blocks))
        start = self._dead_below.get(request_id, 1 if self.kv_cache_spec.sinks else 0)   # the sinks' page stays
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


def _holding_first_page(name: str):
    """The base class's method that adds a new request's prefix-hit blocks, then _hold_first_page."""
    base = getattr(_stm.SlidingWindowManager, name)

    @functools.wraps(base)
    def method(self, request_id, new_computed_blocks, *args, **kwargs):
        base(self, request_id, new_computed_blocks, *args, **kwargs)
        self._hold_first_page(request_id, new_computed_blocks)
    return method


# 0.21-0.23 name it allocate_new_computed_blocks, 0.24 add_local_computed_blocks
for _name in ("allocate_new_computed_blocks", "add_local_computed_blocks"):
    if hasattr(_stm.SlidingWindowManager, _name):
        setattr(Int2WindowManager, _name, _holding_first_page(_name))


def _reachable_with_first_page(cls, start_block, end_block, alignment_tokens, kv_cache_spec, *args, **kwargs):
    """(0.24, which caches sliding-window pages sparsely) which of the pages [start_block,
    end_block) to hash into the prefix cache: the engine's choice, and with sinks the first page
    always (a hit needs it)."""
    mask = _stm.SlidingWindowManager.reachable_block_mask.__func__(
        cls, start_block, end_block, alignment_tokens, kv_cache_spec, *args, **kwargs)
    if mask is not None and getattr(kv_cache_spec, "sinks", 0) and start_block == 0 < end_block:
        mask = [True, *mask[1:]]
    return mask


if hasattr(_stm.SlidingWindowManager, "reachable_block_mask"):   # 0.24 only
    Int2WindowManager.reachable_block_mask = classmethod(_reachable_with_first_page)


# The base-class methods Int2WindowManager overrides, as each engine API names their parameters.
_API_021 = {
    "remove_skipped_blocks": ["self", "request_id", "total_computed_tokens"],
    "allocate_new_blocks": ["self", "request_id", "num_tokens", "num_tokens_main_model"],
    "get_num_blocks_to_allocate": ["self", "request_id", "num_tokens", "new_computed_blocks",
                                   "total_computed_tokens", "num_tokens_main_model", "apply_admission_cap"],
}
_API_024 = {
    "remove_skipped_blocks": ["self", "request_id", "processed_computed_tokens", "num_prompt_tokens"],
    "allocate_new_blocks": ["self", "request_id", "num_tokens", "num_tokens_main_model"],
    "get_num_blocks_to_allocate": ["self", "request_id", "num_tokens", "new_computed_blocks",
                                   "total_computed_tokens", "num_local_computed_tokens", "num_tokens_main_model",
                                   "apply_admission_cap"],
}


@functools.lru_cache(maxsize=None)   # asked per layer at spec time; the answer is per process
def _manager_api() -> str | None:
    """Which engine manager API the installed SlidingWindowManager has ('0.21', '0.24' or None)."""
    import inspect

    base = _stm.SlidingWindowManager
    for name, api in (("0.21", _API_021), ("0.24", _API_024)):
        if all(list(inspect.signature(getattr(base, m)).parameters) == p for m, p in api.items()):
            return name
    return None


def _register_0_24() -> None:
    """0.24 finds managers through KVCacheSpecRegistry, which registers the built-in specs the
    first time it is asked, unless something is registered already: so ours goes in right after
    the built-ins (or at once if they are there)."""
    from aphrodite.v1 import kv_cache_spec_registry as registry

    def ours():
        registry.KVCacheSpecRegistry.register(Int2WindowSpec, Int2WindowManager,
                                              uniform_type_base_spec=SlidingWindowSpec)

    if registry._REGISTRY_KVCACHESPEC_LIST:
        ours()
        return
    builtins = _stm.register_all_kvcache_specs
    if getattr(builtins, "_int2kv_wrapped", False):
        return

    @functools.wraps(builtins)
    def register_all_kvcache_specs(aphrodite_config):
        builtins(aphrodite_config)
        ours()

    register_all_kvcache_specs._int2kv_wrapped = True
    _stm.register_all_kvcache_specs = register_all_kvcache_specs


def _steps_in_flight(aphrodite_config) -> int:
    """Steps whose pages the 0.24 manager still holds when it allocates the next (it frees on the
    processed-token basis; 2 with async scheduling). 0.21-0.23 free on the scheduled basis: 1."""
    if _manager_api() != "0.24":
        return 1
    return max(1, int(getattr(aphrodite_config, "max_concurrent_batches", 1)))


@functools.lru_cache(maxsize=None)   # asked per layer at spec time; the answer is per process
def window_budget_managed() -> bool:
    """True when the installed block manager has an API Int2WindowManager knows (0.21-0.23 or
    0.24); the manager is then registered for Int2WindowSpec. Otherwise the window uses the
    engine's own SlidingWindowSpec and budget (a window plus a prefill chunk per request)."""
    api = _manager_api()
    if api == "0.21":
        _stm.spec_manager_map.setdefault(Int2WindowSpec, Int2WindowManager)
    elif api == "0.24":
        _register_0_24()
    return api is not None
