#!/usr/bin/env bash
# H200 call (nvidia-h200), session 19, call 2: the split programs load their first tile's
# block-table entries before the query (decode.py split_partial), so the two loads' latencies
# overlap. 1) every kernel test with real compilation and the engine-glue tests; 2) ABBA A/B
# against main before it (.ab/int2kv_base = b21e6ce's kernels, as f0219ba) on the table's 24
# shapes; 3) the timeline (CUDA-graph stamps) of 32K batch 8 and 4K batch 1: the first tile's time.
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
  timeout 150 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $2 \
    --contexts 4096,32768,131072 --batches 1,8,32,64 --out $OUT/decode_ab_tablefirst_$1.json > $OUT/logs/ab_$1.log 2>&1
  echo "ab $1 exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_$1.log | cut -c1-200
done
timeout 80 python3 benchmarks/decode_timeline.py --shapes 32/4/128/32768/8,16/2/256/32768/8,32/4/128/4096/1 \
  --out $OUT/decode_timeline_tablefirst.json > $OUT/logs/timeline.log 2>&1
echo "timeline exit $? at ${SECONDS}s"
python3 - $OUT/decode_timeline_tablefirst.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(r["shape"], "event", r["event_us_untraced"], "first tile", r["graph_split_first_tile_us"],
          "split end", r["graph_split_end_us"], "merge end", r["graph_merge_end_us"]["p100"])
PY
(cd $OUT && tar czf tablefirst_logs.tgz logs && rm -r logs)
