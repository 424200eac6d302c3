"""The int2 attention backend (registered in aphrodite's CUSTOM slot, selected for int2 layers).

Store: `do_kv_cache_update` rotates the new tokens' K/V and runs the store kernel.
Forward: decodes first (reorder threshold 1), split-KV grouped decode kernel; then prefills and
chunked-prefill continuations with the prefill kernel (int2 prefix + full-precision chunk).
Queries are rotated into K's basis before the kernels, outputs rotated back out of V's.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from typing import ClassVar

import torch

from aphrodite.v1.attention.backend import (AttentionBackend, AttentionCGSupport, AttentionImpl,
                                            AttentionMetadata, AttentionMetadataBuilder,
                                            AttentionType, MultipleOf)
from aphrodite.v1.attention.backends.utils import split_decodes_and_prefills

from aphrodite_int2kv.engine.kv_api import shape_based_kv_api
from aphrodite_int2kv.engine.options import INT2, TILE, TILE_SINKS, options, slot_bytes_for
from aphrodite_int2kv.int2.format import HEAD_DIMS, Int2ConfigError, SlotLayout, pages_heads_first
from aphrodite_int2kv.int2.reference import rotate, unrotate_output
from aphrodite_int2kv.int2.rotation import hadamard, load_rotation_file
from aphrodite_int2kv.int2.tile_format import TileLayout, TilePages
from aphrodite_int2kv.kernels.decode import decode_launch_config, int2_decode
from aphrodite_int2kv.kernels.limits import device_limits
from aphrodite_int2kv.kernels.prefill import int2_prefill
from aphrodite_int2kv.kernels.centers import sequence_centers
from aphrodite_int2kv.kernels.store import Centering, int2_store, window_store
from aphrodite_int2kv.kernels.tile_attention import sink_log2, tile_attention
from aphrodite_int2kv.kernels.tile_split_decode import tile_decode_splits, tile_split_decode
from aphrodite_int2kv.kernels.tile_store import tile_store
from aphrodite_int2kv.engine.window import window_name, window_slot, window_views



def _page_multiple() -> int:
    """Tokens an int2 page must be a multiple of, for the model being configured (16 when unknown)."""
    opts = options()
    try:
        from aphrodite.config import get_current_aphrodite_config_or_none

        cfg = get_current_aphrodite_config_or_none()
        head = cfg.model_config.get_head_size() if cfg and cfg.model_config else None
    except Exception:
        head = None
    if opts.tiles:
        return TILE     # pages of whole tiles; the window's pages are padded to the int2 page
    if not opts.recent_window or head not in HEAD_DIMS:
        return 16
    from aphrodite_int2kv.engine.window import window_page_multiple

    return math.lcm(16, window_page_multiple(head, slot_bytes_for(head, opts)))


def fitted_hybrid_block(aphrodite_config, block: int) -> int:
    """The int2 page (tokens) of a hybrid model that serves one max_model_len request in the fewest
    bytes, from `block`, the smallest page that holds a GDN state (upstream's alignment). A request
    holds ceil(L / b) int2 pages per attention layer plus, per attention layer, the GDN layers'
    state pages (one each, prefix caching off) and the recent window's ring page, all of b tokens'
    bytes: it costs (ceil(L / b) + extra) x b. Fewer, larger pages can cost less where L leaves the
    last page part-filled (32K at 2,304 tokens: 15 pages, the 15th 22 % full; 14 of 2,368 cost
    2.6 % less). The result is a multiple of `block`'s alignment and never below it."""
    mc, pc = aphrodite_config.model_config, aphrodite_config.parallel_config
    try:
        L = int(mc.max_model_len)
        attn = mc.get_num_layers_by_block_type(pc, "attention")
        layers = mc.get_num_layers(pc)
    except Exception:   # noqa: BLE001 - a config we cannot count keeps upstream's page
        return block
    if not (L > 0 and 0 < attn < layers):
        return block
    from aphrodite.config import set_current_aphrodite_config

    with set_current_aphrodite_config(aphrodite_config):
        align = _page_multiple()
    extra = (layers - attn) / attn + (1 if options().recent_window else 0)

    def cost(b):
        return (-(-L // b) + extra) * b

    best = block
    for pages in range(-(-L // block) - 1, 0, -1):
        b = -(-(-(-L // pages)) // align) * align        # the fewest tokens that fit L in `pages`
        if b > 2 * block:
            break
        if cost(b) < cost(best):
            best = b
    return best


class Int2AttentionBackend(AttentionBackend):
    accept_output_buffer: bool = True
    forward_includes_kv_cache_update: bool = False
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[list[str]] = [INT2]

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"  # Attention.__init__ looks the name up in AttentionBackendEnum

    @staticmethod
    def get_impl_cls():
        return Int2AttentionImpl

    @staticmethod
    def get_builder_cls():
        return Int2MetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes() -> list[int | MultipleOf]:
        # the kernels take any page size; 16 keeps hybrid pages aligned, and with the recent window
        # a page must also hold a whole number of full-precision window tokens (hybrid models get
        # their block size from this alignment): 32 tokens at G = 64
        return [MultipleOf(_page_multiple())]

    @classmethod
    def get_preferred_block_size(cls, default_block_size: int) -> int:
        """128 on dense models with the recent window: its page is then 20 tokens (D = 128, G = 64;
        24 at G = 32), so the engine hashes prefixes at gcd(128, 20) = 4 tokens (with 16 it would be
        2.5: no whole page), and the window budget (2 x 8 + 7 pages of 20 tokens) costs 9 % of
        int2's pages at 32K (measured: 5.86x bf16's tokens). Hybrid models get their block size
        from the GDN-state alignment instead."""
        try:
            from aphrodite.config import get_current_aphrodite_config_or_none

            cfg = get_current_aphrodite_config_or_none()
            hybrid = bool(cfg and cfg.model_config and cfg.model_config.is_hybrid)
        except Exception:
            cfg, hybrid = None, False
        opts = options()
        if cfg is not None and not hybrid:
            from aphrodite_int2kv.engine.local_layers import model_pages

            pages = model_pages(cfg)
            if pages is not None:   # sliding-window layers beside int2 ones: the int2 block fitted to their pages
                return pages.int2_block
        if opts.tiles and not hybrid:
            # two tiles: prefix-hit points every 128 tokens, the window in pages of 16 tokens
            # padded to the int2 page (11,904 B per head at head_dim 128, 23.25 bf16 tokens)
            return -(-max(128, default_block_size) // TILE) * TILE
        if opts.recent_window and not hybrid:
            return max(128, default_block_size)
        return max(16, default_block_size)

    @classmethod
    def supports_kv_cache_dtype(cls, kv_cache_dtype) -> bool:
        return kv_cache_dtype == INT2

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return list(HEAD_DIMS)

    @classmethod
    def supports_sink(cls) -> bool:
        """Learned attention sinks (gpt-oss): the tile format's kernels take them (the per-token
        format's impl refuses them at build, naming the setting)."""
        return True

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER

    # 0.21-0.23 (shape-based KV API): one uint8 slot per token and KV head.
    @staticmethod
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size, cache_dtype_str=INT2):
        return (num_blocks, block_size, num_kv_heads, slot_bytes_for(head_size))

    # 0.24+ (layout-based KV API).
    @classmethod
    def customize_spec(cls, spec):
        quant = getattr(getattr(spec, "kv_quant_mode", None), "name", "NONE")
        if spec.state_content_bytes is not None or spec.dtype != torch.uint8 or quant != "NONE":
            return spec  # e.g. a bf16 skip-layer or an fp8 (uint8, quantized) spec probed through this backend
        return dataclasses.replace(spec, state_content_bytes=slot_bytes_for(spec.head_size))

    @classmethod
    def supported_kv_cache_layouts(cls):
        from aphrodite.v1.kv_cache_layout import KVCacheLayout

        # heads first within a page (docs/format.md); token-major pages work too, at a cost
        return (KVCacheLayout.LBHNC, KVCacheLayout.LBNHC)


@dataclasses.dataclass
class Int2Metadata(AttentionMetadata):
    seq_lens: torch.Tensor
    slot_mapping: torch.Tensor
    block_table: torch.Tensor
    query_start_loc: torch.Tensor
    num_actual_tokens: int
    max_query_len: int
    num_decodes: int
    num_decode_tokens: int
    num_prefills: int


def check_engine_features(aphrodite_config) -> None:
    """Engine features int2 does not support yet stop start-up here (the builder runs in every
    worker before the first step) instead of running unverified."""
    spec = getattr(aphrodite_config, "speculative_config", None)
    if spec is not None:
        raise Int2ConfigError(
            "--kv-cache-dtype int2 does not support speculative decoding yet (speculative_config "
            f"method={getattr(spec, 'method', '?')!r}): start without --speculative-config, or use "
            "--kv-cache-dtype auto/fp8 for speculative decoding")


def check_window_companions(aphrodite_config, layer_names) -> None:
    """With the recent window on, every int2 layer must have its companion (registered when the
    layer was built): otherwise the window would silently not exist."""
    if not options().recent_window:
        return
    ctx = aphrodite_config.compilation_config.static_forward_context
    missing = [n for n in layer_names if window_name(n) not in ctx
               and getattr(ctx.get(n), "kv_sharing_target_layer_name", None) is None]
    if missing:
        raise Int2ConfigError(
            f"int2 KV: APHRODITE_INT2KV_RECENT_WINDOW={options().recent_window} but the window caches of "
            f"{len(missing)} int2 layers ({missing[0]}, ...) were not registered: the plugin's patches "
            f"must be applied before the model is built (is the aphrodite_int2kv plugin loaded in this "
            f"process?). Set APHRODITE_INT2KV_RECENT_WINDOW=0 to run without the window")


class Int2MetadataBuilder(AttentionMetadataBuilder[Int2Metadata]):
    # FULL CUDA graphs for pure one-token decode batches; prefills run piecewise.
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE

    def __init__(self, kv_cache_spec, layer_names, aphrodite_config, device):
        super().__init__(kv_cache_spec, layer_names, aphrodite_config, device)
        check_engine_features(aphrodite_config)
        check_window_companions(aphrodite_config, layer_names)
        self._init_reorder_batch_threshold(1, supports_spec_as_decode=False)
        _log_active(kv_cache_spec, layer_names, aphrodite_config)

    def build_for_cudagraph_capture(self, common_attn_metadata):
        meta = self.build(0, common_attn_metadata)
        meta.seq_lens.fill_(1)  # replay fills the real lengths
        return meta

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
        cam = common_attn_metadata
        num_decodes, num_prefills, num_decode_tokens, _ = split_decodes_and_prefills(
            cam, decode_threshold=self.reorder_batch_threshold)
        return Int2Metadata(seq_lens=cam.seq_lens, slot_mapping=cam.slot_mapping,
                            block_table=cam.block_table_tensor, query_start_loc=cam.query_start_loc,
                            num_actual_tokens=cam.num_actual_tokens, max_query_len=cam.max_query_len,
                            num_decodes=num_decodes, num_decode_tokens=num_decode_tokens,
                            num_prefills=num_prefills)


def _log_active(spec, layer_names, aphrodite_config=None) -> None:
    """The start-up proof: one line per int2 KV-cache group in the worker (which layers are int2,
    and on sliding-window models which keep the engine's own cache)."""
    try:
        from aphrodite.logger import init_logger

        from aphrodite_int2kv.engine.local_layers import describe, layer_ranges

        opts = options()
        heads, head = spec.num_kv_heads, spec.head_size
        layout = opts.tile_layout(head) if opts.tiles else SlotLayout(head, opts.group_for(head))
        window = ""
        if opts.recent_window:
            window = (f"; + recent window of {opts.recent_window} tokens per sequence in full precision "
                      f"({opts.recent_window * heads * head * 4} B per sequence per layer, own pages counted in "
                      f"the engine's KV capacity: see the window line)")
        init_logger("aphrodite.int2kv").info(
            "int2 KV cache active on %d layers (%s): %s; %d B per token per layer (bf16: %d B, %.2fx "
            "fewer); page %d tokens%s%s", len(layer_names), layer_ranges(layer_names), opts.describe(head), heads * slot_bytes_for(head, opts),
            heads * head * 4, layout.ratio_vs(), spec.block_size, window,
            describe(aphrodite_config) if aphrodite_config is not None else "")
    except Exception as exc:  # logging must never stop the engine
        import logging

        logging.getLogger("aphrodite_int2kv").warning("int2 start-up line failed: %s", exc)


def _layer_index(layer) -> int | None:
    name = getattr(layer, "layer_name", "") or ""
    nums = [int(p) for p in name.split(".") if p.isdigit()]
    return nums[0] if len(nums) == 1 else None


def _tp() -> tuple[int, int]:
    """(rank, world size) of tensor parallelism; (0, 1) when no group is set up (tests)."""
    try:
        from aphrodite.distributed import (get_tensor_model_parallel_rank,
                                           get_tensor_model_parallel_world_size)

        return get_tensor_model_parallel_rank(), get_tensor_model_parallel_world_size()
    except Exception:
        return 0, 1


def token_requests(query_start_loc, n: int) -> torch.Tensor:
    """Request index of each of the batch's n new tokens (padded tokens past the last request count
    as its own). Device ops only, so CUDA-graph capture records it."""
    idx = torch.arange(n, device=query_start_loc.device, dtype=query_start_loc.dtype)
    ends = query_start_loc[1:].contiguous()
    return torch.searchsorted(ends, idx, right=True).clamp(max=ends.shape[0] - 1)


def token_positions(query_start_loc, seq_lens, n: int) -> torch.Tensor:
    """Absolute position of each of the batch's n new tokens (request r's new tokens are the last
    q_len_r of its seq_len). Device ops only, so CUDA-graph capture records it; padded tokens past
    the last request continue its positions (they are never stored: slot -1)."""
    idx = torch.arange(n, device=query_start_loc.device, dtype=query_start_loc.dtype)
    req = token_requests(query_start_loc, n)
    first = seq_lens - (query_start_loc[1:] - query_start_loc[:-1])
    return first[req] + idx - query_start_loc[req]


_STEP_TOKENS: list = [None]     # (weakref to the step's metadata, n, requests, positions)


def step_tokens(m, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(request index, position) int32 [n] of the step's new tokens, computed once per step and
    shared by every layer of its KV cache group (they share the metadata object)."""
    memo = _STEP_TOKENS[0]
    if memo is not None and memo[0]() is m and memo[1] == n:
        return memo[2], memo[3]
    req = token_requests(m.query_start_loc, n).to(torch.int32)
    pos = token_positions(m.query_start_loc, m.seq_lens, n).to(torch.int32)
    try:
        _STEP_TOKENS[0] = (weakref.ref(m), n, req, pos)
    except TypeError:           # metadata without weak references: no reuse, still correct
        _STEP_TOKENS[0] = None
    return req, pos


_RING: list = [None]            # (weakrefs to the step's int2 and window metadata, n, table, slots)


def ring_window(m, wmeta, slot_mapping, n: int, R: int, W: int, sinks: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The ring window of this step (engine/window.py): (table [B, cols] int32 whose every entry is
    the request's one window page; slots int64 [n]: page * W + the position's offset (window_slot:
    the first `sinks` positions at offsets 0.. for the request's life, the others on a ring of
    W - sinks offsets) for the new tokens still inside the window after the step, p >= seq_len - R,
    and the sinks, and -1 for the others and for padding, whose int2 slot is -1). Device ops only
    (CUDA graphs); computed once per step and shared by the group's layers."""
    memo = _RING[0]
    if memo is not None and memo[0]() is m and memo[1]() is wmeta and memo[2] == (n, sinks):
        return memo[3], memo[4]
    bt = wmeta.block_table
    table = bt[:, :1].expand(-1, bt.shape[1]).contiguous()
    req, pos = step_tokens(m, n)
    req = req.long()
    page = bt[req, 0].long()
    keep = (slot_mapping[:n] >= 0) & ((pos >= m.seq_lens[req] - R) | (pos < sinks))
    slots = torch.where(keep, page * W + window_slot(pos.long(), W, sinks, True)[1], -1)
    try:
        _RING[0] = (weakref.ref(m), weakref.ref(wmeta), (n, sinks), table, slots)
    except TypeError:
        _RING[0] = None
    return table, slots


def _from_token(c: Centering | None, start: int) -> Centering | None:
    """The centering of a store that begins at the step's token `start`."""
    if c is None or start == 0:
        return c
    return dataclasses.replace(c, requests=None if c.requests is None else c.requests[start:],
                               positions=None if c.positions is None else c.positions[start:])


def _rows(center, lo, hi):
    """Requests [lo, hi) of per-request offsets [B, Hkv, D]; layer offsets [Hkv, D] as they are."""
    return center[lo:hi] if center.dim() == 3 else center


def _layer_metadata(layer):
    """This layer's attention metadata from the engine's forward context; None when there is none
    (no context, or the profiling run). A context whose metadata we cannot read is an error: the
    sinks would be stored centered and read as uncentered."""
    try:
        from aphrodite.forward_context import get_forward_context

        am = get_forward_context().attn_metadata
    except Exception:
        return None
    if am is None:
        return None
    name = getattr(layer, "layer_name", None)
    if isinstance(am, dict) and name in am:
        return am[name]
    raise Int2ConfigError(f"int2 KV: cannot find the attention metadata of layer {name!r} to place the "
                          f"uncentered sink tokens; set APHRODITE_INT2KV_K_CENTER_SKIP=0 to center every token")


class Int2AttentionImpl(AttentionImpl[Int2Metadata]):
    def __init__(self, num_heads, head_size, scale, num_kv_heads, alibi_slopes, sliding_window,
                 kv_cache_dtype, logits_soft_cap=None, attn_type=AttentionType.DECODER,
                 kv_sharing_target_layer_name=None, **extra):
        if sliding_window is not None:   # the patch builds sliding-window layers with the local dtype instead
            raise Int2ConfigError(f"int2 KV: layer given a sliding window of {sliding_window} tokens; sliding-window "
                                  f"layers keep the engine's own cache (APHRODITE_INT2KV_LOCAL_KV_DTYPE), int2 is "
                                  f"for the global layers")
        reasons = []
        if attn_type != AttentionType.DECODER:
            reasons.append(f"attention type {attn_type} (only decoder self-attention)")
        if alibi_slopes is not None:
            reasons.append("ALiBi")
        if logits_soft_cap:
            reasons.append("logits soft-capping")
        sink_logits = extra.get("sinks")
        if sink_logits is not None and not options().tiles:
            reasons.append("attention sinks with APHRODITE_INT2KV_FORMAT=tokens (the default tile format has them)")
        elif sink_logits is not None and tuple(sink_logits.shape) != (num_heads,):
            reasons.append(f"attention sinks of shape {tuple(sink_logits.shape)} for {num_heads} query heads")
        if head_size not in HEAD_DIMS:
            reasons.append(f"head size {head_size} (supported: {HEAD_DIMS})")
        if reasons:
            raise Int2ConfigError("--kv-cache-dtype int2 does not support " + "; ".join(reasons) +
                                  ". Use another kv-cache dtype, or list these layers in "
                                  "kv_cache_dtype_skip_layers.")
        self.opts = options()
        # one of the two formats: per-token slots (layout) or channel-tile records (tiles)
        self.tiles = self.opts.tile_layout(head_size) if self.opts.tiles else None
        self.layout = None if self.tiles is not None else SlotLayout(head_size, self.opts.group_for(head_size))
        self.num_heads, self.num_kv_heads, self.head_size = num_heads, num_kv_heads, head_size
        self.scale = float(scale)
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.sink_logits = sink_logits    # [Hq] learned attention sinks (gpt-oss; the layer's parameter) or None
        self._sinks_log2 = None           # their log2 form for the kernels: process_weights_after_loading
        self._rot = None  # (R_q, R_k, R_v) on the device, built on first use
        self._k_center = None
        self._centers_memo = None   # data-free offsets of the current step (see _step_centers)
        self.window = self.opts.recent_window if kv_sharing_target_layer_name is None else 0
        # 0.21-0.23 hand the cache as [blocks, block_size, kv_heads, slot], which we read heads
        # first; 0.24 hands the logical [blocks, kv_heads, block_size, slot] view (_cache_view).
        self._heads_first = not shape_based_kv_api()
        self._cache_memo = None     # (engine tensor, its view): _cache_view

    # -- rotations and K centering ----------------------------------------------------------
    def _rotations(self, layer, device):
        """(R_k for queries [D,D] or [Hq,D,D], R_k for keys, R_v); also sets self._k_center, the
        rotated K offset [Hkv, D] from the K rotation file's 'k_offset' (None when absent)."""
        if self._rot is None:
            mats, offset = [], None
            for which, source in (("K", self.opts.k_rotation), ("V", self.opts.v_rotation)):
                if source == "hadamard":
                    m = hadamard(self.head_size)
                elif source == "none":
                    m = torch.eye(self.head_size)
                else:
                    idx = _layer_index(layer)
                    if idx is None:
                        raise Int2ConfigError(f"int2 KV: cannot tell the layer index of "
                                              f"{getattr(layer, 'layer_name', layer)!r} to pick its rotation")
                    entry = load_rotation_file(source, self.head_size, self.num_kv_heads, [idx], _tp())[idx]
                    m = entry["rotation"]
                    if which == "K" and "k_offset" in entry:
                        offset = entry["k_offset"]
                        if offset.shape[0] not in (1, self.num_kv_heads):
                            raise Int2ConfigError(
                                f"int2 KV rotation file {source!r}, layer {idx}: k_offset has "
                                f"{offset.shape[0]} heads; this layer has {self.num_kv_heads} KV heads "
                                f"(per rank) -- give one offset or one per KV head")
                mats.append(m.to(device))
            rk, rv = mats
            # queries of KV head h use K head h's rotation
            rq = rk if rk.dim() == 2 or rk.shape[0] == 1 else \
                rk.repeat_interleave(self.num_heads // self.num_kv_heads, 0)
            if offset is not None:
                # softmax ignores q.c (the same for every key), so storing K - c changes no attention
                # weight but frees the 2-bit range from the per-channel constant (docs/format.md)
                offset = offset.to(device).expand(self.num_kv_heads, self.head_size)
                self._k_center = rotate(offset[None], rk)[0].float().contiguous()
            self._rot = (rq, rk, rv)
        return self._rot

    def _sinks(self) -> int:
        """Leading positions of each sequence stored uncentered (their scores get -q.c)."""
        if self._k_center is not None:
            return self.opts.k_center_skip
        return self.opts.k_center_first

    def _step_centers(self, cache, m):
        """Data-free offsets [B, Hkv, D] of this step's requests, computed once per layer and step:
        the store computes them right after writing the first N keys, and the layer's attention,
        which follows with the same metadata object and cache, reuses them (under CUDA-graph
        capture the attention then records no second computation). Any other caller recomputes."""
        memo = self._centers_memo
        if memo is not None and memo[0]() is m and memo[1] == cache.data_ptr():
            return memo[2]
        c = sequence_centers(cache, m.block_table, m.seq_lens, self.layout, self.opts.k_center_first,
                             self.opts.lloyd_max)
        try:
            self._centers_memo = (weakref.ref(m), cache.data_ptr(), c)
        except TypeError:           # metadata without weak references: no reuse, still correct
            self._centers_memo = None
        return c

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping, attn_metadata=None):
        """Rotate the new tokens' K/V and store them: int2, and the recent window when on. With K
        centering, K - c is stored except at the first `sinks` positions of each sequence.
        Data-free centering (APHRODITE_INT2KV_K_CENTER_FIRST = N): the first N positions are stored
        first, each sequence's offset c is read back from the cache (the mean of those N keys), and
        then the later positions are stored as K - c."""
        if self.kv_sharing_target_layer_name is not None:
            return
        cache = self._cache_view(kv_cache)
        n = slot_mapping.shape[0]
        _, rk, rv = self._rotations(layer, key.device)
        k = rotate(key[:n].view(n, self.num_kv_heads, self.head_size), rk).to(key.dtype).contiguous()
        v = rotate(value[:n].view(n, self.num_kv_heads, self.head_size), rv).to(value.dtype).contiguous()
        if self.tiles is not None:
            return self._update_tiles(layer, k, v, cache, slot_mapping, attn_metadata)
        store = dict(layout=self.layout, k_clip=self.opts.k_clip, v_clip=self.opts.v_clip,
                     lloyd_max=self.opts.lloyd_max, std_range=self.opts.std_range)
        win = self._window_state(layer, key.dtype)
        sinks = self._sinks()
        m = None
        if sinks or self.opts.k_center_first or (win is not None and win[2].ring):
            m = attn_metadata if attn_metadata is not None else _layer_metadata(layer)
        if self.opts.k_center_first and m is not None:   # (no metadata: the profiling run)
            first = Centering(None, positions=step_tokens(m, n)[1], sinks=sinks)
            int2_store(k, v, slot_mapping, cache, **store, centering=first, only=1)
            self._centers_memo = None   # the first N keys were just written: recompute from them
            centering = self._store_centering(self._step_centers(cache, m), m, n)
            int2_store(k, v, slot_mapping, cache, **store, centering=centering, only=2)
        else:
            centering = self._store_centering(self._k_center, m, n)
            int2_store(k, v, slot_mapping, cache, **store, centering=centering)
        if win is None:
            return
        # the window holds what the int2 cache holds, in full precision
        if win[2].ring:
            # The ring reuses offsets, so a chunk's keys could overwrite the prefix window it reads:
            # decodes are stored now (each reads its own key from the ring), prefills by forward()
            # once they have read it.
            nd = m.num_decode_tokens
            slots = ring_window(m, win[2], slot_mapping, n, self.window, win[0].shape[1])[1]
            window_store(k[:nd], v[:nd], slots[:nd], win[0], win[1], centering=centering)
        else:
            window_store(k, v, win[2].slot_mapping[:n], win[0], win[1], centering=centering)

    def _update_tiles(self, layer, k, v, cache, slot_mapping, attn_metadata):
        """FORMAT=tiles: the new tokens go to the recent window, and every tile of T tokens that
        this step completes is quantized into its record (kernels/tile_store.py). A tile's earlier
        tokens are read from the window, which still holds them (R >= T), its new ones from the
        step's K/V. Decode batches (which CUDA graphs capture) take one candidate tile per token,
        skipped where none completes; batches with prefills take only the completed tiles."""
        win = self._window_state(layer, k.dtype)
        if win is None:             # the profiling run: no step to store
            return
        m = attn_metadata if attn_metadata is not None else _layer_metadata(layer)
        n = k.shape[0]
        k_win, v_win, wmeta = win
        W, S = k_win.shape[1], TILE_SINKS
        if wmeta.ring:
            # decodes now; the prefills' ring entries after they read the prefix window (forward)
            nd = m.num_decode_tokens
            table, slots = ring_window(m, wmeta, slot_mapping, n, self.window, W, S)
            window_store(k[:nd], v[:nd], slots[:nd], k_win, v_win)
        else:
            table = wmeta.block_table
            window_store(k, v, wmeta.slot_mapping[:n], k_win, v_win)
        T, dev = TILE, k.device
        req, pos = (x.long() for x in step_tokens(m, n))
        done = ((pos + 1) % T == 0) & (slot_mapping[:n] >= 0)
        cand = done.nonzero().squeeze(1) if m.num_prefills else torch.arange(n, device=dev)
        r, last = req[cand], pos[cand]
        q_lens = (m.query_start_loc[1:] - m.query_start_loc[:-1]).long()
        first_new = (m.seq_lens.long() - q_lens)[r]                      # each request's first new position
        tok = (last - (T - 1))[:, None] + torch.arange(T, device=dev)     # [C, T] the tiles' positions
        from_new = (tok >= first_new[:, None])[..., None, None]
        rows = (m.query_start_loc.long()[r][:, None] + tok - first_new[:, None]).clamp(0, n - 1)
        col, off = window_slot(tok.clamp(min=0), W, S, wmeta.ring)
        wpage = table[r[:, None], col.clamp(max=table.shape[1] - 1)].long()
        kt = torch.where(from_new, k[rows], k_win[wpage, off])
        vt = torch.where(from_new, v[rows], v_win[wpage, off])
        start = (last - (T - 1)).clamp(min=0)
        bs = cache.shape[1]
        dest = m.block_table[r, start // bs].long() * (bs // T) + (start % bs) // T
        dest = torch.where(done[cand], dest, -1)
        # tile 0 leaves its first S positions (the sinks, read from the window) out of its ranges
        exclude = torch.where(start == 0, S, 0).to(torch.int32)
        tile_store(kt.transpose(1, 2).contiguous(), vt.transpose(1, 2).contiguous(), exclude, dest,
                   self._tile_pages(cache), self.tiles)

    def process_weights_after_loading(self, act_dtype):
        """The engine's hook after (re)loading the weights: the learned sink logits in the kernels'
        log2 units, made here once per loading instead of at every step, in one buffer that captured
        CUDA graphs keep reading."""
        if self.sink_logits is None:
            return
        log2 = sink_log2(self.sink_logits)
        if self._sinks_log2 is not None and self._sinks_log2.device == log2.device:
            self._sinks_log2.copy_(log2)
        else:
            self._sinks_log2 = log2

    def _tile_pages(self, cache) -> TilePages:
        try:
            return TilePages.of_cache(cache, self.tiles)
        except ValueError as exc:
            raise Int2ConfigError(f"APHRODITE_INT2KV_FORMAT=tiles: {exc}. The engine must lay pages out heads "
                                  f"first (LBHNC) with a block size that is a multiple of {TILE}") from None

    def _store_centering(self, center, m, n):
        """How the store centers the step's n keys: K - c except at positions < sinks (None: no
        centering). center: per request [B, Hkv, D] (data-free) or [Hkv, D] (rotation file)."""
        if center is None:
            return None
        sinks = self._sinks()
        if center.dim() == 3:
            req, pos = step_tokens(m, n)
            return Centering(center, req, pos, sinks)
        pos = step_tokens(m, n)[1] if sinks and m is not None else None
        return Centering(center, positions=pos, sinks=sinks if pos is not None else 0)

    def _window_state(self, layer, dtype):
        """(k_win, v_win, window metadata) of this layer's recent-window companion for the current
        step; None when the window is off or there is no step (profiling). A step without the
        companion's cache or metadata is an error: int2 was asked for with a window."""
        if not self.window:
            return None
        try:
            from aphrodite.forward_context import get_forward_context

            fc = get_forward_context()
        except Exception:
            return None
        am = fc.attn_metadata
        if am is None:
            return None
        name = window_name(getattr(layer, "layer_name", ""))
        if isinstance(am, list):
            am = am[0]
        companion = fc.no_compile_layers.get(name)
        meta = am.get(name) if isinstance(am, dict) else None
        if companion is None or meta is None or companion.kv_cache.numel() == 0:
            raise Int2ConfigError(
                f"int2 KV: the recent-window cache of layer {getattr(layer, 'layer_name', layer)!r} "
                f"({name}) is missing from this engine step; was the plugin registered before the model "
                f"was built? Set APHRODITE_INT2KV_RECENT_WINDOW=0 to run without the window")
        cache = companion.kv_cache
        if isinstance(cache, (list, tuple)):   # older engines kept one cache per virtual engine
            cache = cache[0]
        k_win, v_win = window_views(cache, self.num_kv_heads, self.head_size, dtype, self._heads_first)
        sinks = TILE_SINKS if self.tiles is not None else 0
        if meta.ring and k_win.shape[1] < self.window + sinks:
            raise Int2ConfigError(
                f"int2 KV: the ring window of layer {getattr(layer, 'layer_name', layer)!r} reached the kernels "
                f"in pages of {k_win.shape[1]} tokens (the engine split its pages), fewer than the window's "
                f"{self.window} and {sinks} sinks; set APHRODITE_INT2KV_RECENT_WINDOW <= {k_win.shape[1] - sinks}")
        return k_win, v_win, meta

    def _cache_view(self, kv_cache):
        """-> [blocks, block_size, kv_heads, slot] over the engine's pages, each page heads first
        (docs/format.md). 0.24 lays pages out itself: with the LBHNC layout we ask for, its logical
        [blocks, kv_heads, block_size, slot] view is heads first already (with LBNHC, imposed by
        another backend, the kernels read the token-major pages through the same strides)."""
        memo = self._cache_memo     # the engine hands each layer the same tensor every step
        if memo is None or memo[0] is not kv_cache:
            view = kv_cache.transpose(1, 2) if self._heads_first else pages_heads_first(kv_cache)
            self._cache_memo = memo = (kv_cache, view)
        return memo[1]

    def _forward_tiles(self, layer, q, key, value, cache, m, n, rk, rv):
        """FORMAT=tiles: the decodes in the split decode (kernels/tile_split_decode.py: a KV head's
        records read once for its query heads, shares of each sequence over the GPU), the prefills
        in one launch (kernels/tile_attention.py: the tiles before each chunk's window, the window,
        the chunk causally); then the prefills' ring entries."""
        H, D = self.num_kv_heads, self.head_size
        k = rotate(key[:n].view(n, H, D), rk).to(q.dtype).contiguous()
        v = rotate(value[:n].view(n, H, D), rv).to(q.dtype).contiguous()
        k_win, v_win, wmeta = self._window_state(layer, q.dtype)
        W, S = k_win.shape[1], TILE_SINKS
        table = ring_window(m, wmeta, m.slot_mapping, n, self.window, W, S)[0] if wmeta.ring else wmeta.block_table
        pages = self._tile_pages(cache)
        if self.sink_logits is not None and self._sinks_log2 is None:   # (a layer used without the engine's loader)
            self.process_weights_after_loading(q.dtype)
        sinks_log2 = self._sinks_log2
        out = torch.empty_like(q)
        nd, nr = m.num_decode_tokens, m.num_decodes
        if nr:
            # the launch shape depends on the batch size and the GPU only (CUDA graphs)
            ratio = self.num_heads // H
            splits = tile_decode_splits(nr, H * -(-ratio // 16), device_limits(q.device).num_sms)
            tile_split_decode(q[:nd], k[:nd], v[:nd], pages, m.block_table[:nr], m.seq_lens[:nr], self.scale,
                        (k_win, v_win, table[:nr], self.window), out=out[:nd], num_splits=splits,
                        sinks=S, ring=wmeta.ring, sinks_log2=sinks_log2)
        if m.num_prefills:
            qsl = (m.query_start_loc[nr:] - m.query_start_loc[nr]).to(torch.int32)
            tile_attention(q[nd:n], k[nd:], v[nd:], pages, m.block_table[nr:], qsl, m.seq_lens[nr:],
                           m.max_query_len, self.scale, (k_win, v_win, table[nr:], self.window), out=out[nd:n],
                           sinks=S, ring=wmeta.ring, sinks_log2=sinks_log2)
            if wmeta.ring:
                slots = ring_window(m, wmeta, m.slot_mapping, n, self.window, W, S)[1]
                window_store(k[nd:], v[nd:], slots[nd:n], k_win, v_win)
        return out

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output=None,
                output_scale=None, output_block_scale=None):
        assert output is not None
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("int2 KV: fused output quantization is not supported")
        if attn_metadata is None:  # profiling run
            return output.fill_(0)
        m = attn_metadata
        n = m.num_actual_tokens
        cache = self._cache_view(kv_cache)
        rq, rk, rv = self._rotations(layer, query.device)
        q = rotate(query[:n].view(n, self.num_heads, self.head_size), rq).to(query.dtype).contiguous()
        if self.tiles is not None:
            out_rot = self._forward_tiles(layer, q, key, value, cache, m, n, rk, rv)
            out = unrotate_output(out_rot, rv, self.num_kv_heads)
            output[:n].view(n, self.num_heads, self.head_size).copy_(out)
            return output
        out_rot = torch.empty_like(q)
        nd = m.num_decode_tokens
        sinks = self._sinks()
        center = self._k_center             # [Hkv, D], or per request [B, Hkv, D] (data-free)
        if self.opts.k_center_first:
            center = self._step_centers(cache, m)
        win = self._window_state(layer, query.dtype)
        wtable = None
        if win is not None:
            wtable = (ring_window(m, win[2], m.slot_mapping, n, self.window, win[0].shape[1])[0] if win[2].ring
                      else win[2].block_table)
        limits = device_limits(query.device)      # the launch planners' GPU (read once per device)
        if m.num_decodes:
            # The launch shape depends on the batch only, so CUDA-graph capture and replay match.
            cfg = decode_launch_config(m.num_decodes, self.num_kv_heads, self.num_heads // self.num_kv_heads,
                                       self.head_size, fold=self.opts.fold_decode,
                                       limits=limits, group_size=self.layout.group_size)
            int2_decode(q[:nd], cache, m.block_table[:m.num_decodes], m.seq_lens[:m.num_decodes],
                        self.layout, self.scale, cfg.num_splits, out=out_rot[:nd], lloyd_max=self.opts.lloyd_max,
                        **cfg.kwargs(), sinks=sinks, limits=limits,
                        k_center=_rows(center, 0, m.num_decodes) if sinks else None,
                        window=(win[0], win[1], wtable[:m.num_decodes], self.window) if win else None)
        if m.num_prefills:
            # the chunk's own keys, centered like everything it attends to (its sinks included:
            # the prefill kernel corrects only what it reads from the caches)
            k_rot = rotate(key[nd:n].view(n - nd, self.num_kv_heads, self.head_size), rk)
            k = k_rot
            if center is not None:
                k = k - (center[step_tokens(m, n)[0][nd:].long()] if center.dim() == 3 else center)
            k = k.to(query.dtype).contiguous()
            v = rotate(value[nd:n].view(n - nd, self.num_kv_heads, self.head_size), rv).to(query.dtype).contiguous()
            qsl = m.query_start_loc[m.num_decodes:] - m.query_start_loc[m.num_decodes]
            int2_prefill(q[nd:], k, v, cache, m.block_table[m.num_decodes:], qsl.to(torch.int32),
                         m.seq_lens[m.num_decodes:], m.max_query_len, self.layout, self.scale,
                         out=out_rot[nd:], lloyd_max=self.opts.lloyd_max, sinks=sinks, limits=limits,
                         k_center=_rows(center, m.num_decodes, None) if sinks else None,
                         window=(win[0], win[1], wtable[m.num_decodes:], self.window) if win else None)
            if win is not None and win[2].ring:
                # the prefills' ring entries, now that the prefill kernel has read the prefix window
                # (the decodes' were stored by do_kv_cache_update)
                slots = ring_window(m, win[2], m.slot_mapping, n, self.window, win[0].shape[1])[1]
                window_store(k_rot.to(query.dtype).contiguous(), v, slots[nd:n], win[0], win[1],
                             centering=_from_token(self._store_centering(center, m, n), nd))
        out = unrotate_output(out_rot, rv, self.num_kv_heads)
        output[:n].view(n, self.num_heads, self.head_size).copy_(out)
        return output
