#!/usr/bin/env python3
"""Session 18 diagnostic (GPU): the decode table (decode_attention.py) measured the new folded tile
at the old one's speed at batch 32-64 where decode_ab.py measured it 5-10 % faster -- even with no
bf16 kernel in the process (call 6), and call 5 found no difference in the inputs' values. Times
both kernels (this tree's and the renamed baseline's, as decode_ab.py) on the same pages in three
places: their own allocation, memory the caching allocator reuses from a freed 4 GiB tensor (as
decode_attention.py's copy-bandwidth measurement leaves it), and inside a 40 GiB tensor (as the
engine's KV cache).

  python3 benchmarks/harness_check.py --baseline-path .ab --out $OUT/harness_check.json
"""
import argparse
import json
import math
import sys

import torch

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
from benchmarks.decode_ab import renamed_decoders  # noqa: E402
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
        nbytes = blocks * 128 * Hkv * L.slot_bytes
        # decode_attention.py: one cache, pages of all sequences shuffled together, q drawn in bf16
        cache = random_int2_cache(L, blocks, 128, Hkv)
        table = torch.randperm(blocks, device="cuda").int().view(B, -1)
        q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16)
        inputs["own_allocation"] = (cache, table, q)
        # the same pages copied into memory the caching allocator took for a larger tensor and freed
        # (decode_attention.py measures the copy bandwidth on 2 x 4 GiB first)
        big = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
        del big
        reused = torch.empty_like(cache)
        reused.copy_(cache)
        inputs["in_freed_4GiB"] = (reused, table, q)
        # the same pages inside one 40 GiB tensor, as the engine allocates its whole KV cache
        huge = torch.empty(40 << 30, dtype=torch.uint8, device="cuda")
        # (as call 7 ran it: a .view() of the buffer, so these pages are token-major, not heads first
        # as `cache` -- what call 7's 1.6x measured; cache_placement.py places copies in layout)
        inside = huge[(20 << 30):(20 << 30) + nbytes].view(cache.shape)
        inside.copy_(cache)
        inputs["inside_40GiB"] = (inside, table, q)
        seq = torch.full((B,), S, dtype=torch.int32, device="cuda")
        for name, (c, t, q) in inputs.items():
            line = []
            for side, mod in (("new", new), ("base", base), ("new_again", new), ("base_again", base)):
                cfg = mod.decode_launch_config(B, Hkv, Hq // Hkv, D, sms)
                out = torch.empty_like(q)
                fn = lambda: mod.int2_decode(q, c, t, seq, L, D ** -0.5, cfg.num_splits, out=out, **cfg.kwargs())  # noqa: E731
                us = timer.median_us(fn, iters=20)
                rows.append(dict(shape=shape, inputs=name, side=side, int2_us=round(us, 2)))
                line.append(f"{side} {us:.1f}")
            log(f"{shape} {name}: " + ", ".join(line))
        del inputs, cache, reused, inside, huge
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump({"command": " ".join(sys.argv), "gpu": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
