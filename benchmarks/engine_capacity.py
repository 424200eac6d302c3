#!/usr/bin/env python3
"""KV capacity by the engine's own arithmetic (CPU, real aphrodite): the KV specs the attention
layers would hand over, sized by the engine's `get_kv_cache_configs` +
`get_max_concurrency_for_kv_cache_config` (the numbers its "GPU KV cache size" line prints),
against bf16 at the same KV memory. Rows of the installed engine version replace that version's
rows in --out; run it with each engine's venv (.ci/venv.sh).

  python benchmarks/engine_capacity.py dtypes    # -> benchmarks/results/dtype_capacity_cpu.json
  python benchmarks/engine_capacity.py window    # -> benchmarks/results/window_capacity_cpu.json
  python benchmarks/engine_capacity.py dtypes --model gemma3-27b --context 131072   # sliding-window models

dtypes: every KV-cache dtype the engine offers, dense Qwen3-8B shapes (36 layers, 32 q / 8 KV
heads, head_dim 128): TurboQuant with its boundary layers in bf16, int2 with its pages and
recent-window companions from our real layers. `--model hybrid27b`: the Qwen3.5-27B-shaped hybrid
(64 layers: 16 full attention with 24 q / 4 KV heads of 256, 48 Gated DeltaNet with 16 key / 48
value heads of 128), as a Qwen3-Next config: the attention page raised to the GDN state page by
the engine's own _align_hybrid_block_size (Triton's block alignment; int2's backend for int2), the
GDN states (the engine's own shapes) padded to it, prefix caching off as in the H200 runs. Engines with the shape-based KV API (0.21-0.23: a
spec's dtype and quant mode give its page) only; from 0.24 each attention backend packs its own
pages (customize_spec), which this does not rebuild. A dtype the engine cannot size is a row
with its error.

window: int2 with the recent window (R = 128, 256; max_num_batched_tokens 2048, 16384), 32 q / 8 KV
heads, head_dim 128, int2 block 128, the default group size. `budget=ours` is Int2WindowManager's
budget (two windows and a hit point per step in flight); `budget=engine` swaps in the engine's own
SlidingWindowSpec (window + a prefill chunk of max_num_batched_tokens per request).
"""
import argparse
import dataclasses
import json
import os
import pathlib
import sys
import tempfile

os.environ.setdefault("APHRODITE_TARGET_DEVICE", "cpu")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # the package of this tree, installed or not

LAYERS, HEADS, KV_HEADS, HEAD_DIM = 36, 32, 8, 128
OUT = {"dtypes": "benchmarks/results/dtype_capacity_cpu.json", "window": "benchmarks/results/window_capacity_cpu.json"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=sorted(OUT))
    ap.add_argument("--out", help="default: " + ", ".join(f"{k}: {v}" for k, v in OUT.items()))
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--model", default="dense8b", choices=("dense8b", "hybrid27b", "gemma3-27b", "gpt-oss-20b"),
                    help="dtypes: the model shapes")
    ap.add_argument("--max-num-batched-tokens", type=int, default=None,
                    help="the prefill chunk (default: the engine's); sliding-window layers budget a window plus one")
    ap.add_argument("--kv-gib", type=float, help="KV-cache memory every row gets (default: dtypes 64, window 8)")
    a = ap.parse_args()
    kv_gib = a.kv_gib or (64.0 if a.what == "dtypes" else 8.0)
    engine = Engine(a.context, int(kv_gib * (1 << 30)), a.max_num_batched_tokens)
    if a.what == "window":
        rows = window_rows(engine)
    else:
        rows = dtype_rows(engine, kv_gib, a.model)
    out = a.out or OUT[a.what]
    old = json.load(open(out)) if os.path.exists(out) else []
    # this run's rows replace those of the same engine version, model ("dense8b ...") and context
    same = {(r["engine"], r.get("model", "").split(" ")[0], r.get("context_len")) for r in rows}
    old = [r for r in old if r.get("engine") is not None
           and (r["engine"], r.get("model", "").split(" ")[0], r.get("context_len")) not in same]
    json.dump(old + rows, open(out, "w"), indent=1)


class Engine:
    """The real engine on the CPU, the plugin registered, and its capacity arithmetic."""

    def __init__(self, context: int, kv_bytes: int, max_num_batched_tokens: int | None = None):
        from aphrodite_int2kv.engine.offline import use_cpu_platform

        use_cpu_platform()     # the engine's CPU platform, sizing as a GPU would
        import aphrodite_int2kv
        aphrodite_int2kv.register()
        from aphrodite import __version__

        self.context, self.kv_bytes, self.name = context, kv_bytes, f"aphrodite-engine {__version__}"
        self.chunk = max_num_batched_tokens

    def config(self, model, **kw):
        from aphrodite.engine.arg_utils import EngineArgs

        if self.chunk:
            kw.setdefault("max_num_batched_tokens", self.chunk)

        return EngineArgs(model=model, max_model_len=self.context, skip_tokenizer_init=True, **kw).create_engine_config()

    def int2_config(self, model, layers, block: int = 128, **kw):
        """An int2 engine config with `layers` of our real attention layers built in it (pages of
        `block` tokens: the engine's default 128, or a user's --block-size)."""
        from aphrodite_int2kv.engine import offline

        cfg = self.config(model, kv_cache_dtype="int2", **kw)
        cfg.cache_config.block_size = block
        offline.build_int2_layers(cfg, layers)
        return cfg

    def tokens(self, cfg, specs) -> float:
        """Tokens the engine's KV-cache config holds for these layer specs in kv_bytes."""
        from aphrodite_int2kv.engine import offline
        from aphrodite.v1.core.kv_cache_utils import get_kv_cache_configs, get_max_concurrency_for_kv_cache_config

        offline.resolve_layout(cfg)
        (conf,) = get_kv_cache_configs(cfg, [specs], [self.kv_bytes])
        return get_max_concurrency_for_kv_cache_config(cfg, conf) * self.context


# rows that are int2 with a setting: (the engine's kv_cache_dtype, the environment the row sets,
# engine arguments the row sets)
ROW_SETTINGS = {
    "int2-k4": ("int2", {"APHRODITE_INT2KV_K_BITS": "4"}, {}),
    "int2+fp8-local": ("int2", {"APHRODITE_INT2KV_LOCAL_KV_DTYPE": "fp8"}, {}),
    "int2-k4+fp8-local": ("int2", {"APHRODITE_INT2KV_K_BITS": "4", "APHRODITE_INT2KV_LOCAL_KV_DTYPE": "fp8"}, {}),
    # without prefix caching the recent window keeps no pages for prefix-hit points
    "int2-no-prefix-caching": ("int2", {}, {"enable_prefix_caching": False}),
    # --block-size 192: three tiles a page, window pages of 32 tokens (less padding than 16 in 128)
    "int2-block-192": ("int2", {}, {"block": 192}),
}


def dtype_rows(engine: Engine, kv_gib: float, model: str) -> list[dict]:
    """A row for every KV dtype the engine offers: its tokens against bf16's (`auto`), or the error
    where the engine refuses or cannot size it (a result)."""
    from aphrodite_int2kv.engine.kv_api import shape_based_kv_api
    from aphrodite_int2kv.quality.engine_eval import engine_kv_dtypes

    local_global = model in LOCAL_GLOBAL
    if not shape_based_kv_api() and not local_global:
        sys.exit(f"engine_capacity.py dtypes: {engine.name} lets each attention backend pack its pages "
                 "(customize_spec); this sizes the shape-based specs of 0.21-0.23 only: run it in a "
                 "0.21-0.23 environment (.ci/venv.sh 0.21.0)")
    if local_global:
        describe, sized = local_global_sizer(engine, model)
    else:
        describe, sized = {"dense8b": dense_sizer, "hybrid27b": hybrid_sizer}[model](engine)
    bf16_tokens = sized("auto")[0]
    rows = []
    kinds = engine_kv_dtypes() if not local_global else ["auto", "fp8", "int2", "int2+fp8-local",
                                                         "bound:bf16-local", "bound:fp8-local"]
    from aphrodite_int2kv.engine.options import options

    if options().tiles:                  # int2 with APHRODITE_INT2KV_K_BITS=4 (the tile format's 4-bit keys)
        kinds = kinds + ["int2-k4"] + (["int2-k4+fp8-local"] if local_global else [])
    if model == "dense8b":
        kinds = kinds + ["int2-no-prefix-caching"] + (["int2-block-192"] if options().tiles else [])
    for kv in kinds:
        dtype, settings, engine_args = ROW_SETTINGS.get(kv, (kv, {}, {}))
        before = {name: os.environ.get(name) for name in settings}
        os.environ.update(settings)
        row = dict(kv_cache_dtype=kv, model=describe, context_len=engine.context, kv_gib=kv_gib, engine=engine.name,
                   device="CPU (arithmetic only)")
        if cfg_chunk := engine.chunk:
            row["max_num_batched_tokens"] = cfg_chunk
        if kv.startswith("int2"):     # APHRODITE_INT2KV_FORMAT: which int2 format the row sized
            row["int2_format"] = options().format + (f", K_BITS={options().k_bits}" if options().tiles else "")
        try:
            n, extra = sized(dtype, **engine_args)
            row.update(kv_tokens=n, vs_bf16=round(n / bf16_tokens, 3), **extra)
        except Exception as exc:   # noqa: BLE001 - a dtype the engine refuses or cannot size is a result
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        rows.append(row)
        for name, value in before.items():     # the user's own setting back
            if value is None:
                os.environ.pop(name)
            else:
                os.environ[name] = value
        print(f"{kv:<24} {row.get('kv_tokens', row.get('error'))!s:>12} {row.get('vs_bf16', '')}", flush=True)
    return rows


def dense_sizer(engine: Engine):
    """(the model's description, kv -> (tokens, the row's extra fields)) for the dense 8B shapes."""
    import torch
    from aphrodite.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
    from aphrodite.v1.kv_cache_interface import FullAttentionSpec, get_kv_quant_mode

    from aphrodite_int2kv.engine import offline

    model = offline.heads_dir(pathlib.Path(tempfile.mkdtemp()), HEADS, KV_HEADS, HEAD_DIM, max_positions=engine.context)
    names = [f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)]

    def full_specs(kv, block=16):
        dtype = torch.bfloat16 if kv == "auto" else STR_DTYPE_TO_TORCH_DTYPE[kv]
        return {n: FullAttentionSpec(block_size=block, num_kv_heads=KV_HEADS, head_size=HEAD_DIM,
                                     head_size_v=HEAD_DIM, dtype=dtype, kv_quant_mode=get_kv_quant_mode(kv))
                for n in names}

    def turboquant_specs(kv):
        from aphrodite.model_executor.layers.quantization.turboquant.config import TurboQuantConfig
        from aphrodite.v1.kv_cache_interface import TQFullAttentionSpec

        try:
            boundary = TurboQuantConfig.get_boundary_skip_layers(LAYERS)
        except AttributeError:    # 0.24 takes the model config
            boundary = TurboQuantConfig.get_boundary_skip_layers(engine.config(model).model_config)
        tq = TurboQuantConfig.from_cache_dtype(kv, HEAD_DIM)
        bf16 = full_specs("auto")
        return {n: bf16[n] if str(i) in boundary else
                TQFullAttentionSpec(block_size=16, num_kv_heads=KV_HEADS, head_size=HEAD_DIM, head_size_v=HEAD_DIM,
                                    dtype=torch.uint8, tq_slot_size=tq.slot_size_aligned)
                for i, n in enumerate(names)}, boundary

    def sized(kv, **engine_args):
        if kv == "int2":
            cfg = engine.int2_config(model, LAYERS, **engine_args)
            return round(engine.tokens(cfg, offline.engine_specs(cfg))), {
                "note": f"pages of {cfg.cache_config.block_size} tokens (the engine default 128: G64 slots, or two "
                        "64-token tiles with APHRODITE_INT2KV_FORMAT=tiles) and the 128-token bf16 recent window; "
                        "prefix caching "
                        + ("off" if engine_args.get("enable_prefix_caching") is False else "on (the engine default)")}
        if kv.startswith("turboquant_"):
            specs, boundary = turboquant_specs(kv)
            return round(engine.tokens(engine.config(model), specs)), {
                "note": f"layers {', '.join(boundary)} in bf16 (the engine's boundary protection)"}
        if kv in STR_DTYPE_TO_TORCH_DTYPE or kv == "auto":
            return round(engine.tokens(engine.config(model), full_specs(kv))), {}
        raise ValueError(f"no torch dtype for {kv!r} in the engine's STR_DTYPE_TO_TORCH_DTYPE")

    return f"dense8b shapes ({LAYERS} layers, {HEADS} q / {KV_HEADS} KV heads, head_dim {HEAD_DIM})", sized




# models that interleave sliding-window (local) layers with global ones: layer i is global when
# (i + 1) % period == 0. gpt-oss's layers also carry learned attention sinks (given to int2's layers
# here; they change no page size).
LOCAL_GLOBAL = {
    "gemma3-27b": dict(layers=62, heads=32, kv_heads=16, head_dim=128, window=1024, period=6, sinks=False),
    "gpt-oss-20b": dict(layers=24, heads=64, kv_heads=8, head_dim=64, window=128, period=2, sinks=True),
}


def local_global_sizer(engine: Engine, name: str):
    """dense_sizer for the shapes of a model with local and global layers (LOCAL_GLOBAL; Gemma-3-27B:
    62 layers, 52 local with a 1,024-token window, 10 global every sixth, 32 q / 16 KV heads of 128;
    gpt-oss-20b: 24 layers alternating a 128-token window and global, 64 q / 8 KV heads of 64): every
    layer built as the model builds it (ours for int2's global layers, the engine's for the rest),
    the engine's own specs. int2+fp8-local: APHRODITE_INT2KV_LOCAL_KV_DTYPE=fp8."""
    from aphrodite_int2kv.engine import offline

    g = LOCAL_GLOBAL[name]
    model = offline.heads_dir(pathlib.Path(tempfile.mkdtemp()), g["heads"], g["kv_heads"], g["head_dim"],
                              max_positions=engine.context)

    def sized(kv):
        from aphrodite.config import set_current_aphrodite_config

        from aphrodite_int2kv.engine.backend import Int2AttentionBackend

        if kv.startswith("bound:"):   # the arithmetic limit: global layers that cost nothing, local in bf16 / fp8
            local = "auto" if kv == "bound:bf16-local" else "fp8"
            cfg = engine.config(model, kv_cache_dtype=local)
            cfg.cache_config.block_size = 16
            offline.build_int2_layers(cfg, g["layers"], "platform", g["window"], g["period"])
            from aphrodite.v1.kv_cache_interface import SlidingWindowSpec

            specs = {n: s for n, s in offline.engine_specs(cfg).items() if isinstance(s, SlidingWindowSpec)}
            return round(engine.tokens(cfg, specs)), {
                "note": f"the limit of any format for the global layers: only the {local} local layers' "
                        "pages counted (the engine's budget: a window plus a prefill chunk per request)"}
        int2 = kv == "int2"
        cfg = engine.config(model, kv_cache_dtype="int2" if int2 else kv)
        cfg.cache_config.block_size = 16          # the CUDA platform's default before the backend's preference
        layers = offline.build_int2_layers(cfg, g["layers"], "int2" if int2 else "platform", g["window"], g["period"],
                                           sinks=g["sinks"] and int2)
        if int2:
            with set_current_aphrodite_config(cfg):   # what update_block_size_for_backend asks
                cfg.cache_config.block_size = Int2AttentionBackend.get_preferred_block_size(16)
        specs = offline.engine_specs(cfg)
        extra = {"int2_block": cfg.cache_config.block_size} if int2 else {}
        if int2:
            local = specs["model.layers.0.self_attn.attn"]
            n_global = g["layers"] // g["period"]
            extra.update(local_block=local.block_size, local_kv_cache_dtype=layers[0].kv_cache_dtype,
                         note=f"int2 on the {n_global} global layers, the local layers in the engine's own cache; "
                              "pages padded to the local page")
        return round(engine.tokens(cfg, specs)), extra

    return (f"{name} shapes ({g['layers']} layers: one global in {g['period']}, the others with a "
            f"{g['window']}-token window; {g['heads']} q / {g['kv_heads']} KV heads of {g['head_dim']}"
            f"{'; learned attention sinks' if g['sinks'] else ''})"), sized


def hybrid_sizer(engine: Engine):
    """dense_sizer for the hybrid: the attention page aligned to the GDN state page by the engine."""
    from aphrodite_int2kv.engine import offline

    model = offline.hybrid27b_dir(pathlib.Path(tempfile.mkdtemp()), engine.context)

    def sized(kv):
        cfg = engine.config(model, enable_prefix_caching=False, **({} if kv == "auto" else {"kv_cache_dtype": kv}))
        specs = offline.hybrid_specs(cfg, kv)
        extra = {"attention_block_size": cfg.cache_config.block_size}
        if kv == "int2":
            extra["note"] = ("the engine default: int2 pages (fitted to max_model_len), the recent window's "
                             "companions, prefix caching off")
        return round(engine.tokens(cfg, specs)), extra

    return offline.HYBRID27B, sized


def window_rows(engine: Engine) -> list[dict]:
    import torch
    from aphrodite.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    from aphrodite_int2kv.engine import offline
    from aphrodite_int2kv.engine.options import options as aphrodite_int2kv_options

    model = offline.heads_dir(pathlib.Path(tempfile.mkdtemp()), 32, 8, 128, max_positions=32768)
    rows = []
    for R in (128, 256):
        os.environ["APHRODITE_INT2KV_RECENT_WINDOW"] = str(R)
        for mnbt in (2048, 16384):
            for budget in ("ours", "engine"):
                cfg = engine.int2_config(model, 4, max_num_batched_tokens=mnbt)
                specs = offline.engine_specs(cfg)
                if budget == "engine":
                    base = {f.name for f in dataclasses.fields(SlidingWindowSpec)}
                    specs = {n: (SlidingWindowSpec(**{k: getattr(s, k) for k in base})
                                 if isinstance(s, SlidingWindowSpec) else s) for n, s in specs.items()}
                bspecs = {n: FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, dtype=torch.bfloat16)
                          for n in specs if not n.endswith(".int2_window")}
                ratio = engine.tokens(cfg, specs) / engine.tokens(engine.config(model, max_num_batched_tokens=mnbt),
                                                                  bspecs)
                rows.append(dict(window=R, max_num_batched_tokens=mnbt, budget=budget, context_len=engine.context,
                                 int2_block=128, group_size=aphrodite_int2kv_options().group_for(128),
                                 ratio_vs_bf16=round(ratio, 3), engine=engine.name, device="CPU (arithmetic only)"))
                print(rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    main()
