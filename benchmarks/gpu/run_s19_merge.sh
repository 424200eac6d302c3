#!/usr/bin/env bash
# H200 call (nvidia-h200), session 19, call 5: the merge's step sized by its own tile
# (merge_chunk(num_splits, tails, D / merge_split, merge_warps): with 8 one-warp programs per row,
# steps of 256 slots instead of 128 at head_dim 128, 128 instead of 64 at 256, so batch 1-3
# (head_dim 128) and 1-8 (256) merge in half the steps; the loop is not pipelined, each step waits
# for its loads). 1) ABBA A/B against f0fd464's kernels (.ab/int2kv_base) at batch 1-8;
# 2) every kernel test with real compilation and the engine-glue tests.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
for cfg in "d128 32/4/128" "d256 16/2/256"; do
  set -- $cfg
  timeout 120 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $2 \
    --contexts 4096,32768,131072 --batches 1,2,4,8 --out $OUT/decode_ab_merge_$1.json > $OUT/logs/ab_$1.log 2>&1
  echo "ab $1 exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_$1.log | cut -c1-200
done
timeout 200 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_backend_cpu.py > $OUT/logs/backend_tests_gpu.log 2>&1 &
glue=$!
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
wait $glue; echo "glue tests exit $? at ${SECONDS}s"; tail -1 $OUT/logs/backend_tests_gpu.log
grep -h "^FAILED" $OUT/logs/backend_tests_gpu.log | head -5
(cd $OUT && tar czf merge_logs.tgz logs && rm -r logs)
