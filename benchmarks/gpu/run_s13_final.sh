#!/usr/bin/env bash
# H200 call (nvidia-h200), session 13: the split launch chained after the tail's only where its
# grid fills the wave (decode_launch_config chain_tail). 1) every kernel test with real compilation;
# 2) A/B with the window of 128 against d82f783 (.ab/int2kv_base) and 5321a3b (.ab/int2kv_deal:
# always chained), batch 1-64; 3) the decode table; 4) the engine with CUDA graphs: the tiny dense
# model vs session 9's bf16 run, dense8b at 32K, C = 11 (bf16 550.1 tok/s, session 11).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1 &
mkdir -p $OUT/logs
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
for c in 32/4/128 16/2/256; do
  timeout 70 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $c --contexts 4096,32768,131072 \
    --batches 1,2,8,32,64 --alt-modules int2kv_deal --window 128 --out $OUT/decode_ab_final_${c//\//_}_w128.json > $OUT/logs/ab_${c//\//_}.log 2>&1
  echo "ab $c window 128 exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_${c//\//_}.log | cut -c1-200; grep -i "error\|capture failed" $OUT/logs/ab_${c//\//_}.log | head -3
done
if [ $ok = 0 ]; then
  timeout 100 python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --out $OUT/decode_attention_h200.json \
    > $OUT/logs/decode_table.log 2>&1
  echo "table exit $? at ${SECONDS}s"; grep -h "S=" $OUT/logs/decode_table.log | cut -c1-150
fi
wait
cp benchmarks/results/session9/baseline/e2e_dense-bf16.log $OUT/logs/
run() { local t=$1 label=$2; shift 2; if [ $((440 - SECONDS)) -lt $t ]; then t=$((440 - SECONDS)); fi
        [ $t -gt 20 ] || { echo "$label skipped (time)"; return; }
        timeout $t env "$@" > "$OUT/logs/$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
run 100 e2e_dense-int2-graph python3 benchmarks/gpu/e2e_int2.py --label dense-int2-graph --model /tmp/models/qwen3 --kv int2 --graph
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs dense-bf16 dense-int2-graph > $OUT/e2e_summary.json 2> $OUT/logs/summary.err
python3 -c "
import json; d = json.load(open('$OUT/e2e_summary.json'))
for c in d['comparisons']: print(c)"
run 150 e2e_dense8b python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b \
  --kv int2 --context 32768 --concurrency 11 --out $OUT/e2e_dense8b_int2_s13.jsonl
grep -h "^ROW" $OUT/logs/e2e_dense8b.log | cut -c1-400
(cd $OUT && tar czf final_call6_logs.tgz logs && rm -r logs)
