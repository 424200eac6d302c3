#!/usr/bin/env bash
# H200 call (nvidia-h200), session 19, call 3, on commit f60bfd2's kernels (the first tile's
# block-table entries loaded before the query; 136/136 kernel tests in call 2):
# 1) the decode table, each int2 time the median of 3 cache allocations;
# 2) the engine end to end with this tile: dense8b at 32K, concurrency 11 = bf16's maximum
#    (bf16 550.1 tok/s, session 11; int2 893.1 with session 16's kernels);
# 3) the tiny Qwen3.5 hybrid (ring window 64, chunks of 256, eager) against session 5's bf16 log,
#    greedy tokens compared (sessions 15-16: 24, 24, 19, 3, 0, 3).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs /tmp/s5 && tar xzf benchmarks/results/session5/hybrid_logs.tgz -C /tmp/s5
run() { local t=$1 label=$2; shift 2; if [ $((585 - SECONDS)) -lt $t ]; then t=$((585 - SECONDS)); fi
        [ $t -gt 20 ] || { echo "$label skipped (time)"; return; }
        timeout -s ABRT -k 5 $t env PYTHONFAULTHANDLER=1 "$@" > "$OUT/logs/$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
run 120 decode_table python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --instances 3 \
    --out $OUT/decode_attention_h200.json
grep -h "S=" $OUT/logs/decode_table.log | cut -c1-200
run 240 e2e_dense8b python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b \
  --kv int2 --context 32768 --concurrency 11 --out $OUT/e2e_dense8b_int2_s19.jsonl
grep -h "^ROW" $OUT/logs/e2e_dense8b.log | cut -c1-400
python3 .gpu-bundle/gpu/make_models.py /tmp/models > $OUT/logs/make_models.log 2>&1; echo "models at ${SECONDS}s"
cp /tmp/s5/logs/e2e_hybrid-bf16-chunk.log $OUT/logs/
run 200 e2e_hybrid-int2-ring64 APHRODITE_INT2KV_RECENT_WINDOW=64 python3 benchmarks/gpu/e2e_int2.py --label hybrid-int2-ring64 \
  --model /tmp/models/qwen35 --kv int2 --lm-only --chunk 256 --prefix-caching off
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs hybrid-bf16-chunk hybrid-int2-ring64=hybrid-bf16-chunk > $OUT/e2e_summary_hybrid.json 2> $OUT/logs/summary.err
python3 -c "
import json; d = json.load(open('$OUT/e2e_summary_hybrid.json'))
for c in d['comparisons']: print(c)" 2>&1 | cut -c1-300
grep -h "int2 KV cache active\|ring of\|Error\|took" $OUT/logs/e2e_hybrid*int2*.log | cut -c1-160 | head -8
(cd $OUT && tar czf final_logs.tgz logs && rm -r logs)
