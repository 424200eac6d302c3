#!/usr/bin/env bash
# H200 call (nvidia-h200), session 12: the engine glue on the balanced split launch. 1) the
# engine-glue tests (test_backend_cpu.py) with real compilation; 2) the tiny Qwen3.5 hybrid with
# the ring window R = 64 (the tail kernel's slots after the split programs'), chunks of 256,
# against session 5's bf16 run.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1 &
mkdir -p $OUT/logs /tmp/s5 && tar xzf benchmarks/results/session5/hybrid_logs.tgz -C /tmp/s5
cp /tmp/s5/logs/e2e_hybrid-bf16-chunk.log $OUT/logs/
timeout 150 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_backend_cpu.py > $OUT/logs/backend_tests_gpu.log 2>&1
echo "glue tests rc $? at ${SECONDS}s"; tail -n1 $OUT/logs/backend_tests_gpu.log
grep -h "^FAILED\|^ERROR\|Greatest absolute" $OUT/logs/backend_tests_gpu.log | cut -c1-200 | head
wait
timeout $((330 - SECONDS)) env APHRODITE_INT2KV_RECENT_WINDOW=64 python3 benchmarks/gpu/e2e_int2.py --label hybrid-int2-ring64 \
  --model /tmp/models/qwen35 --kv int2 --lm-only --chunk 256 --prefix-caching off > $OUT/logs/e2e_hybrid-int2-ring64.log 2>&1
echo "hybrid exit $? at ${SECONDS}s"
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs hybrid-bf16-chunk hybrid-int2-ring64 > $OUT/e2e_hybrid_summary.json 2> $OUT/logs/summary.err
python3 -c "
import json; d = json.load(open('$OUT/e2e_hybrid_summary.json'))
for c in d['comparisons']: print(c)"
grep -h "ring of\|Error" $OUT/logs/e2e_hybrid-int2-ring64.log | cut -c1-160 | head -4
(cd $OUT && tar czf glue_logs.tgz logs && rm -r logs)
