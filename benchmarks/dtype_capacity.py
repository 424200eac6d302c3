#!/usr/bin/env python3
"""KV capacity of every KV-cache dtype the installed engine offers, by the engine's own arithmetic
(CPU, real aphrodite): the KV specs its attention layers would hand over (TurboQuant's boundary
layers in bf16, int2's pages and recent-window companions from our real layers), sized by its
`get_kv_cache_configs` + `get_max_concurrency_for_kv_cache_config`, the numbers its "GPU KV cache
size" line prints, against bf16 at the same KV memory.

  python benchmarks/dtype_capacity.py --out benchmarks/results/dtype_capacity_cpu.json

Dense Qwen3-8B shapes (36 layers, 32 q / 8 KV heads, head_dim 128). Engines with the shape-based
KV API (0.21-0.23: a spec's dtype and quant mode give its page) only; from 0.24 each attention
backend packs its own pages (customize_spec), which this script does not rebuild. A dtype whose
spec the engine cannot size is a row with its error; rows of the installed engine version replace
that version's rows in --out.
"""
import argparse
import json
import os
import pathlib
import sys
import tempfile

os.environ.setdefault("APHRODITE_TARGET_DEVICE", "cpu")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # the test helpers build int2 layers

LAYERS, HEADS, KV_HEADS, HEAD_DIM = 36, 32, 8, 128


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="benchmarks/results/dtype_capacity_cpu.json")
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--kv-gib", type=float, default=64.0, help="KV-cache memory every dtype gets")
    a = ap.parse_args()
    import aphrodite.platforms as platforms

    if type(platforms.current_platform).__name__ == "UnspecifiedPlatform":
        from aphrodite.platforms.cpu import CpuPlatform

        platforms._current_platform = CpuPlatform()
    import torch

    import aphrodite_int2kv
    aphrodite_int2kv.register()
    from aphrodite import __version__ as version
    from aphrodite.engine.arg_utils import EngineArgs
    from aphrodite.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
    from aphrodite.v1.core.kv_cache_utils import get_kv_cache_configs, get_max_concurrency_for_kv_cache_config
    from aphrodite.v1.kv_cache_interface import FullAttentionSpec, get_kv_quant_mode

    import aphrodite_int2kv_tests.test_engine_int2 as T
    from aphrodite_int2kv.engine.kv_api import shape_based_kv_api
    from aphrodite_int2kv.quality.engine_eval import engine_kv_dtypes

    if not shape_based_kv_api():
        sys.exit(f"dtype_capacity.py: aphrodite-engine {version} lets each attention backend pack its pages "
                 "(customize_spec); this script sizes the shape-based specs of 0.21-0.23 only: run it in a "
                 "0.21-0.23 environment (.ci/venv.sh 0.21.0)")

    model = T._heads_dir(pathlib.Path(tempfile.mkdtemp()), HEADS, KV_HEADS, HEAD_DIM, max_positions=a.context)
    mem = int(a.kv_gib * (1 << 30))
    names = [f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)]

    def tokens(cfg, specs):
        T._resolve_layout(cfg)
        (conf,) = get_kv_cache_configs(cfg, [specs], [mem])
        return round(get_max_concurrency_for_kv_cache_config(cfg, conf) * a.context)

    def base_cfg():
        return EngineArgs(model=model, max_model_len=a.context, skip_tokenizer_init=True).create_engine_config()

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
            boundary = TurboQuantConfig.get_boundary_skip_layers(base_cfg().model_config)
        tq = TurboQuantConfig.from_cache_dtype(kv, HEAD_DIM)
        bf16 = full_specs("auto")
        return {n: bf16[n] if str(i) in boundary else
                TQFullAttentionSpec(block_size=16, num_kv_heads=KV_HEADS, head_size=HEAD_DIM, head_size_v=HEAD_DIM,
                                    dtype=torch.uint8, tq_slot_size=tq.slot_size_aligned)
                for i, n in enumerate(names)}, boundary

    bf16_tokens = tokens(base_cfg(), full_specs("auto"))
    rows = []
    for kv in engine_kv_dtypes():
        row = dict(kv_cache_dtype=kv, model=f"dense8b shapes ({LAYERS} layers, {HEADS} q / {KV_HEADS} KV heads, "
                   f"head_dim {HEAD_DIM})", context_len=a.context, kv_gib=a.kv_gib, engine=f"aphrodite-engine {version}",
                   device="CPU (arithmetic only)")
        try:
            if kv == "int2":
                cfg = EngineArgs(model=model, kv_cache_dtype="int2", max_model_len=a.context,
                                 skip_tokenizer_init=True).create_engine_config()
                cfg.cache_config.block_size = 128
                T._build_int2_layers(cfg, LAYERS)
                n = tokens(cfg, T._engine_specs(cfg))
                row["note"] = "the engine default: G64 pages of 128 tokens and the 128-token bf16 recent window"
            elif kv.startswith("turboquant_"):
                specs, boundary = turboquant_specs(kv)
                n = tokens(base_cfg(), specs)
                row["note"] = f"layers {', '.join(boundary)} in bf16 (the engine's boundary protection)"
            elif kv in STR_DTYPE_TO_TORCH_DTYPE or kv == "auto":
                n = tokens(base_cfg(), full_specs(kv))
            else:
                raise ValueError(f"no torch dtype for {kv!r} in the engine's STR_DTYPE_TO_TORCH_DTYPE")
            row.update(kv_tokens=n, vs_bf16=round(n / bf16_tokens, 3))
        except Exception as exc:   # noqa: BLE001 - a dtype the arithmetic cannot size is a result
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        rows.append(row)
        print(f"{kv:<24} {row.get('kv_tokens', row.get('error'))!s:>12} {row.get('vs_bf16', '')}", flush=True)
    old = json.load(open(a.out)) if os.path.exists(a.out) else []
    old = [r for r in old if r.get("engine") != f"aphrodite-engine {version}"]
    json.dump(old + rows, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
