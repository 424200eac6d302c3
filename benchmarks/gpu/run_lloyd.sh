#!/usr/bin/env bash
# H200 call (nvidia-h200), repo root, .gpu-bundle/ and .whl/ carried; one engine at a time.
# Session 4: Lloyd-Max levels become the default (GPU unpack with the cubic) and dense models
# get int2 pages of 128 with the window. 1) all kernel tests with real compilation; 2) decode
# cost of Lloyd-Max and of window + sinks at 32K/128K; 3) the tiny dense model with the new
# defaults, twice (prefix-cache repeat); 4) dense8b at 32K: engine-reported capacity and decode
# throughput with the window (C = 11, the highest concurrency bf16 sustains there).
set -u
source benchmarks/gpu_setup.sh
python3 .gpu-bundle/gpu/make_models.py /tmp/models >/dev/null 2>&1
mkdir -p $OUT/logs
timeout 150 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_kernels.py > $OUT/logs/gpu_kernel_tests.log 2>&1
echo "kernel tests exit $? at ${SECONDS}s: $(tail -1 $OUT/logs/gpu_kernel_tests.log)"
timeout 120 python3 benchmarks/decode_attention.py --lloyd --window 128 --window-block-size 24 --block-size 128 \
  --contexts 32768,131072 --batches 8,32 --configs 32/4/128 --group-sizes 32 --iters 15 \
  --out $OUT/decode_lloyd_h200.json > $OUT/logs/decode_lloyd_h200.log 2>&1
echo "decode exit $? at ${SECONDS}s"
timeout 120 python3 benchmarks/gpu/e2e_int2.py --label dense-int2-lloyd --model /tmp/models/qwen3 --kv int2 --repeat \
  > $OUT/logs/e2e_dense-int2-lloyd.log 2>&1
echo "dense e2e exit $? at ${SECONDS}s"
left=$((560 - SECONDS))
timeout $left python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b --kv int2 --context 32768 \
  --concurrency 11 --out $OUT/e2e_throughput_lloyd.jsonl > $OUT/logs/e2e_dense8b_int2_lloyd.log 2>&1
echo "dense8b exit $? at ${SECONDS}s"
grep -h "Lloyd-Max levels\|window 128\|G= 32\|S= " $OUT/logs/decode_lloyd_h200.log | cut -c1-160
grep -h "prefix-cache repeat\|^ROW\|KV cache size\|int2 KV cache active" $OUT/logs/e2e_*.log | cut -c1-260
cd $OUT && tar czf logs.tgz logs
