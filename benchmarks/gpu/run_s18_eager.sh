#!/usr/bin/env bash
# H200 call (nvidia-h200), session 18, call 10: the kept tile (subnormal V codes, the rescale at
# every tile: no bound on V scales). 1) every kernel test with real compilation and the engine-glue
# tests; 2) ABBA A/B against main before the session (.ab/int2kv_base, 5b83cf0) at >= 32K, batch >= 8.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
timeout 200 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_backend_cpu.py > $OUT/logs/backend_tests_gpu.log 2>&1 &
glue=$!
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
wait $glue; echo "glue tests exit $? at ${SECONDS}s"; tail -1 $OUT/logs/backend_tests_gpu.log
grep -h "^FAILED" $OUT/logs/backend_tests_gpu.log | head -5
for cfg in "d128 32/4/128" "d256 16/2/256"; do
  set -- $cfg
  timeout 60 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $2 \
    --contexts 32768,131072 --batches 8,32,64 --out $OUT/decode_ab_eager_$1.json > $OUT/logs/ab_$1.log 2>&1
  echo "ab $1 exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_$1.log | cut -c1-200
done
(cd $OUT && tar czf eager_logs.tgz logs && rm -r logs)
