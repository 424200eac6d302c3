#!/usr/bin/env bash
# Next H200 call (nvidia-h200), repo root, .gpu-bundle/ and .whl/ carried; one engine at a time.
# What session 3 could not finish: the hybrid with CUDA graphs and the window, then the dense8b
# 32K throughput / capacity with the window on (issue #4 item 8, issue #6 item 4).
set -u
source benchmarks/gpu_setup.sh
python3 .gpu-bundle/gpu/make_models.py /tmp/models >/dev/null 2>&1
mkdir -p $OUT/logs
E=benchmarks/gpu/e2e_int2.py
timeout 240 python3 $E --label hybrid-int2-graph --model /tmp/models/qwen35 --kv int2 --lm-only --graph > $OUT/logs/e2e_hybrid-int2-graph.log 2>&1
echo "hybrid graph exit $? at ${SECONDS}s"
left=$((570 - SECONDS))
timeout $left python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b --kv int2 --context 32768 \
  --concurrency 11 --out $OUT/e2e_throughput_window.jsonl > $OUT/logs/e2e_dense8b_int2_window.log 2>&1
echo "dense8b exit $? at ${SECONDS}s"
grep -h "E2E_RESULT\|^ROW\|KV cache size" $OUT/logs/*.log | cut -c1-200
