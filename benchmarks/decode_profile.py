#!/usr/bin/env python3
"""One int2 decode launch per tile at a 32K shape, for Nsight Compute (ncu) to profile on the H200:
where the split kernel's time goes (stall reasons, pipe and memory utilisation), which the CUDA
event timings of decode_attention.py cannot say.

  ncu --clock-control none -k regex:_int2_decode_split --section ... \\
      python3 benchmarks/decode_profile.py [--batch 8] [--config 32/4/128] [--floor]

--floor: decode_floor.py's launch (the folded tile's math mostly taken out) instead of the shipped one.
"""
import argparse
import math
import sys

import torch

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
from benchmarks.decode_attention import random_int2_cache  # noqa: E402
from aphrodite_int2kv.int2.format import SlotLayout  # noqa: E402
from aphrodite_int2kv.kernels.decode import decode_launch_config, int2_decode  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--config", default="32/4/128", help="q heads/kv heads/head_dim")
    ap.add_argument("--tiles", default="folded,per-code")
    ap.add_argument("--floor", action="store_true", help="decode_floor.py's launch (folded tile only)")
    args = ap.parse_args()
    launch = int2_decode
    if args.floor:
        from benchmarks.decode_floor import floor_package
        launch = floor_package().int2_decode
    Hq, Hkv, D = map(int, args.config.split("/"))
    B, S, BS = args.batch, args.context, 128
    L = SlotLayout(D, 64)
    blocks = B * math.ceil(S / BS)
    cache = random_int2_cache(L, blocks, BS, Hkv)
    table = torch.randperm(blocks, device="cuda").int().view(B, -1)
    seq = torch.full((B,), S, dtype=torch.int32, device="cuda")
    q = torch.randn(B, Hq, D, device="cuda", dtype=torch.bfloat16)
    for tile in args.tiles.split(","):
        cfg = decode_launch_config(B, Hkv, Hq // Hkv, D, fold=tile == "folded")    # as the engine launches it
        kw = dict(cfg.kwargs(), fold=tile == "folded")
        for _ in range(2):      # the first call compiles; ncu is told to skip it (--launch-skip)
            launch(q, cache, table, seq, L, D ** -0.5, cfg.num_splits, **kw)
        torch.cuda.synchronize()
        print(f"{tile}{' (floor)' if args.floor else ''}: B={B} S={S} Hq={Hq} Hkv={Hkv} D={D} launch={cfg}", flush=True)


if __name__ == "__main__":
    main()
