#!/usr/bin/env bash
# H200 call (nvidia-h200), session 17, call 6: the final launch (decode_launch_config: the merge
# split over 8 one-warp programs per row where batch x query heads <= 256). 1) every kernel test
# with real compilation and the engine-glue tests; 2) A/B against main before the session
# (.ab/int2kv_base) at head_dim 128 and 256; 3) the decode table; 4) the timeline at batch 8.
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
  timeout 100 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $2 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --out $OUT/decode_ab_final_$1.json > $OUT/logs/ab_$1.log 2>&1
  echo "ab $1 exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_$1.log | cut -c1-160
done
if [ $ok = 0 ]; then
  timeout 100 python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --out $OUT/decode_attention_h200.json \
    > $OUT/logs/decode_table.log 2>&1
  echo "table exit $? at ${SECONDS}s"; grep -h "S=" $OUT/logs/decode_table.log | cut -c1-150
fi
timeout 60 python3 benchmarks/decode_timeline.py --shapes 32/4/128/32768/8,16/2/256/32768/8 \
  --out $OUT/decode_timeline_final.json > $OUT/logs/timeline.log 2>&1
echo "timeline exit $? at ${SECONDS}s"
(cd $OUT && tar czf final_logs.tgz logs && rm -r logs)
