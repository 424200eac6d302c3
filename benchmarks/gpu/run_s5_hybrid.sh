#!/usr/bin/env bash
# H200 call (nvidia-h200), session 5: 1) the tiny Qwen3.5 hybrid with the default G = 64 and the
# recent window, prefill in chunks of 256 (its int2 page is now 448 tokens: a multiple of 32, so the
# window page is whole), int2 vs bf16; 2) dense8b capacity at 32K with the shipped defaults.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
mkdir -p $OUT/logs
run() { local t=$1 label=$2; shift 2; timeout $t env "$@" > "$OUT/logs/e2e_$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
E=benchmarks/gpu/e2e_int2.py
run 270 hybrid-bf16-chunk python3 $E --label hybrid-bf16-chunk --model /tmp/models/qwen35 --kv auto --lm-only --chunk 256
run 150 hybrid-int2-chunk python3 $E --label hybrid-int2-chunk --model /tmp/models/qwen35 --kv int2 --lm-only --chunk 256
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs hybrid-bf16-chunk hybrid-int2-chunk > $OUT/summary.json 2> $OUT/summary.err
python3 -c "
import json; d = json.load(open('$OUT/summary.json'))
for c in d['comparisons']: print(c)
print(d['kv_tokens'], d['startup_lines'])"
left=$((560 - SECONDS))
if [ $left -gt 60 ]; then
  timeout $left python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b --kv int2 --context 32768 \
    --concurrency "" --out $OUT/kv_capacity_dense8b_g64.jsonl > $OUT/logs/capacity_dense8b_int2_g64.log 2>&1
  echo "capacity exit $? at ${SECONDS}s"
  grep -hE "KV cache size|Maximum concurrency|int2 KV cache active" $OUT/logs/capacity_dense8b_int2_g64.log | cut -c1-260 | head -3
fi
(cd $OUT && tar czf logs.tgz logs && rm -r logs)
