#!/usr/bin/env bash
# H200 call (nvidia-h200), session 11: the engine on the pages heads first and the new folded tile.
# 1) the tiny dense model with CUDA graphs against session 9's bf16 run of the same seeded model and
# prompts; 2) the tiny Qwen3.5 hybrid, ring window R = 64, chunks of 256, against session 5's bf16
# run; 3) dense8b, 32K, C = 11 decode throughput (bf16: 522.4 tok/s, same script, session 4).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
mkdir -p $OUT/logs /tmp/s5 && tar xzf benchmarks/results/session5/hybrid_logs.tgz -C /tmp/s5
cp /tmp/s5/logs/e2e_hybrid-bf16-chunk.log benchmarks/results/session9/baseline/e2e_dense-bf16.log $OUT/logs/
run() { local t=$1 label=$2; shift 2; if [ $((585 - SECONDS)) -lt $t ]; then t=$((585 - SECONDS)); fi
        [ $t -gt 20 ] || { echo "$label skipped (time)"; return; }
        timeout $t env "$@" > "$OUT/logs/$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
run 150 e2e_dense-int2-graph python3 benchmarks/gpu/e2e_int2.py --label dense-int2-graph --model /tmp/models/qwen3 --kv int2 --graph
run 150 e2e_hybrid-int2-ring64 APHRODITE_INT2KV_RECENT_WINDOW=64 python3 benchmarks/gpu/e2e_int2.py --label hybrid-int2-ring64 \
  --model /tmp/models/qwen35 --kv int2 --lm-only --chunk 256 --prefix-caching off
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs dense-bf16 dense-int2-graph hybrid-int2-ring64=hybrid-bf16-chunk \
  > $OUT/e2e_summary.json 2> $OUT/logs/summary.err
python3 -c "
import json; d = json.load(open('$OUT/e2e_summary.json'))
for c in d['comparisons']: print(c)"
grep -h "int2 KV cache active\|ring of\|Error" $OUT/logs/e2e_*int2*.log | cut -c1-160 | head -6
run 260 e2e_dense8b python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b \
  --kv int2 --context 32768 --concurrency 11 --out $OUT/e2e_dense8b_int2_s11.jsonl
grep -h "^ROW" $OUT/logs/e2e_dense8b.log | cut -c1-400
(cd $OUT && tar czf e2e_logs.tgz logs && rm -r logs)
