#!/usr/bin/env bash
# H200 call (nvidia-h200), session 12: per-kernel times (torch.profiler) of the balanced split launch
# (this tree) against 93acc96 (.ab/int2kv_base) and b1b2fb8 (.ab/int2kv_even, per-sequence splits
# with tiles dealt evenly), to find where the balanced launch loses on uniform lengths.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 200 python3 benchmarks/decode_kernel_times.py --baseline-path .ab --modules int2kv_base,int2kv_even \
  --shapes 32/4/128/4096/1,32/4/128/4096/64,32/4/128/32768/1,32/4/128/32768/8,32/4/128/32768/64,16/2/256/32768/8 \
  --out $OUT/decode_kernel_times.json 2>&1 | grep -v Warning | tail -30
