#!/usr/bin/env bash
# H200 call (nvidia-h200), session 10, call 7: the final ring code (ring_window takes its caller's slot
# mapping): the engine-glue tests with real compilation, then the tiny hybrid with the ring (R = 64,
# chunks of 256, eager) against call 1's ring run and session 5's bf16 log.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1 &
timeout 100 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_backend_cpu.py > $OUT/backend_tests_gpu.log 2>&1
echo "glue tests rc $? at ${SECONDS}s"; tail -n1 $OUT/backend_tests_gpu.log; wait
mkdir -p $OUT/logs /tmp/s5 /tmp/s10 && tar xzf benchmarks/results/session5/hybrid_logs.tgz -C /tmp/s5
tar xzf benchmarks/results/session10/ring_call1_logs.tgz -C /tmp/s10
cp /tmp/s5/logs/e2e_hybrid-bf16-chunk.log $OUT/logs/
cp /tmp/s10/logs/e2e_hybrid-int2-ring64.log $OUT/logs/e2e_hybrid-int2-ring64-call1.log
APHRODITE_INT2KV_RECENT_WINDOW=64 timeout $((215 - SECONDS)) python3 benchmarks/gpu/e2e_int2.py --label hybrid-int2-ring64-final \
  --model /tmp/models/qwen35 --kv int2 --lm-only --chunk 256 --prefix-caching off > $OUT/logs/e2e_hybrid-int2-ring64-final.log 2>&1
echo "e2e exit $? at ${SECONDS}s"
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs hybrid-bf16-chunk hybrid-int2-ring64-final \
  hybrid-int2-ring64-final=hybrid-int2-ring64-call1 > $OUT/ring_final_summary.json 2> $OUT/summary.err
python3 -c "
import json; d = json.load(open('$OUT/ring_final_summary.json'))
for c in d['comparisons']: print(c)"
grep -h "int2 recent window" $OUT/logs/e2e_hybrid-int2-ring64-final.log | cut -c1-200 | head -2
(cd $OUT && tar czf ring_final_logs.tgz logs && rm -r logs)
