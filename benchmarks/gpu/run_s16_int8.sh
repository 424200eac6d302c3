#!/usr/bin/env bash
# H200 call (nvidia-h200), session 16: the folded tile's K scores as int8 dots (kernels/folded.py
# query_codes, k_codes). .ab/int2kv_base = 1ffea54's kernels (session 15's final, fp16 K).
# 1) every kernel test with real compilation (the lifted planes exist only compiled) and the
# engine-glue tests; 2) A/B at head_dim 128 and 256 (uniform and ragged lengths); 3) the table.
set -u
tag=${TAG:-int8}
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
timeout 200 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_backend_cpu.py > $OUT/logs/backend_tests_gpu.log 2>&1 &
glue=$!
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
wait $glue; echo "glue tests exit $? at ${SECONDS}s"; tail -1 $OUT/logs/backend_tests_gpu.log
grep -h "^FAILED" $OUT/logs/backend_tests_gpu.log | head -5
ab() { local name=$1 limit=$2; shift 2
  timeout $limit python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first "$@" \
    --out $OUT/decode_ab_${tag}_$name.json > $OUT/logs/ab_$name.log 2>&1
  echo "ab $name exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_$name.log | cut -c1-160; grep -i "error\|capture failed\|mismatch" $OUT/logs/ab_$name.log | head -3; }
ab d128 100 --configs 32/4/128 --contexts 4096,16384,32768,65536,131072 --batches 1,2,8,32,64
ab d256 100 --configs 16/2/256 --contexts 4096,32768,131072 --batches 1,8,32,64
ab d128_ragged 80 --configs 32/4/128 --contexts 4096,32768,131072 --batches 8,32,64 --ragged
if [ $ok = 0 ]; then
  timeout 100 python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --out $OUT/decode_attention_h200.json \
    > $OUT/logs/decode_table.log 2>&1
  echo "table exit $? at ${SECONDS}s"; grep -h "S=" $OUT/logs/decode_table.log | cut -c1-150
fi
(cd $OUT && tar czf ${tag}_logs.tgz logs && rm -r logs)
