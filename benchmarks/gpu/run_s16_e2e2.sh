#!/usr/bin/env bash
# H200 call (nvidia-h200), session 16, call 6: what had not been run on these kernels (f53df29's):
# 1) the tiny dense model with CUDA graphs vs session 9's bf16 log (greedy agreement; session 14:
# 24, 24, 18, 17, 1, 7); 2) dense8b at 32K with concurrency 32 (int2 holds ~70 such requests in
# half the GPU, bf16 11), int2's decode throughput beyond bf16's maximum.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
run() { local t=$1 label=$2; shift 2; if [ $((585 - SECONDS)) -lt $t ]; then t=$((585 - SECONDS)); fi
        [ $t -gt 20 ] || { echo "$label skipped (time)"; return; }
        timeout -s ABRT -k 5 $t env PYTHONFAULTHANDLER=1 "$@" > "$OUT/logs/$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
python3 .gpu-bundle/gpu/make_models.py /tmp/models > $OUT/logs/make_models.log 2>&1; echo "models at ${SECONDS}s"
cp benchmarks/results/session9/baseline/e2e_dense-bf16.log $OUT/logs/
run 150 e2e_dense-int2-graph python3 benchmarks/gpu/e2e_int2.py --label dense-int2-graph --model /tmp/models/qwen3 --kv int2 --graph
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs dense-bf16 dense-int2-graph > $OUT/e2e_summary_dense.json 2> $OUT/logs/summary.err
python3 -c "
import json; d = json.load(open('$OUT/e2e_summary_dense.json'))
for c in d['comparisons']: print(c)" 2>&1 | cut -c1-300
run 280 e2e_dense8b_c32 python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b \
  --kv int2 --context 32768 --concurrency 32 --out $OUT/e2e_dense8b_int2_c32_s16.jsonl
grep -h "^ROW" $OUT/logs/e2e_dense8b_c32.log | cut -c1-400
(cd $OUT && tar czf e2e_call6_logs.tgz logs && rm -r logs)
