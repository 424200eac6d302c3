#!/usr/bin/env bash
# H200 call (nvidia-h200), session 16, call 5: the session's final kernels (f53df29: call 1's
# int8 K dots plus NaN/Inf query rows passed on as NaN). 1) every kernel test with real
# compilation and the engine-glue tests; 2) A/B against 1ffea54 (session 15) at head_dim 128
# and 256; 3) the decode table.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
timeout 200 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_backend_cpu.py > $OUT/logs/backend_tests_gpu.log 2>&1 &
glue=$!
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
wait $glue; echo "glue tests exit $? at ${SECONDS}s"; tail -1 $OUT/logs/backend_tests_gpu.log
grep -h "^FAILED" $OUT/logs/backend_tests_gpu.log | head -5
for cfg in "d128 32/4/128 4096,32768,131072 1,8,32,64" "d256 16/2/256 4096,32768,131072 1,8,32,64"; do
  set -- $cfg
  timeout 100 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $2 --contexts $3 \
    --batches $4 --out $OUT/decode_ab_final_$1.json > $OUT/logs/ab_$1.log 2>&1
  echo "ab $1 exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_$1.log | cut -c1-160
done
if [ $ok = 0 ]; then
  timeout 100 python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --out $OUT/decode_attention_h200.json \
    > $OUT/logs/decode_table.log 2>&1
  echo "table exit $? at ${SECONDS}s"; grep -h "S=" $OUT/logs/decode_table.log | cut -c1-150
fi
(cd $OUT && tar czf final_logs.tgz logs && rm -r logs)
