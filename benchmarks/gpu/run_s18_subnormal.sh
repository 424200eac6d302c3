#!/usr/bin/env bash
# H200 call (nvidia-h200), session 18, call 2: V codes as fp16 subnormals (no offsets to cancel), lazy rescale
# (kernels/folded.py int2_tile_folded). 1) every kernel test with real compilation and the
# engine-glue tests; 2) A/B against main before the session (.ab/int2kv_base, 5b83cf0) and the same
# tree with RESCALE_LOG2 = 4 (.ab/int2kv_t4) and with the rescale at every tile (.ab/int2kv_eager),
# queries as drawn and 8x sharper (--q-scale 8, more rescales); 3) the decode table.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
timeout 200 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_backend_cpu.py > $OUT/logs/backend_tests_gpu.log 2>&1 &
glue=$!
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
wait $glue; echo "glue tests exit $? at ${SECONDS}s"; tail -1 $OUT/logs/backend_tests_gpu.log
grep -h "^FAILED" $OUT/logs/backend_tests_gpu.log | head -5
for cfg in "d128 32/4/128 1" "d256 16/2/256 1" "d128s 32/4/128 8" "d256s 16/2/256 8"; do
  set -- $cfg
  timeout 120 python3 benchmarks/decode_ab.py --baseline-path .ab --alt-modules int2kv_t4,int2kv_eager --heads-first --configs $2 \
    --contexts 4096,32768,131072 --batches 1,8,32,64 --q-scale $3 --out $OUT/decode_ab_$1.json > $OUT/logs/ab_$1.log 2>&1
  echo "ab $1 exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_$1.log | cut -c1-200
done
if [ $ok = 0 ]; then
  timeout 100 python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --out $OUT/decode_attention_h200.json \
    > $OUT/logs/decode_table.log 2>&1
  echo "table exit $? at ${SECONDS}s"; grep -h "S=" $OUT/logs/decode_table.log | cut -c1-150
fi
(cd $OUT && tar czf subnormal_logs.tgz logs && rm -r logs)
