#!/usr/bin/env python3
"""KV capacity with the recent window, by the engine's own arithmetic (CPU, real aphrodite).

  python benchmarks/window_capacity.py --out benchmarks/results/window_capacity_cpu.json

Builds Qwen3-8B-shaped int2 layers (32 q / 8 KV heads, head_dim 128, int2 block 128, the default
group size) as a model would, collects the engine-facing KV specs (int2 pages + the window companions), and runs the
engine's `get_kv_cache_configs` + `get_max_concurrency_for_kv_cache_config` (what its "GPU KV cache
size" line reports) against bf16 at the same memory. `budget=ours` is Int2WindowManager's budget
(two windows and a hit point per step in flight); `budget=engine` swaps in the engine's own
SlidingWindowSpec (window + a prefill chunk of max_num_batched_tokens per request). Rows of the
installed engine version replace that version's rows in --out; run it with each engine's venv.
"""
import argparse
import dataclasses
import json
import os
import pathlib
import sys
import tempfile

os.environ.setdefault("APHRODITE_TARGET_DEVICE", "cpu")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # the test helpers build the layers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/window_capacity_cpu.json")
    a = ap.parse_args()
    import aphrodite.platforms as platforms

    if type(platforms.current_platform).__name__ == "UnspecifiedPlatform":
        from aphrodite.platforms.cpu import CpuPlatform

        platforms._current_platform = CpuPlatform()
    import torch

    import aphrodite_int2kv
    aphrodite_int2kv.register()
    from aphrodite.engine.arg_utils import EngineArgs
    from aphrodite.v1.core.kv_cache_utils import get_kv_cache_configs, get_max_concurrency_for_kv_cache_config
    from aphrodite.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    import aphrodite_int2kv_tests.test_engine_int2 as T
    from aphrodite import __version__ as version
    from aphrodite_int2kv.engine.options import options as aphrodite_int2kv_options

    model = T._dense_long_dir(pathlib.Path(tempfile.mkdtemp()))
    L, mem, rows = 32768, 8 << 30, []

    def tokens(cfg, specs):
        T._resolve_layout(cfg)
        (conf,) = get_kv_cache_configs(cfg, [specs], [mem])
        return get_max_concurrency_for_kv_cache_config(cfg, conf) * L

    for R in (128, 256):
        os.environ["APHRODITE_INT2KV_RECENT_WINDOW"] = str(R)
        for mnbt in (2048, 16384):
            for budget in ("ours", "engine"):
                cfg = EngineArgs(model=model, kv_cache_dtype="int2", max_model_len=L, max_num_batched_tokens=mnbt,
                                 skip_tokenizer_init=True).create_engine_config()
                cfg.cache_config.block_size = 128
                T._build_int2_layers(cfg, 4)
                specs = T._engine_specs(cfg)
                if budget == "engine":
                    base = {f.name for f in dataclasses.fields(SlidingWindowSpec)}
                    specs = {n: (SlidingWindowSpec(**{k: getattr(s, k) for k in base})
                                 if isinstance(s, SlidingWindowSpec) else s) for n, s in specs.items()}
                bcfg = EngineArgs(model=model, max_model_len=L, max_num_batched_tokens=mnbt,
                                  skip_tokenizer_init=True).create_engine_config()
                bspecs = {n: FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, dtype=torch.bfloat16)
                          for n in specs if not n.endswith(".int2_window")}
                ratio = tokens(cfg, specs) / tokens(bcfg, bspecs)
                rows.append(dict(window=R, max_num_batched_tokens=mnbt, budget=budget, context_len=L,
                                 int2_block=128, group_size=aphrodite_int2kv_options().group_for(128),
                                 ratio_vs_bf16=round(ratio, 3), engine=f"aphrodite-engine {version}",
                                 device="CPU (arithmetic only)"))
                print(rows[-1], flush=True)
    old = json.load(open(a.out)) if os.path.exists(a.out) else []
    old = [r for r in old if r.get("engine") not in (None, f"aphrodite-engine {version}")]
    json.dump(old + rows, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
