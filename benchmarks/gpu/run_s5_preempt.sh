#!/usr/bin/env bash
# H200 call (nvidia-h200), session 5: preemption and recompute with int2 + window on the tiny dense
# model: a pool of 40 blocks (num_gpu_blocks_override) and 200 generated tokens per prompt, so the
# scheduler preempts (counted in-process); the same run with the normal pool for comparison.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
mkdir -p $OUT/logs
E=benchmarks/gpu/e2e_int2.py
timeout 80 python3 $E --label dense-int2-preempt --model /tmp/models/qwen3 --kv int2 --blocks 40 --max-tokens 200 \
  > $OUT/logs/e2e_dense-int2-preempt.log 2>&1; echo "preempt exit $? at ${SECONDS}s"
timeout 70 python3 $E --label dense-int2-200 --model /tmp/models/qwen3 --kv int2 --max-tokens 200 \
  > $OUT/logs/e2e_dense-int2-200.log 2>&1; echo "plain exit $? at ${SECONDS}s"
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs dense-int2-200 dense-int2-preempt > $OUT/summary.json 2> $OUT/summary.err
python3 -c "
import json; d = json.load(open('$OUT/summary.json'))
for c in d['comparisons']: print(c)
print(d['kv_tokens'])"
grep -ho '"preemptions": [0-9]*' $OUT/logs/*.log
(cd $OUT && tar czf logs.tgz logs && rm -r logs)
