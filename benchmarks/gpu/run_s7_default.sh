#!/usr/bin/env bash
# H200 call (nvidia-h200), session 7: the engine with the new defaults (data-free K centering on,
# N = 16, recent window 128) on the tiny dense model: eager with a second pass over the same prompts
# (prefix-cache hits), CUDA graphs; bf16 and plain int2 (K_CENTER_FIRST=0) on the same machine.
# Prompts 1-3 are shorter than 16 tokens: their first keys enter the window before the offset exists
# (the case the session-7 window rule fixes).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
mkdir -p $OUT/logs
run() { local t=$1 label=$2; shift 2; if [ $((585 - SECONDS)) -lt $t ]; then t=$((585 - SECONDS)); fi
        [ $t -gt 20 ] || { echo "$label skipped (time)"; return; }
        timeout $t env "$@" > "$OUT/logs/e2e_$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
E=benchmarks/gpu/e2e_int2.py
run 90 dense-bf16 python3 $E --label dense-bf16 --model /tmp/models/qwen3 --kv auto
run 110 dense-int2-default python3 $E --label dense-int2-default --model /tmp/models/qwen3 --kv int2 --repeat
run 120 dense-int2-default-graph python3 $E --label dense-int2-default-graph --model /tmp/models/qwen3 --kv int2 --graph
run 100 dense-int2-plain APHRODITE_INT2KV_K_CENTER_FIRST=0 python3 $E --label dense-int2-plain --model /tmp/models/qwen3 --kv int2
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs dense-bf16 dense-int2-default dense-int2-default-graph dense-int2-plain \
    > $OUT/default_summary.json 2> $OUT/default_summary.err
python3 -c "
import json; d = json.load(open('$OUT/default_summary.json'))
for c in d['comparisons']: print(c)"
grep -h "prefix-cache repeat\|int2 KV cache active" $OUT/logs/*.log | cut -c1-300 | sort | uniq
(cd $OUT && tar czf default_logs.tgz logs && rm -r logs)
