#!/usr/bin/env bash
# H200 call (nvidia-h200), session 9, last: the split and tail kernels write their partial outputs
# in the activations' dtype (bf16 here) instead of fp32 -- at batch 1 and 256 splits those were 40 %
# of the bytes a decode moved. 1) the decode / folded / window / sink / launch kernel tests with real
# compilation (4 shards; stop on a failure); 2) the decode table vs bf16 (compare with call 4,
# session9/decode_attention_final_h200.json); 3) the engine with CUDA graphs on the tiny dense model.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
mkdir -p $OUT/logs
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150 || { (cd $OUT && tar czf partials_logs.tgz logs); exit 1; }
run() { local t=$1 label=$2; shift 2; if [ $((585 - SECONDS)) -lt $t ]; then t=$((585 - SECONDS)); fi
        [ $t -gt 20 ] || { echo "$label skipped (time)"; return; }
        timeout $t env "$@" > "$OUT/logs/$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
run 150 decode_table python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
  --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --out $OUT/decode_attention_partials_h200.json
grep -h "S=" $OUT/logs/decode_table.log | cut -c1-150
cp benchmarks/results/session9/baseline/e2e_dense-bf16.log $OUT/logs/
run 120 e2e_dense-int2-graph python3 benchmarks/gpu/e2e_int2.py --label dense-int2-graph --model /tmp/models/qwen3 --kv int2 --graph
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs dense-bf16 dense-int2-graph > $OUT/partials_e2e_summary.json 2> $OUT/logs/summary.err
python3 -c "
import json; d = json.load(open('$OUT/partials_e2e_summary.json'))
for c in d['comparisons']: print(c)"
(cd $OUT && tar czf partials_logs.tgz logs && rm -r logs)
