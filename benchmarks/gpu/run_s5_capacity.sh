#!/usr/bin/env bash
# H200 call (nvidia-h200), session 5, shipped defaults (G = 64 at head_dim >= 128, std levels,
# recent window 128 with hit-point pages): 1) hybrid27b capacity at 128K; 2) dense8b 32K decode
# throughput at C = 11 (bf16's maximum; bf16's row is session 4's, same script and GPU);
# 3) if time is left, the window + sinks decode cost at 32K with G = 64.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
mkdir -p $OUT/logs
timeout 200 python3 benchmarks/gpu/e2e_throughput.py --model-config hybrid27b --kv int2 --context 131072 \
  --concurrency "" --gpu-mem 0.8 --eager --out $OUT/kv_capacity_hybrid128k_g64.jsonl > $OUT/logs/hyb128k_int2_g64.log 2>&1
echo "hybrid exit $? at ${SECONDS}s"
grep -hE "KV cache size|Maximum concurrency|int2 KV cache active" $OUT/logs/hyb128k_int2_g64.log | cut -c1-260 | head -3
timeout 250 python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b --kv int2 --context 32768 \
  --concurrency 11 --out $OUT/e2e_dense8b_int2_g64.jsonl > $OUT/logs/e2e7_int2_g64_window.log 2>&1
echo "throughput exit $? at ${SECONDS}s"
grep -h "^ROW" $OUT/logs/e2e7_int2_g64_window.log | cut -c1-400
left=$((540 - SECONDS))
if [ $left -gt 40 ]; then
  timeout $left python3 benchmarks/decode_attention.py --window 128 --window-block-size 20 --block-size 128 \
    --contexts 32768 --batches 8,32 --configs 32/4/128,32/8/128 --group-sizes 64 --iters 30 \
    --max-bf16-bytes 0 --out $OUT/decode_window_g64_h200.json > $OUT/logs/decode_window_g64_h200.log 2>&1
  echo "decode exit $? at ${SECONDS}s"
  grep -h "window 128\|S= " $OUT/logs/decode_window_g64_h200.log | cut -c1-170
fi
(cd $OUT && tar czf logs.tgz logs && rm -r logs)
