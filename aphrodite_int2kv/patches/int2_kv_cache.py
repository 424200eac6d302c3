"""The `int2` KV-cache dtype: accepted by the config and CLI, routed to our backend, sized right.

Why:
    aphrodite has no 2-bit KV cache. Its kv-cache dtype is a closed `Literal`, backend choice is a
    fixed priority list, and its page-size arithmetic assumes whole bytes per element.
How (each step probes before it changes anything; every wrapper carries the plugin's sentinel):
    A. `CacheConfig.cache_dtype` Literal gains "int2" (field type + pydantic rebuild), the CLI
       choices cache is cleared, the attention selector's own `CacheDType` name is rebound, and
       `STR_DTYPE_TO_TORCH_DTYPE["int2"] = torch.uint8`.
    B. `register_backend(CUSTOM, Int2AttentionBackend)` and `_get_backend_priorities` returns
       `[CUSTOM]` for int2 layers (non-int2 layers keep upstream's list); a backend the user
       selects (--attention-backend) applies to the non-int2 layers, int2 layers keep ours.
    C. Shape-based KV API (0.21-0.23, detected by `TQFullAttentionSpec`): int2 layers report a
       `TQFullAttentionSpec` whose slot size is the int2 slot; the layout-based API (0.24) asks
       the backend's `customize_spec` instead and needs nothing here.
    D. Hybrid (GDN/Mamba) page alignment: `_align_hybrid_block_size` runs upstream's algorithm
       with int2's real bytes per token (shape-based API; 0.24 asks the backend), so the saving
       becomes capacity; then, with prefix caching off and no block size given, it takes the page
       that serves a max_model_len request in the fewest bytes (`fitted_hybrid_block`): int2 pages
       are so few per request (15 at 32K) that a part-filled last page costs up to 7 %.
    E. Recent window (both APIs): `Attention.__init__` of an int2 layer checks that it got our
       backend (else: a clear error, e.g. on a non-CUDA platform) and registers its
       full-precision sliding-window companion (`engine/window.py`) when
       APHRODITE_INT2KV_RECENT_WINDOW > 0, so the engine's block manager owns the window, and
       registers Int2WindowManager for Int2WindowSpec (`spec_manager_map` on 0.21-0.23,
       `KVCacheSpecRegistry` on 0.24): pages only for positions inside the window after each step,
       plus one prefix-hit point's window per step.
    F. MLA layers (`MLAAttention`, `DeepseekV4MLAAttention`) built with int2 raise a clear error
       naming the layer: their own backends would be asked to read int2 pages.
    G. Sliding-window models (Gemma 2/3, Mistral-style local attention; `engine/local_layers.py`):
       `Attention.__init__` builds a local layer of an int2 model with the local dtype
       (APHRODITE_INT2KV_LOCAL_KV_DTYPE: the model dtype or fp8) on the engine's own backend;
       `get_kv_cache_spec` gives the local layers pages of a 16-token multiple and pads the int2
       and window pages to them (the engine needs one page size); the engine picks the block size
       from the int2 backend (`_find_non_ssm_backend`), which fits the int2 block to those pages.
       Layers listed in kv_cache_dtype_skip_layers are sized the same way.
Upstream PR:
    none (a new feature of this plugin).
Remove when:
    never for A-C while the plugin provides int2; D's sizing when the oldest supported engine
    sizes attention pages through the backend (0.24 does); D's fitting never.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Literal, get_args

from aphrodite_int2kv.engine.kv_api import int2_spec, shape_based_kv_api
from aphrodite_int2kv.engine.local_layers import is_local_layer_build, local_cache_config
from aphrodite_int2kv.engine.options import INT2
from aphrodite_int2kv.patches import APPLIED, FAILED, Outcome, is_ours, mark

NAME = "int2-kv-cache-dtype"
PR = None
BACKEND_PATH = "aphrodite_int2kv.engine.backend.Int2AttentionBackend"


def _with_int2(lit):
    args = get_args(lit)
    return lit if INT2 in args else Literal[args + (INT2,)]


def _dtype_literal() -> str:
    import torch
    from pydantic.dataclasses import rebuild_dataclass

    import aphrodite.config.cache as cache_mod
    import aphrodite.engine.arg_utils as arg_utils
    import aphrodite.v1.attention.selector as selector
    from aphrodite.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE

    field = cache_mod.CacheConfig.__dataclass_fields__["cache_dtype"]
    new = _with_int2(field.type)
    if INT2 not in get_args(field.type):
        field.type = new                                       # what pydantic and argparse read
        cache_mod.CacheConfig.__annotations__["cache_dtype"] = new
        cache_mod.CacheConfig.__pydantic_fields__["cache_dtype"].annotation = new
        rebuild_dataclass(cache_mod.CacheConfig, force=True)
    cache_mod.CacheDType = _with_int2(cache_mod.CacheDType)
    selector.CacheDType = _with_int2(selector.CacheDType)    # its own name, used in an assert
    arg_utils._compute_kwargs.cache_clear()                  # lru-cached argparse choices
    arg_utils.EngineArgs.__dataclass_fields__["kv_cache_dtype"].type = new
    STR_DTYPE_TO_TORCH_DTYPE.setdefault(INT2, torch.uint8)
    cache_mod.CacheConfig(cache_dtype=INT2)                   # self-test: raises if not accepted
    return "dtype"


def _backend_selection() -> str:
    from aphrodite.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    register_backend(AttentionBackendEnum.CUSTOM, BACKEND_PATH)
    try:
        import aphrodite.platforms.cuda as cuda_platform  # imports aphrodite._C (CUDA hosts)
    except Exception as exc:  # CPU-only install: nothing to route
        return f"backend (no CUDA platform: {type(exc).__name__})"
    orig = cuda_platform._get_backend_priorities
    if is_ours(orig):
        return "backend"
    sig = inspect.signature(orig)  # positional in 0.21-0.23, keyword-only in 0.24

    @functools.wraps(orig)
    def _get_backend_priorities(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        if bound.arguments.get("kv_cache_dtype") == INT2 and not bound.arguments.get("use_mla"):
            return [AttentionBackendEnum.CUSTOM]
        return orig(*args, **kwargs)

    cuda_platform._get_backend_priorities = mark(_get_backend_priorities)
    _selected_backend_for_other_layers(cuda_platform.CudaPlatformBase)
    return "backend"


def _selected_backend_for_other_layers(platform_cls) -> None:
    """A backend the user selects (--attention-backend / attention_config) applies to the layers int2
    does not take (a Gemma model's sliding-window layers); int2 layers still get the int2 backend,
    where upstream would refuse the selected one for the int2 dtype."""
    orig = platform_cls.__dict__["get_attn_backend_cls"].__func__
    if is_ours(orig):
        return

    @functools.wraps(orig)
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, *args, **kwargs):
        if selected_backend is not None and getattr(attn_selector_config, "kv_cache_dtype", None) == INT2 \
                and not getattr(attn_selector_config, "use_mla", False):
            selected_backend = None      # our priorities route int2 layers to the int2 backend
        return orig(cls, selected_backend, attn_selector_config, *args, **kwargs)

    platform_cls.get_attn_backend_cls = classmethod(mark(get_attn_backend_cls))


def _kv_spec() -> str:
    import dataclasses

    from aphrodite.model_executor.layers.attention.attention import Attention

    orig = Attention.get_kv_cache_spec
    if is_ours(orig):
        return "kv-spec"
    shape_based = shape_based_kv_api()

    @functools.wraps(orig)
    def get_kv_cache_spec(self, aphrodite_config):
        from aphrodite_int2kv.engine.local_layers import local_spec, model_pages

        if self.kv_cache_dtype != INT2:
            spec = orig(self, aphrodite_config)
            if spec is None or getattr(aphrodite_config.cache_config, "cache_dtype", None) != INT2:
                return spec
            pages = model_pages(aphrodite_config)   # G: a layer kept out of int2 in an int2 model
            return spec if pages is None else local_spec(spec, pages)
        pages = model_pages(aphrodite_config)       # None unless layers are kept out of int2 (G)
        # (a sliding-window layer never gets here: it was built with the local dtype)
        if not shape_based:
            # 0.24: the engine's spec, which its runner hands to our backend's customize_spec to
            # pack (the int2 bytes per token); with local layers its block and the shared page,
            # which the packed page fits by construction (local_layers.shared_pages)
            spec = orig(self, aphrodite_config)
            if pages is None:
                return spec
            return dataclasses.replace(spec, block_size=pages.int2_block, page_size_padded=pages.page_bytes)
        block = pages.int2_block if pages else aphrodite_config.cache_config.block_size
        spec = int2_spec(block, self.num_kv_heads, self.head_size)
        if pages is not None and pages.page_bytes != spec.page_size_bytes:
            spec = dataclasses.replace(spec, page_size_padded=pages.page_bytes)
        return spec

    Attention.get_kv_cache_spec = mark(get_kv_cache_spec)
    return "kv-spec"


def _int2_backend_sizes_pages() -> str:
    """The engine picks the block size from the first attention layer's backend; in a Gemma-style
    model that is a local layer's flash attention (16 tokens). With int2 the int2 backend's
    preference counts (G: the block whose page fits the local pages)."""
    from aphrodite.platforms.interface import Platform

    orig = Platform.__dict__["_find_non_ssm_backend"].__func__
    if is_ours(orig):
        return "block-size"

    @functools.wraps(orig)
    def _find_non_ssm_backend(cls, aphrodite_config):
        if getattr(aphrodite_config.cache_config, "cache_dtype", None) == INT2:
            from aphrodite.config.aphrodite import get_layers_from_aphrodite_config
            from aphrodite.model_executor.layers.attention_layer_base import AttentionLayerBase

            from aphrodite_int2kv.engine.backend import Int2AttentionBackend

            for layer in get_layers_from_aphrodite_config(aphrodite_config, AttentionLayerBase).values():
                backend = layer.get_attn_backend()
                if isinstance(backend, type) and issubclass(backend, Int2AttentionBackend):
                    return backend
        return orig(cls, aphrodite_config)

    Platform._find_non_ssm_backend = classmethod(mark(_find_non_ssm_backend))
    return "block-size"


@contextlib.contextmanager
def _attention_pages_sized_as_int2():
    """Inside upstream's hybrid alignment, `FullAttentionSpec(dtype=uint8, ...)` is how it sizes
    one token of attention; answer with int2's real slot bytes instead."""
    import torch

    import aphrodite.v1.kv_cache_interface as kvi

    real = kvi.FullAttentionSpec

    def sized(**kw):
        if kw.get("dtype") == torch.uint8:
            return int2_spec(**kw)
        return real(**kw)

    kvi.FullAttentionSpec = sized
    try:
        yield
    finally:
        kvi.FullAttentionSpec = real


def _hybrid_alignment() -> str:
    from aphrodite.platforms.interface import Platform

    orig = Platform.__dict__["_align_hybrid_block_size"].__func__
    if is_ours(orig):
        return "hybrid-pages"

    sizing = _attention_pages_sized_as_int2 if shape_based_kv_api() else contextlib.nullcontext

    @functools.wraps(orig)
    def _align_hybrid_block_size(cls, aphrodite_config, backend_cls):
        cache = aphrodite_config.cache_config
        if cache.cache_dtype != INT2:
            return orig(cls, aphrodite_config, backend_cls)
        if cache.kv_cache_dtype_skip_layers:
            from aphrodite_int2kv.int2.format import Int2ConfigError

            raise Int2ConfigError("int2 KV on a hybrid (GDN/Mamba) model does not support "
                                  "kv_cache_dtype_skip_layers yet: all attention layers must share "
                                  "one page size; remove the skip list")
        with sizing():
            out = orig(cls, aphrodite_config, backend_cls)
            if getattr(cache, "mamba_cache_mode", "none") == "none" and not getattr(
                    cache, "user_specified_block_size", False):
                from aphrodite_int2kv.engine.backend import fitted_hybrid_block

                fitted = fitted_hybrid_block(aphrodite_config, cache.block_size)
                if fitted != cache.block_size:
                    # upstream's algorithm again from the larger block: the GDN state page is padded to it
                    cache.block_size = fitted
                    out = orig(cls, aphrodite_config, backend_cls)
        return out

    Platform._align_hybrid_block_size = classmethod(mark(_align_hybrid_block_size))
    return "hybrid-pages"


def _configured_dtype():
    """The KV-cache dtype the engine is being configured with (None outside a model build)."""
    from aphrodite.config import get_current_aphrodite_config_or_none

    cfg = get_current_aphrodite_config_or_none()
    return getattr(getattr(cfg, "cache_config", None), "cache_dtype", None)


def _window_companions() -> str:
    from aphrodite.model_executor.layers.attention.attention import Attention

    orig = Attention.__init__
    if is_ours(orig):
        return "recent-window"

    sig = inspect.signature(orig)

    @functools.wraps(orig)
    def __init__(self, *args, **kwargs):
        bound = sig.bind_partial(self, *args, **kwargs)
        cache_config = bound.arguments.get("cache_config")
        if is_local_layer_build(cache_config, bound.arguments.get("per_layer_sliding_window")):
            # G: a sliding-window layer of an int2 model keeps the engine's own cache and backend
            bound.arguments["cache_config"] = local_cache_config(cache_config)
            args, kwargs = bound.args[1:], bound.kwargs
        orig(self, *args, **kwargs)
        if getattr(self, "kv_cache_dtype", None) != INT2:
            return
        from aphrodite_int2kv.engine.backend import Int2AttentionBackend
        from aphrodite_int2kv.engine.options import options

        backend = getattr(self, "attn_backend", None)
        if not (isinstance(backend, type) and issubclass(backend, Int2AttentionBackend)):
            # e.g. a CPU/ROCm/XPU platform, which never routes int2 to our backend: its own
            # backend would read the int2 pages as something else
            from aphrodite.platforms import current_platform

            from aphrodite_int2kv.int2.format import Int2ConfigError

            raise Int2ConfigError(
                f"--kv-cache-dtype int2 needs the CUDA platform and the int2 attention backend; layer "
                f"{self.layer_name} got {getattr(backend, '__name__', backend)} on "
                f"{type(current_platform).__name__}. Use an NVIDIA GPU, or another --kv-cache-dtype")

        opts = options()
        if not opts.recent_window or self.kv_sharing_target_layer_name is not None:
            return
        from aphrodite.config import get_current_aphrodite_config

        from aphrodite_int2kv.engine.options import slot_bytes_for
        from aphrodite_int2kv.engine.window import Int2WindowLayer

        ctx = get_current_aphrodite_config().compilation_config.static_forward_context
        Int2WindowLayer(self.layer_name, self.num_kv_heads, self.head_size, opts.recent_window,
                        slot_bytes_for(self.head_size, opts), ctx)

    Attention.__init__ = mark(__init__)
    from aphrodite_int2kv.engine.window import window_budget_managed

    # the block manager lives in the engine-core process: register our window manager there too
    return "recent-window" + (" (window-sized page budget)" if window_budget_managed() else
                              " (engine sliding-window budget)")


MLA_REFUSED = ("--kv-cache-dtype int2 does not support MLA attention (layer {prefix!r}: DeepSeek-style "
               "latent KV, one shared latent vector per token instead of K and V heads); use --kv-cache-dtype "
               "auto or fp8 for this model")


def _refuse_mla() -> str:
    """MLA layers pick their own backends: an int2 request would reach one that cannot read int2
    pages (or fail somewhere less clear). Refuse it where the layer is built, naming the layer."""
    classes = []
    for mod, name in (("aphrodite.model_executor.layers.attention.mla_attention", "MLAAttention"),
                      ("aphrodite.model_executor.layers.deepseek_v4_attention", "DeepseekV4MLAAttention")):
        try:
            classes.append(getattr(__import__(mod, fromlist=[name]), name))
        except (ImportError, AttributeError):
            continue
    for cls in classes:
        orig = cls.__init__
        if is_ours(orig):
            continue
        sig = inspect.signature(orig)

        def __init__(self, *args, _orig=orig, _sig=sig, **kwargs):
            bound = _sig.bind_partial(self, *args, **kwargs).arguments
            dtype = getattr(bound.get("cache_config"), "cache_dtype", None) or _configured_dtype()
            if dtype == INT2:
                from aphrodite_int2kv.int2.format import Int2ConfigError

                raise Int2ConfigError(MLA_REFUSED.format(prefix=bound.get("prefix", "")))
            _orig(self, *args, **kwargs)

        cls.__init__ = mark(functools.wraps(orig)(__init__))
    return f"MLA refused ({len(classes)} layer classes)"


def apply() -> Outcome:
    done = []
    try:
        done.append(_dtype_literal())
        done.append(_backend_selection())
        done.append(_window_companions())
        done.append(_refuse_mla())
        done.append(_kv_spec())
        done.append(_int2_backend_sizes_pages())
        done.append(_hybrid_alignment())
    except Exception as exc:
        return Outcome(NAME, FAILED, f"after {done}: {type(exc).__name__}: {exc}", PR)
    return Outcome(NAME, APPLIED, ", ".join(done), PR)
