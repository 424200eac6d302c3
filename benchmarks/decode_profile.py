#!/usr/bin/env python3
"""The engine's int2 decode launch (decode_launch_config) for one shape, twice, for a profiler:

  ncu --kernel-name regex:_int2_decode_split --launch-skip 1 --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats \
      --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis \
      python3 benchmarks/decode_profile.py 256/8/128

Shapes are Hq/Hkv/D (comma-separated: one after the other); every sequence holds --context
tokens on shuffled pages of 128 (decode_ab.paged_batch), group size 64, bf16 queries. The first
launch compiles; profile the second (--launch-skip 1 per shape).
"""
import argparse
import sys

import torch

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
from benchmarks.decode_ab import paged_batch  # noqa: E402
from aphrodite_int2kv.int2.format import SlotLayout  # noqa: E402
from aphrodite_int2kv.kernels import decode  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", help="Hq/Hkv/D,...")
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for shape in a.shapes.split(","):
        Hq, Hkv, D = map(int, shape.split("/"))
        layout = SlotLayout(D, 64)
        cache, table, seq = paged_batch(layout, [a.context] * a.batch, 128, Hkv)
        q = torch.randn(a.batch, Hq, D, device="cuda").to(torch.bfloat16)
        cfg = decode.decode_launch_config(a.batch, Hkv, Hq // Hkv, D, sms)
        for _ in range(2):
            decode.int2_decode(q, cache, table, seq, layout, D ** -0.5, cfg.num_splits, **cfg.kwargs())
        torch.cuda.synchronize()
        print(f"{shape}: {cfg}", flush=True)


if __name__ == "__main__":
    main()
