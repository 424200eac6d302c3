#!/usr/bin/env bash
# H200 call (nvidia-h200), session 11: dense8b bf16 at 32K, C = 11 on today's machine, the baseline
# of call 4's int2 run (same script and arguments; session 4's bf16 figure was 522.4 tok/s).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 420 python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b --kv auto --context 32768 --concurrency 11 \
  --out $OUT/e2e_dense8b_bf16_s11.jsonl > $OUT/e2e_dense8b_bf16.log 2>&1
echo "bf16 exit $? at ${SECONDS}s"; grep -h "^ROW" $OUT/e2e_dense8b_bf16.log | cut -c1-400
