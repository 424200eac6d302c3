#!/usr/bin/env bash
# H200 call (nvidia-h200), session 5: 1) chunked prefill with the recent window (chunks of 256
# tokens, so a running request's step pads the chunk interior with null window pages: the fix of
# this session returns those entries to the worker's block table); int2 vs bf16 on the tiny dense
# and hybrid models; 2) prefix-cache hits with the window (hit-point pages): the same prompts a
# second time; 3) K centering + window + CUDA graphs (issue #6's last generation mode).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
python3 benchmarks/gpu/make_center_rotation.py /tmp/models/qwen3 /tmp/k_rot.pt > /dev/null 2>&1
mkdir -p $OUT/logs
run() { local t=$1 label=$2; shift 2; timeout $t env "$@" > "$OUT/logs/e2e_$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
E=benchmarks/gpu/e2e_int2.py
run 100 dense-bf16-chunk python3 $E --label dense-bf16-chunk --model /tmp/models/qwen3 --kv auto --chunk 256
run 120 dense-int2-chunk python3 $E --label dense-int2-chunk --model /tmp/models/qwen3 --kv int2 --chunk 256 --repeat
run 100 dense-int2 python3 $E --label dense-int2 --model /tmp/models/qwen3 --kv int2 --repeat
run 120 hybrid-bf16-chunk python3 $E --label hybrid-bf16-chunk --model /tmp/models/qwen35 --kv auto --lm-only --chunk 256
run 120 hybrid-int2-chunk python3 $E --label hybrid-int2-chunk --model /tmp/models/qwen35 --kv int2 --lm-only --chunk 256
run 150 dense-int2-center-graph APHRODITE_INT2KV_K_ROTATION=/tmp/k_rot.pt python3 $E --label dense-int2-center-graph \
    --model /tmp/models/qwen3 --kv int2 --graph
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs dense-bf16-chunk dense-int2-chunk dense-int2 dense-int2-center-graph \
    hybrid-int2-chunk=hybrid-bf16-chunk > $OUT/summary.json 2> $OUT/summary.err
python3 -c "
import json; d = json.load(open('$OUT/summary.json'))
for c in d['comparisons']: print(c)
print(d['kv_tokens'])"
grep -h "prefix-cache repeat\|int2 KV cache active" $OUT/logs/*.log | cut -c1-260
(cd $OUT && tar czf logs.tgz logs && rm -r logs)
