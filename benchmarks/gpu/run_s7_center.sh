#!/usr/bin/env bash
# H200 call (nvidia-h200), session 7, after data-free K centering moved into the kernels (offsets by
# kernels/centers.py, store-time centering, q.c inside the decode/prefill kernels):
# 1) store / centers / decode / window / sink / launch kernel tests with real compilation;
# 2) dense8b 32K C = 11 decode throughput with data-free centering (K_CENTER_FIRST=16), then
#    without (K_CENTER_FIRST=0), same machine and script.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 200 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_kernels.py \
  -k "window or decode or sink or launch or center or store" > $OUT/gpu_kernel_tests_h200_session7.log 2>&1
echo "tests exit $? at ${SECONDS}s"; tail -1 $OUT/gpu_kernel_tests_h200_session7.log
mkdir -p $OUT/logs
for n in 16 0; do
  left=$((585 - SECONDS)); [ $left -gt 60 ] || { echo "K_CENTER_FIRST=$n skipped (time)"; continue; }
  timeout $left env APHRODITE_INT2KV_K_CENTER_FIRST=$n python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b \
    --kv int2 --context 32768 --concurrency 11 --out $OUT/e2e_dense8b_int2_center${n}_s7b.jsonl > $OUT/logs/e2e_center$n.log 2>&1
  echo "K_CENTER_FIRST=$n exit $? at ${SECONDS}s"; grep -h "^ROW" $OUT/logs/e2e_center$n.log | cut -c1-400
done
grep -h "int2 KV cache active" $OUT/logs/*.log | cut -c150-330 | sort | uniq
(cd $OUT && tar czf center_logs.tgz logs && rm -r logs)
