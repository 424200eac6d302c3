#!/usr/bin/env bash
# H200 call (nvidia-h200), session 12: tiles dealt evenly over the splits (split_tiles) and the merge
# reading only the splits that had tiles. 1) every kernel test with real compilation; 2) A/B against
# the kernels before (.ab/int2kv_base = git archive 93acc96), heads-first pages, 4K-128K, batch 1-64;
# 3) programs per multiprocessor x tile size for head_dim 128 at 32K/128K, batch 8/32.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
timeout 170 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --contexts 4096,32768,131072 \
  --batches 1,8,32,64 --out $OUT/decode_ab_even.json > $OUT/logs/ab.log 2>&1
echo "ab exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab.log | cut -c1-220
timeout $((570 - SECONDS)) python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 32/4/128 \
  --batches 8,32 --per-sm 12,16,24 --variants 64/1/3,32/1/3 --out $OUT/decode_tune_even.json > $OUT/logs/tune.log 2>&1
echo "tune exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/tune.log | cut -c1-400
(cd $OUT && tar czf even_logs.tgz logs && rm -r logs)
