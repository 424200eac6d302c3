#!/usr/bin/env bash
# H200 call (nvidia-h200), session 20, call 7, on the shipped kernels (.ab the same): more
# 32-token tiles in flight at head_dim 128. The timelines (calls 5-6) have the median program's
# pace (~1.4 us per 32-token tile) the same with and without the tile's math, so the loads set it.
# Call 4's extra stages kept the 64-token loop in the kernel, whose buffers then take more shared
# memory; a launch of 32-token tiles only (block_n 32) at 3-6 stages separates the two, and the
# shipped launch with only the short tiles' loop deeper (int2_decode short_stages 4-6; sass_report:
# 11,264 bytes of shared memory at any of them, 160 registers) tries it in the engine's launch.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
timeout 240 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 32/4/128 \
  --contexts 4096,32768,131072 --batches 8,32 --per-sm 12 --variants 32/1/3,32/1/4,32/1/5,32/1/6 --short-stages 4,5,6 \
  --out $OUT/decode_ab_stages32_d128.json > $OUT/logs/ab_d128.log 2>&1
echo "ab d128 exit $? at ${SECONDS}s"; grep "Hq" $OUT/logs/ab_d128.log | cut -c1-400
(cd $OUT && tar czf stages32_logs.tgz logs && rm -r logs)
