#!/usr/bin/env bash
# H200 call (nvidia-h200), session 20, call 3, on the shipped kernels (a693fe2's; .ab the same):
# more split programs than fit at once (decode_ab.py --per-sm N with N above the resident 12 at
# head_dim 128 / 8 at 256): the block scheduler hands the programs past the first wave to the
# multiprocessors that free a slot first, a dynamic deal at program granularity. Session 20's
# timeline reading: the multiprocessors' last ends spread 33.8-39.9 us at 32K batch 8 (mean 36.7).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
timeout 200 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 32/4/128 \
  --contexts 32768,131072 --batches 8,32 --per-sm 12,15,18,24,36 --out $OUT/decode_ab_waves_d128.json > $OUT/logs/ab_d128.log 2>&1
echo "ab d128 exit $? at ${SECONDS}s"; grep "Hq" $OUT/logs/ab_d128.log | cut -c1-260
timeout 150 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 16/2/256 \
  --contexts 32768,131072 --batches 8,32 --per-sm 8,10,12,16,24 --out $OUT/decode_ab_waves_d256.json > $OUT/logs/ab_d256.log 2>&1
echo "ab d256 exit $? at ${SECONDS}s"; grep "Hq" $OUT/logs/ab_d256.log | cut -c1-260
(cd $OUT && tar czf waves_logs.tgz logs && rm -r logs)
