#!/usr/bin/env bash
# H200 call (nvidia-h200), session 19, call 4: the folded span's tile loop unrolled by 2
# (tl.range(..., loop_unroll_factor=2), folded.py): ptxas sees two consecutive tiles in one block
# and may overlap the next tile's scores with this tile's softmax and P.V (sass_report: 958
# instructions per two 32-token tiles, no spills in the loop; the odd tile runs in an unpipelined
# remainder loop). 1) ABBA A/B against f0fd464's kernels (.ab/int2kv_base) on the table's 24 shapes;
# 2) every kernel test with real compilation and the engine-glue tests.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
for cfg in "d128 32/4/128" "d256 16/2/256"; do
  set -- $cfg
  timeout 150 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $2 \
    --contexts 4096,32768,131072 --batches 1,8,32,64 --out $OUT/decode_ab_unroll_$1.json > $OUT/logs/ab_$1.log 2>&1
  echo "ab $1 exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_$1.log | cut -c1-200
done
timeout 200 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_backend_cpu.py > $OUT/logs/backend_tests_gpu.log 2>&1 &
glue=$!
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
wait $glue; echo "glue tests exit $? at ${SECONDS}s"; tail -1 $OUT/logs/backend_tests_gpu.log
grep -h "^FAILED" $OUT/logs/backend_tests_gpu.log | head -5
(cd $OUT && tar czf unroll_logs.tgz logs && rm -r logs)
