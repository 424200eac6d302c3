#!/usr/bin/env bash
# H200 call (nvidia-h200), session 6: 1) the decode launch-shape sweep at the engine's page and
# group size (benchmarks/decode_tune.py); 2) data-free K centering (APHRODITE_INT2KV_K_CENTER_FIRST
# = 16) with the recent window in the real engine on the tiny dense model: eager with a second pass
# over the same prompts (prefix-cache hits), CUDA graphs, and chunked prefill (chunks of 256).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 130 python3 benchmarks/decode_tune.py --out $OUT/decode_tune_h200.json > $OUT/decode_tune_h200.log 2>&1
echo "tune exit $? at ${SECONDS}s"; grep -h "best\|Error\|error" $OUT/decode_tune_h200.log | head -20
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
mkdir -p $OUT/logs
run() { local t=$1 label=$2; shift 2; if [ $((575 - SECONDS)) -lt $t ]; then t=$((575 - SECONDS)); fi
        [ $t -gt 20 ] || { echo "$label skipped (time)"; return; }
        timeout $t env "$@" > "$OUT/logs/e2e_$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
E=benchmarks/gpu/e2e_int2.py
F=APHRODITE_INT2KV_K_CENTER_FIRST=16
run 90 dense-bf16 python3 $E --label dense-bf16 --model /tmp/models/qwen3 --kv auto
run 100 dense-int2 python3 $E --label dense-int2 --model /tmp/models/qwen3 --kv int2
run 110 dense-int2-free $F python3 $E --label dense-int2-free --model /tmp/models/qwen3 --kv int2 --repeat
run 120 dense-int2-free-graph $F python3 $E --label dense-int2-free-graph --model /tmp/models/qwen3 --kv int2 --graph
run 90 dense-bf16-chunk python3 $E --label dense-bf16-chunk --model /tmp/models/qwen3 --kv auto --chunk 256
run 100 dense-int2-free-chunk $F python3 $E --label dense-int2-free-chunk --model /tmp/models/qwen3 --kv int2 --chunk 256
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs dense-bf16 dense-int2 dense-int2-free dense-int2-free-graph \
    dense-int2-free-chunk=dense-bf16-chunk > $OUT/free_summary.json 2> $OUT/free_summary.err
python3 -c "
import json; d = json.load(open('$OUT/free_summary.json'))
for c in d['comparisons']: print(c)"
grep -h "prefix-cache repeat\|int2 KV cache active" $OUT/logs/*.log | cut -c1-300
(cd $OUT && tar czf free_logs.tgz logs && rm -r logs)
