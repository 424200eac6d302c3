#!/usr/bin/env bash
# H200 call (nvidia-h200), session 7: dense8b 32K C = 11 decode throughput of the current build
# (compile-stall fix of session 6: no Triton variants per decode batch size), decode timed twice
# (--repeat-long); then the same with data-free K centering (APHRODITE_INT2KV_K_CENTER_FIRST=16)
# to measure its engine cost. bf16's row: session 4/6, same script and GPU (522.4 tok/s).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
timeout 250 python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b --kv int2 --context 32768 \
  --concurrency 11 --repeat-long --out $OUT/e2e_dense8b_int2_s7.jsonl > $OUT/logs/e2e_int2_s7.log 2>&1
echo "plain exit $? at ${SECONDS}s"; grep -h "^ROW" $OUT/logs/e2e_int2_s7.log | cut -c1-500
left=$((575 - SECONDS))
timeout $left env APHRODITE_INT2KV_K_CENTER_FIRST=16 python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b --kv int2 \
  --context 32768 --concurrency 11 --repeat-long --out $OUT/e2e_dense8b_int2_center16_s7.jsonl > $OUT/logs/e2e_int2_center16_s7.log 2>&1
echo "center16 exit $? at ${SECONDS}s"; grep -h "^ROW" $OUT/logs/e2e_int2_center16_s7.log | cut -c1-500
grep -h "int2 KV cache active" $OUT/logs/*.log | cut -c1-300
(cd $OUT && tar czf e2e_logs.tgz logs && rm -r logs)
