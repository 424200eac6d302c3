#!/usr/bin/env bash
# H200 call (nvidia-h200), session 6: sinks and recent window read by the tail kernel (the
# "tail"; was: the window by its own launch, the sinks by a second loop in split 0): kernel tests
# with real compilation, then the window + sinks cost at 32K and 128K as CUDA-graph replays
# (the same command as session 5's run_s5_decode.sh first part, plus 16 sinks and head_dim 256).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 200 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_kernels.py -k "window or decode or sink" \
  > $OUT/gpu_kernel_tests_h200_session6.log 2>&1
echo "tests exit $? at ${SECONDS}s"; tail -1 $OUT/gpu_kernel_tests_h200_session6.log
timeout 110 python3 benchmarks/decode_attention.py --graph --window 128 --window-block-size 20 --block-size 128 \
  --contexts 32768 --batches 8,32 --configs 32/4/128,32/8/128 --group-sizes 64 --iters 30 \
  --max-bf16-bytes 0 --out $OUT/decode_window_tail_h200.json > $OUT/decode_window_tail_h200.log 2>&1
echo "window exit $? at ${SECONDS}s"
grep -h "window 128\|S= \|capture failed" $OUT/decode_window_tail_h200.log | cut -c1-170 | head -12
left=$((540 - SECONDS))
timeout $left python3 benchmarks/decode_attention.py --graph --window 128 --sinks 16 --window-block-size 20 --block-size 128 \
  --contexts 32768,131072 --batches 8,32 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 30 \
  --max-bf16-bytes 0 --out $OUT/decode_window_tail16_h200.json > $OUT/decode_window_tail16_h200.log 2>&1
echo "window16 exit $? at ${SECONDS}s"
grep -h "window 128\|S= \|capture failed" $OUT/decode_window_tail16_h200.log | cut -c1-170 | head -16
