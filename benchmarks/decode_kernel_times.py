#!/usr/bin/env python3
"""Per-kernel GPU times (torch.profiler, CUDA activity) of the int2 decode's launches -- split,
tail, merge -- for this tree and renamed baseline packages (as decode_ab.py makes them), eager
launches on the same caches, L2 flushed between calls.

  python3 benchmarks/decode_kernel_times.py --baseline-path .ab --modules int2kv_base --out $OUT/times.json
"""
import argparse
import collections
import importlib
import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
from benchmarks.decode_ab import paged_batch, renamed_decoders  # noqa: E402
from aphrodite_int2kv.int2.format import SlotLayout  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-path", required=True)
    ap.add_argument("--modules", default="int2kv_base", help="renamed packages to time besides this tree's")
    ap.add_argument("--shapes", default="32/4/128/4096/1,32/4/128/4096/64,32/4/128/32768/8,16/2/256/32768/8",
                    help="Hq/Hkv/D/context/batch,...")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--out", default="decode_kernel_times.json")
    args = ap.parse_args()
    mods = {"new": importlib.import_module("aphrodite_int2kv.kernels.decode")}
    mods.update(renamed_decoders(args.baseline_path, args.modules.split(",")))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    rows = []
    for shape in args.shapes.split(","):
        Hq, Hkv, D, S, B = map(int, shape.split("/"))
        L = SlotLayout(D, 64)
        cache, table, seq = paged_batch(L, [S] * B, 128, Hkv)
        q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16)
        for name, mod in mods.items():
            cfg = mod.decode_launch_config(B, Hkv, Hq // Hkv, D, sms)
            call = lambda: mod.int2_decode(q, cache, table, seq, L, D ** -0.5, cfg.num_splits, **cfg.kwargs())  # noqa: E731
            for _ in range(3):
                call()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.iters):
                    flush.zero_()
                    call()
                torch.cuda.synchronize()
            us = collections.defaultdict(list)
            for ev in prof.events():
                if ev.device_type == torch.autograd.DeviceType.CUDA and "int2_decode" in ev.name:
                    us[ev.name].append(ev.device_time)
            med = {k: sorted(v)[len(v) // 2] for k, v in us.items()}
            rows.append(dict(shape=shape, side=name, num_splits=cfg.num_splits, kernels_us=med))
            print(f"{shape} {name:12s} " + " ".join(f"{k.replace('_int2_decode_', '')}={v:.1f}" for k, v in med.items()),
                  flush=True)
        del cache
        torch.cuda.empty_cache()
    json.dump({"command": " ".join(sys.argv), "gpu": torch.cuda.get_device_name(0), "rows": rows},
              open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
