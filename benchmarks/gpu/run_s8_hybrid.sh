#!/usr/bin/env bash
# H200 call (nvidia-h200), session 8: the tiny Qwen3.5 hybrid with the defaults, now with the folded
# decode tile, chunks of 256, against session 5's bf16 log of the same script (as run_s7_hybrid.sh).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
mkdir -p $OUT/logs /tmp/s5 && tar xzf benchmarks/results/session5/hybrid_logs.tgz -C /tmp/s5
cp /tmp/s5/logs/e2e_hybrid-bf16-chunk.log $OUT/logs/
timeout 300 python3 benchmarks/gpu/e2e_int2.py --label hybrid-int2-folded-chunk --model /tmp/models/qwen35 --kv int2 \
  --lm-only --chunk 256 > $OUT/logs/e2e_hybrid-int2-folded-chunk.log 2>&1
echo "hybrid exit $? at ${SECONDS}s"
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs hybrid-bf16-chunk hybrid-int2-folded-chunk > $OUT/hybrid_folded_summary.json 2> $OUT/summary.err
python3 -c "
import json; d = json.load(open('$OUT/hybrid_folded_summary.json'))
for c in d['comparisons']: print(c)"
grep -h "int2 KV cache active\|Error" $OUT/logs/e2e_hybrid-int2-folded-chunk.log | cut -c1-300 | head -5
(cd $OUT && tar czf hybrid_folded_logs.tgz logs && rm -r logs)
