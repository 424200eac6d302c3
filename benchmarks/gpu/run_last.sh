#!/usr/bin/env bash
# H200 call (nvidia-h200), session 4's last: 1) decode cost of window + sinks at 32K with the
# default levels (uniform decode) and pages of 128; 2) hybrid27b at 128K with the window off
# (int2 alone: the GDN state and the window are the two fixed per-request costs on hybrids).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models >/dev/null 2>&1
mkdir -p $OUT/logs
timeout 100 python3 benchmarks/decode_attention.py --window 128 --window-block-size 24 --block-size 128 \
  --contexts 32768 --batches 8,32 --configs 32/4/128,32/8/128 --group-sizes 32 --iters 30 \
  --max-bf16-bytes 0 --out $OUT/decode_window_std_h200.json > $OUT/logs/decode_window_std_h200.log 2>&1
echo "decode exit $? at ${SECONDS}s"
APHRODITE_INT2KV_RECENT_WINDOW=0 timeout 170 python3 benchmarks/gpu/e2e_throughput.py --model-config hybrid27b --kv int2 \
  --context 131072 --concurrency "" --gpu-mem 0.8 --eager --out $OUT/kv_capacity_hybrid128k_nowindow.jsonl \
  > $OUT/logs/hyb128k_int2_nowindow.log 2>&1
echo "hybrid exit $? at ${SECONDS}s"
grep -h "window 128\|S= " $OUT/logs/decode_window_std_h200.log | cut -c1-170
grep -h "KV cache size\|^ROW" $OUT/logs/hyb128k_int2_nowindow.log | cut -c1-200
