#!/usr/bin/env bash
# H200 call (nvidia-h200), session 14, call 3: short split shares in 32-token tiles
# (decode_launch_config short_n = 32 at head_dim <= 128, folded; shares of <= SHORT_SHARE positions).
# .ab/int2kv_base = main before the change (d5bea5e's kernels). 1) every kernel test with real
# compilation, the engine-glue tests beside them; 2) A/B against main at head_dim 128 (uniform
# lengths 4K-128K, ragged, the window of 128) and head_dim 256 (unchanged: the noise floor);
# 3) the decode table; 4) the engine with CUDA graphs: the tiny dense model vs session 9's bf16,
# the tiny Qwen3.5 hybrid (ring window 64, chunks of 256) vs session 5's bf16.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1 &
mkdir -p $OUT/logs /tmp/s5 && tar xzf benchmarks/results/session5/hybrid_logs.tgz -C /tmp/s5
timeout 200 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_backend_cpu.py > $OUT/logs/backend_tests_gpu.log 2>&1 &
glue=$!
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
wait $glue; echo "glue tests exit $? at ${SECONDS}s"; tail -1 $OUT/logs/backend_tests_gpu.log
ab() { local tag=$1; shift
  timeout 80 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first "$@" --out $OUT/decode_ab_short_$tag.json > $OUT/logs/ab_$tag.log 2>&1
  echo "ab $tag exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_$tag.log | cut -c1-130; grep -i "error\|capture failed" $OUT/logs/ab_$tag.log | head -3; }
ab d128 --configs 32/4/128 --contexts 4096,16384,32768,49152,65536,131072 --batches 1,2,8,32,64
ab d128_ragged --configs 32/4/128 --contexts 4096,32768,131072 --batches 2,8,32,64 --ragged
ab d128_w128 --configs 32/4/128 --contexts 4096,32768,131072 --batches 1,2,8,32,64 --window 128
ab d256 --configs 16/2/256 --contexts 32768 --batches 1,8,32
if [ $ok = 0 ]; then
  timeout 100 python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --out $OUT/decode_attention_h200.json \
    > $OUT/logs/decode_table.log 2>&1
  echo "table exit $? at ${SECONDS}s"; grep -h "S=" $OUT/logs/decode_table.log | cut -c1-150
fi
wait
cp /tmp/s5/logs/e2e_hybrid-bf16-chunk.log benchmarks/results/session9/baseline/e2e_dense-bf16.log $OUT/logs/
run() { local t=$1 label=$2; shift 2; if [ $((570 - SECONDS)) -lt $t ]; then t=$((570 - SECONDS)); fi
        [ $t -gt 20 ] || { echo "$label skipped (time)"; return; }
        timeout $t env "$@" > "$OUT/logs/$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
run 100 e2e_dense-int2-graph python3 benchmarks/gpu/e2e_int2.py --label dense-int2-graph --model /tmp/models/qwen3 --kv int2 --graph
run 150 e2e_hybrid-int2-ring64 APHRODITE_INT2KV_RECENT_WINDOW=64 python3 benchmarks/gpu/e2e_int2.py --label hybrid-int2-ring64 \
  --model /tmp/models/qwen35 --kv int2 --lm-only --chunk 256 --prefix-caching off
python3 benchmarks/gpu/summarize_e2e.py $OUT/logs dense-bf16 dense-int2-graph hybrid-int2-ring64=hybrid-bf16-chunk \
  > $OUT/e2e_summary.json 2> $OUT/logs/summary.err
python3 -c "
import json; d = json.load(open('$OUT/e2e_summary.json'))
for c in d['comparisons']: print(c)"
grep -h "int2 KV cache active\|ring of\|Error" $OUT/logs/e2e_*int2*.log | cut -c1-160 | head -6
(cd $OUT && tar czf short_call3_logs.tgz logs && rm -r logs)
