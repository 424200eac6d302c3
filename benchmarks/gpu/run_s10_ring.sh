#!/usr/bin/env bash
# H200 call (nvidia-h200), session 10: the ring window (one page per request; prefix caching off and a
# page of >= R tokens). 1) the tiny Qwen3.5 hybrid (page 448 int2 = 70 window tokens, so R = 64)
# with chunks of 256 (a chunk overwrites ring offsets its prefix window still needs): ring vs the paged
# window (prefix caching on) vs session 5's bf16 log; GRAPH=1 adds the ring with CUDA graphs.
# 2) hybrid27b's KV capacity at 32K with the shipped defaults (R = 128, ring of 400 tokens).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
mkdir -p $OUT/logs /tmp/s5 && tar xzf benchmarks/results/session5/hybrid_logs.tgz -C /tmp/s5
cp /tmp/s5/logs/e2e_hybrid-bf16-chunk.log $OUT/logs/
run() { local label=$1; shift; timeout ${T:-200} python3 benchmarks/gpu/e2e_int2.py --label $label --model /tmp/models/qwen35 \
  --kv int2 --lm-only --chunk 256 "$@" > $OUT/logs/e2e_$label.log 2>&1; echo "$label exit $? at ${SECONDS}s"; }
labels="hybrid-bf16-chunk"
if [ "${GRAPH:-0}" = 1 ]; then
  T=400 APHRODITE_INT2KV_RECENT_WINDOW=64 run hybrid-int2-ring64-graph --prefix-caching off --graph
  labels="$labels hybrid-int2-ring64-graph"
else
  timeout 240 python3 benchmarks/gpu/e2e_throughput.py --model-config hybrid27b --kv int2 --context 32768 \
    --concurrency "${HYB_C:-}" --gpu-mem 0.8 --eager --out $OUT/kv_capacity_hybrid32k_ring.jsonl > $OUT/logs/hyb32k_int2_ring.log 2>&1
  echo "hybrid27b exit $? at ${SECONDS}s"
  grep -hE "KV cache size|Maximum concurrency|block size|page size|int2 KV cache active" $OUT/logs/hyb32k_int2_ring.log | cut -c1-400 | head -8
  T=150 APHRODITE_INT2KV_RECENT_WINDOW=64 run hybrid-int2-ring64 --prefix-caching off
  T=150 APHRODITE_INT2KV_RECENT_WINDOW=64 run hybrid-int2-paged64
  labels="$labels hybrid-int2-ring64 hybrid-int2-paged64 hybrid-int2-ring64=hybrid-int2-paged64"
fi
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs $labels > $OUT/ring_summary.json 2> $OUT/summary.err
python3 -c "
import json; d = json.load(open('$OUT/ring_summary.json'))
for c in d['comparisons']: print(c)"
grep -h "int2 KV cache active\|Error\|error" $OUT/logs/e2e_hybrid-int2-*.log | cut -c1-300 | head -8
(cd $OUT && tar czf ring_logs.tgz logs && rm -r logs)
