#!/usr/bin/env bash
# H200 call (nvidia-h200), session 20, call 2, on this tree (the kernels of a693fe2; the mixed
# tiles of call 1 reverted): 1) decode_floor.py, the shipped launch against the same launch with
# most of the tile's math taken out, at >= 32K; 2) the decode table on the shipped kernels (the
# merge step of cd62ddb; the current table is session 19 call 3's, on f60bfd2's kernels);
# 3) every kernel test with real compilation and the engine-glue tests.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
timeout 120 python3 benchmarks/decode_floor.py --configs 32/4/128,16/2/256 --contexts 32768,131072 --batches 8,32 \
  --out $OUT/decode_floor.json > $OUT/logs/floor.log 2>&1
echo "floor exit $? at ${SECONDS}s"; grep "Hq\|copy" $OUT/logs/floor.log | cut -c1-200; tail -3 $OUT/logs/floor.log | cut -c1-300
timeout 150 python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --instances 3 \
    --out $OUT/decode_attention_h200.json > $OUT/logs/decode_table.log 2>&1
echo "table exit $? at ${SECONDS}s"; grep -h "S=" $OUT/logs/decode_table.log | cut -c1-160
timeout 200 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_backend_cpu.py > $OUT/logs/backend_tests_gpu.log 2>&1 &
glue=$!
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
wait $glue; echo "glue tests exit $? at ${SECONDS}s"; tail -1 $OUT/logs/backend_tests_gpu.log
grep -h "^FAILED" $OUT/logs/backend_tests_gpu.log | head -5
(cd $OUT && tar czf final_logs.tgz logs && rm -r logs)
