#!/usr/bin/env bash
# H200 call (nvidia-h200), session 19, call 1, on main as of commit f0219ba's kernels (the review
# mend of _settle, verified only under the interpreter in session 18):
# 1) every kernel test with real compilation and the engine-glue tests;
# 2) the timeline (decode_timeline.py) with its new CUDA-graph stamps: where batch 8 at 32K spends
#    its time when replayed as the engine replays it;
# 3) the decode table on the shipped tile, each int2 time the median of 3 cache allocations.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
timeout 200 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_backend_cpu.py > $OUT/logs/backend_tests_gpu.log 2>&1 &
glue=$!
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
wait $glue; echo "glue tests exit $? at ${SECONDS}s"; tail -1 $OUT/logs/backend_tests_gpu.log
grep -h "^FAILED" $OUT/logs/backend_tests_gpu.log | head -5
timeout 100 python3 benchmarks/decode_timeline.py --shapes 32/4/128/32768/8,16/2/256/32768/8,32/4/128/131072/8,32/4/128/4096/1 \
  --out $OUT/decode_timeline_graph.json > $OUT/logs/timeline.log 2>&1
echo "timeline exit $? at ${SECONDS}s"; tail -3 $OUT/logs/timeline.log | cut -c1-300
if [ $ok = 0 ]; then
  timeout 230 python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --instances 3 \
    --out $OUT/decode_attention_h200.json > $OUT/logs/decode_table.log 2>&1
  echo "table exit $? at ${SECONDS}s"; grep -h "S=" $OUT/logs/decode_table.log | cut -c1-200
fi
(cd $OUT && tar czf verify_logs.tgz logs && rm -r logs)
