#!/usr/bin/env bash
# H200 call (nvidia-h200), session 14, call 4: short split shares decided per launch (share_tiles:
# tiles of 32 where the mean share is 1 to 32 of them, head_dim <= 128 folded), .ab/int2kv_base =
# main before the change (d5bea5e's kernels). 1) every kernel test with real compilation and the
# engine-glue tests; 2) A/B against main at head_dim 128 (uniform 4K-128K, ragged, window of 128);
# 3) the decode table; 4) the tiny Qwen3.5 hybrid (ring window 64, chunks of 256, eager) vs session
# 5's bf16, with a Python traceback dump if it runs out of time (call 3: no result in 150 s);
# 5) dense8b at 32K, C = 11 (bf16 550.1 tok/s, session 11) if time is left.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1 &
mkdir -p $OUT/logs /tmp/s5 && tar xzf benchmarks/results/session5/hybrid_logs.tgz -C /tmp/s5
timeout 200 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_backend_cpu.py > $OUT/logs/backend_tests_gpu.log 2>&1 &
glue=$!
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
wait $glue; echo "glue tests exit $? at ${SECONDS}s"; tail -1 $OUT/logs/backend_tests_gpu.log
ab() { local tag=$1; shift
  timeout 80 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first "$@" --out $OUT/decode_ab_short2_$tag.json > $OUT/logs/ab_$tag.log 2>&1
  echo "ab $tag exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_$tag.log | cut -c1-130; grep -i "error\|capture failed" $OUT/logs/ab_$tag.log | head -3; }
ab d128 --configs 32/4/128 --contexts 4096,16384,32768,65536,131072 --batches 1,2,8,32,64
ab d128_ragged --configs 32/4/128 --contexts 4096,32768,131072 --batches 2,8,32,64 --ragged
ab d128_w128 --configs 32/4/128 --contexts 4096,32768,131072 --batches 1,2,8,32,64 --window 128
if [ $ok = 0 ]; then
  timeout 100 python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --out $OUT/decode_attention_h200.json \
    > $OUT/logs/decode_table.log 2>&1
  echo "table exit $? at ${SECONDS}s"; grep -h "S=" $OUT/logs/decode_table.log | cut -c1-150
fi
wait
cp /tmp/s5/logs/e2e_hybrid-bf16-chunk.log $OUT/logs/
run() { local t=$1 label=$2; shift 2; if [ $((585 - SECONDS)) -lt $t ]; then t=$((585 - SECONDS)); fi
        [ $t -gt 20 ] || { echo "$label skipped (time)"; return; }
        timeout -s ABRT -k 5 $t env PYTHONFAULTHANDLER=1 "$@" > "$OUT/logs/$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
run 220 e2e_hybrid-int2-ring64 APHRODITE_INT2KV_RECENT_WINDOW=64 python3 benchmarks/gpu/e2e_int2.py --label hybrid-int2-ring64 \
  --model /tmp/models/qwen35 --kv int2 --lm-only --chunk 256 --prefix-caching off
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs hybrid-int2-ring64=hybrid-bf16-chunk > $OUT/e2e_summary.json 2> $OUT/logs/summary.err
python3 -c "
import json; d = json.load(open('$OUT/e2e_summary.json'))
for c in d['comparisons']: print(c)"
grep -h "int2 KV cache active\|ring of\|Error\|took" $OUT/logs/e2e_hybrid*int2*.log | cut -c1-160 | head -8
run 140 e2e_dense8b python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b \
  --kv int2 --context 32768 --concurrency 11 --out $OUT/e2e_dense8b_int2_s14.jsonl
grep -h "^ROW" $OUT/logs/e2e_dense8b.log | cut -c1-400
(cd $OUT && tar czf short2_call4_logs.tgz logs && rm -r logs)
