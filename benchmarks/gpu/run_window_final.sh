#!/usr/bin/env bash
# On the H200 (nvidia-h200), repo root, .gpu-bundle/ and .whl/ carried; one engine at a time
# (engines sharing the GPU break each other's memory profiling). The bf16 baselines of the tiny
# models come from run_window_e2e.sh (same seeded weights from make_models.py, same prompts).
set -u
source benchmarks/gpu_setup.sh
python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_kernels.py -k "window or sink" > $OUT/gpu_kernel_tests_window_h200.log 2>&1
tail -1 $OUT/gpu_kernel_tests_window_h200.log
python3 benchmarks/decode_attention.py --window 128 --contexts 32768,131072 --batches 8,32 \
  --configs 32/4/128 --group-sizes 32 --iters 15 --out $OUT/decode_window_h200.json > $OUT/decode_window_h200.log 2>&1
grep -E "window|speedup" $OUT/decode_window_h200.log | tail -8
python3 .gpu-bundle/gpu/make_models.py /tmp/models >/dev/null 2>&1
mkdir -p $OUT/logs
run() { local t=$1 label=$2; shift 2; timeout $t env "$@" > "$OUT/logs/e2e_$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
E=benchmarks/gpu/e2e_int2.py
run 120 dense-int2 python3 $E --label dense-int2 --model /tmp/models/qwen3 --kv int2
run 150 dense-int2-graph python3 $E --label dense-int2-graph --model /tmp/models/qwen3 --kv int2 --graph
run 170 hybrid-int2-w16-graph APHRODITE_INT2KV_RECENT_WINDOW=16 python3 $E --label hybrid-int2-w16-graph --model /tmp/models/qwen35 --kv int2 --lm-only --graph
left=$((370 - SECONDS))
if [ $left -gt 50 ]; then
  timeout $left python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b --kv int2 --context 32768 \
    --concurrency "" --out $OUT/kv_capacity_window.jsonl > $OUT/logs/capacity_dense8b_int2_window.log 2>&1
  echo "capacity exit $? at ${SECONDS}s"; grep -E "KV cache size|Maximum concurrency" $OUT/logs/capacity_dense8b_int2_window.log | cut -c1-200 | head -2
fi
grep -h "E2E_RESULT" $OUT/logs/*.log | cut -c1-150
(cd $OUT && tar czf logs.tgz logs && rm -r logs)
