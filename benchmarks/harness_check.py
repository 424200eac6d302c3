#!/usr/bin/env python3
"""Session 18 diagnostic (GPU): the decode table (decode_attention.py) measured the new folded tile
at the old one's speed at batch 32-64 where decode_ab.py measured it 5-10 % faster. Times both
kernels (this tree's and the renamed baseline's, as decode_ab.py) on inputs built each script's way,
in one process, to find which difference in the inputs matters.

  python3 benchmarks/harness_check.py --baseline-path .ab --out $OUT/harness_check.json
"""
import argparse
import json
import math
import sys

import torch

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
from benchmarks.decode_ab import paged_batch, renamed_decoders  # noqa: E402
from benchmarks.decode_attention import Timer, log, random_int2_cache  # noqa: E402
from aphrodite_int2kv.int2.format import SlotLayout  # noqa: E402
from aphrodite_int2kv.kernels import decode as new  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-path", required=True)
    ap.add_argument("--shapes", default="32/4/128/131072/32,32/4/128/32768/64", help="Hq/Hkv/D/S/B,...")
    ap.add_argument("--out", default="harness_check.json")
    args = ap.parse_args()
    base = renamed_decoders(args.baseline_path, ["int2kv_base"])["int2kv_base"]
    timer = Timer(graph=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for shape in args.shapes.split(","):
        Hq, Hkv, D, S, B = map(int, shape.split("/"))
        L = SlotLayout(D, 64)
        blocks = B * math.ceil(S / 128)
        inputs = {}
        # decode_attention.py: one cache, pages of all sequences shuffled together, q drawn in bf16
        cache = random_int2_cache(L, blocks, 128, Hkv)
        table = torch.randperm(blocks, device="cuda").int().view(B, -1)
        inputs["table_style"] = (cache, table, torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16))
        # decode_ab.py: paged_batch, q drawn in fp32 and rounded
        cache2, table2, _ = paged_batch(L, [S] * B, 128, Hkv, heads_first=True)
        inputs["ab_style"] = (cache2, table2, torch.randn(B, Hq, D, device="cuda").to(torch.bfloat16))
        # the same, q from the other style (which input matters)
        inputs["ab_cache_table_q"] = (cache2, table2, inputs["table_style"][2])
        inputs["table_cache_ab_q"] = (cache, table, inputs["ab_style"][2])
        seq = torch.full((B,), S, dtype=torch.int32, device="cuda")
        for name, (c, t, q) in inputs.items():
            line = []
            for side, mod in (("base", base), ("new", new)):
                cfg = mod.decode_launch_config(B, Hkv, Hq // Hkv, D, sms)
                out = torch.empty_like(q)
                fn = lambda: mod.int2_decode(q, c, t, seq, L, D ** -0.5, cfg.num_splits, out=out, **cfg.kwargs())  # noqa: E731
                us = timer.median_us(fn, iters=20)
                rows.append(dict(shape=shape, inputs=name, side=side, int2_us=round(us, 2)))
                line.append(f"{side} {us:.1f}")
            log(f"{shape} {name}: " + ", ".join(line) + f" (new/base {rows[-1]['int2_us'] / rows[-2]['int2_us']:.3f})")
        del inputs, cache, cache2
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump({"command": " ".join(sys.argv), "gpu": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
