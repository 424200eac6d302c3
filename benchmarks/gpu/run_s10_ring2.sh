#!/usr/bin/env bash
# H200 call (nvidia-h200), session 10, call 2: the ring window with CUDA graphs, and the real A/B of
# call 1 (0.21 turns prefix caching off on hybrid models by default, so call 1's "paged64" ran the
# ring too): the tiny Qwen3.5 hybrid, R = 64, chunks of 256, with the ring (prefix caching off) and
# with the paged window (prefix caching on), against session 5's bf16 log and against each other.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
mkdir -p $OUT/logs /tmp/s5 /tmp/s10 && tar xzf benchmarks/results/session5/hybrid_logs.tgz -C /tmp/s5
tar xzf benchmarks/results/session10/ring_call1_logs.tgz -C /tmp/s10
cp /tmp/s5/logs/e2e_hybrid-bf16-chunk.log $OUT/logs/
cp /tmp/s10/logs/e2e_hybrid-int2-ring64.log $OUT/logs/e2e_hybrid-int2-ring64-call1.log
run() { local label=$1 t=$2; shift 2; timeout $t python3 benchmarks/gpu/e2e_int2.py --label $label --model /tmp/models/qwen35 \
  --kv int2 --lm-only --chunk 256 "$@" > $OUT/logs/e2e_$label.log 2>&1; echo "$label exit $? at ${SECONDS}s"; }
APHRODITE_INT2KV_RECENT_WINDOW=64 run hybrid-int2-paged64-pc 150 --prefix-caching on
APHRODITE_INT2KV_RECENT_WINDOW=64 run hybrid-int2-ring64-graph 380 --prefix-caching off --graph
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs hybrid-bf16-chunk hybrid-int2-paged64-pc hybrid-int2-ring64-graph \
  hybrid-int2-ring64-call1=hybrid-int2-paged64-pc hybrid-int2-ring64-graph=hybrid-int2-ring64-call1 > $OUT/ring2_summary.json 2> $OUT/summary.err
python3 -c "
import json; d = json.load(open('$OUT/ring2_summary.json'))
for c in d['comparisons']: print(c)
print(d['kv_tokens'])"
grep -h "int2 KV cache active\|int2 recent window\|Maximum concurrency\|Error\|error" $OUT/logs/e2e_hybrid-int2-{paged64-pc,ring64-graph}.log | cut -c1-300 | head -12
(cd $OUT && tar czf ring2_logs.tgz logs && rm -r logs)
