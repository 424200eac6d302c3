#!/usr/bin/env bash
# H200 call (nvidia-h200), session 6, with the launch shape of this session (splits rounded down
# to whole waves; head_dim 256: one-warp programs of 32 tokens) and the tail kernel:
# 1) decode/window/sink kernel tests with real compilation; 2) window + sinks cost at 32K (graph
# replays); 3) int2 vs the fastest bf16 at 32K (graph replays); 4) dense8b 32K decode throughput
# at C = 11 with the shipped defaults (bf16's row: session 4, same script and GPU).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 150 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_kernels.py -k "window or decode or sink or launch" \
  > $OUT/gpu_kernel_tests_h200_session6_final.log 2>&1
echo "tests exit $? at ${SECONDS}s"; tail -1 $OUT/gpu_kernel_tests_h200_session6_final.log
timeout 70 python3 benchmarks/decode_attention.py --graph --window 128 --sinks 16 --window-block-size 20 --block-size 128 \
  --contexts 32768 --batches 8,32 --configs 32/4/128,32/8/128,16/2/256 --group-sizes 64 --iters 30 \
  --max-bf16-bytes 0 --out $OUT/decode_window_final_h200.json > $OUT/decode_window_final_h200.log 2>&1
echo "window exit $? at ${SECONDS}s"
grep -h "window 128\|S= \|capture failed" $OUT/decode_window_final_h200.log | cut -c1-170 | head -12
mkdir -p $OUT/logs
timeout 230 python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b --kv int2 --context 32768 \
  --concurrency 11 --out $OUT/e2e_dense8b_int2_s6.jsonl > $OUT/logs/e2e_int2_s6.log 2>&1
echo "throughput exit $? at ${SECONDS}s"
grep -h "^ROW" $OUT/logs/e2e_int2_s6.log | cut -c1-400
left=$((560 - SECONDS))
if [ $left -gt 40 ]; then
  timeout $left python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 32768 \
    --batches 8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 \
    --out $OUT/decode_attention_final_h200.json > $OUT/decode_attention_final_h200.log 2>&1
  echo "decode exit $? at ${SECONDS}s"
  grep -h "S= \|capture failed" $OUT/decode_attention_final_h200.log | cut -c1-200 | head -8
fi
(cd $OUT && tar czf final_logs.tgz logs && rm -r logs)
