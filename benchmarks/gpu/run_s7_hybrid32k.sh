#!/usr/bin/env bash
# H200 call (nvidia-h200), session 7: hybrid27b KV capacity at 32K with the shipped defaults
# (G = 64, recent window 128 with hit-point pages, data-free centering); bf16's row at 32K is the
# earlier one of the same script and flags (kv_capacity_h200.json, 917,070 tokens).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
mkdir -p $OUT/logs
timeout 300 python3 benchmarks/gpu/e2e_throughput.py --model-config hybrid27b --kv int2 --context 32768 \
  --concurrency "" --gpu-mem 0.8 --eager --out $OUT/kv_capacity_hybrid32k_s7.jsonl > $OUT/logs/hyb32k_int2.log 2>&1
echo "hybrid exit $? at ${SECONDS}s"
grep -hE "KV cache size|Maximum concurrency|block size|page size" $OUT/logs/hyb32k_int2.log | cut -c1-200 | head -6
(cd $OUT && tar czf hyb32k_logs.tgz logs && rm -r logs)
