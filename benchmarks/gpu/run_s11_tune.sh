#!/usr/bin/env bash
# H200 call (nvidia-h200), session 11: launch sweep of the shipped folded tile (commit 0535d35) on
# heads-first pages at 32K: tile size / stages x programs per multiprocessor, against the engine's
# launch (the "new" side; base = the same kernels, .ab/int2kv_base from git archive 0535d35).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 200 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 32/4/128 --contexts 32768 \
  --per-sm 12,24 --variants 64/1/3,64/1/4,32/1/3,32/1/4 --out $OUT/decode_tune_d128.json > $OUT/decode_tune_d128.log 2>&1
echo "d128 exit $? at ${SECONDS}s"; grep "^Hq" $OUT/decode_tune_d128.log | cut -c1-700
timeout 200 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 16/2/256 --contexts 32768 \
  --per-sm 8,9,18 --variants 32/1/3,32/1/4,64/1/3 --out $OUT/decode_tune_d256.json > $OUT/decode_tune_d256.log 2>&1
echo "d256 exit $? at ${SECONDS}s"; grep "^Hq" $OUT/decode_tune_d256.log | cut -c1-700
