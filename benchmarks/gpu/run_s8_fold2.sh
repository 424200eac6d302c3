#!/usr/bin/env bash
# H200 call (nvidia-h200), session 8, after the folded tile's V-side fix (psum = the sum of the
# *rounded* p * v_scale the dot multiplies; call 1 failed 8/8 folded tests with errors up to 0.19
# because a once-rounded sum left M_P * 2^-11 * pg per token) and the engine's switch to it
# (APHRODITE_INT2KV_DECODE_TILE=auto -> folded for uniform levels):
# 1) decode / folded / window / sink / launch kernel tests with real compilation;
# 2) folded vs per-code at 32K (kernel, CUDA-graph replays) with the bf16 baselines;
# 3) dense8b 32K C = 11 engine decode throughput, DECODE_TILE=folded then per-code, same machine.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 170 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_kernels.py \
  -k "decode or folded or window or sink or launch" > $OUT/gpu_kernel_tests_fold2.log 2>&1
rc=$?; echo "tests exit $rc at ${SECONDS}s"; tail -1 $OUT/gpu_kernel_tests_fold2.log
grep -q "folded.*FAILED\|FAILED.*folded" $OUT/gpu_kernel_tests_fold2.log && { echo "folded tests fail: no timing"; exit 1; }
timeout 90 python3 benchmarks/decode_attention.py --graph --fold --block-size 128 --contexts 32768 \
  --batches 8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 \
  --out $OUT/decode_fold2_h200.json > $OUT/decode_fold2_h200.log 2>&1
echo "decode exit $? at ${SECONDS}s"; grep -h "folded tile\|S= " $OUT/decode_fold2_h200.log | cut -c1-200 | head -16
mkdir -p $OUT/logs
for tile in folded per-code; do
  left=$((590 - SECONDS)); [ $left -gt 60 ] || { echo "DECODE_TILE=$tile skipped (time)"; continue; }
  timeout $left env APHRODITE_INT2KV_DECODE_TILE=$tile python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b \
    --kv int2 --context 32768 --concurrency 11 --out $OUT/e2e_dense8b_int2_${tile}_s8.jsonl > $OUT/logs/e2e_$tile.log 2>&1
  echo "DECODE_TILE=$tile exit $? at ${SECONDS}s"; grep -h "^ROW" $OUT/logs/e2e_$tile.log | cut -c1-400
done
grep -h "int2 KV cache active" $OUT/logs/*.log | cut -c150-400 | sort | uniq
(cd $OUT && tar czf fold2_logs.tgz logs && rm -r logs)
