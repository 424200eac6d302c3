#!/usr/bin/env bash
# H200 call (nvidia-h200), session 20, call 4, on the shipped kernels (a693fe2's; .ab the same):
# tiles in flight per program (decode_ab.py --variants block_n/warps/stages at the resident
# programs per SM): session 20's floor took as long as the shipped launch at head_dim 256, 32K
# batch 8, so the loads' latency, not the math, may set the pace there.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
timeout 200 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 32/4/128 \
  --contexts 32768,131072 --batches 8,32 --per-sm 12 --variants 64/1/2,64/1/3,64/1/4,64/1/5 \
  --out $OUT/decode_ab_stages_d128.json > $OUT/logs/ab_d128.log 2>&1
echo "ab d128 exit $? at ${SECONDS}s"; grep "Hq" $OUT/logs/ab_d128.log | cut -c1-300
timeout 200 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 16/2/256 \
  --contexts 32768,131072 --batches 8,32 --per-sm 8 --variants 32/1/2,32/1/3,32/1/4,32/1/5 \
  --out $OUT/decode_ab_stages_d256.json > $OUT/logs/ab_d256.log 2>&1
echo "ab d256 exit $? at ${SECONDS}s"; grep "Hq" $OUT/logs/ab_d256.log | cut -c1-300
(cd $OUT && tar czf stages_logs.tgz logs && rm -r logs)
