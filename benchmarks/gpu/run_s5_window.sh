#!/usr/bin/env bash
# H200 call (nvidia-h200), session 5: the recent window read by split 0 of the int2 decode launch
# (was: a second launch): kernel tests with real compilation, then the window + sinks cost at 32K
# timed as CUDA-graph replays (same command as run_s5_decode.sh's first part).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 170 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_kernels.py -k "window or decode" \
  > $OUT/gpu_kernel_tests_h200_session5.log 2>&1
echo "tests exit $? at ${SECONDS}s"; tail -1 $OUT/gpu_kernel_tests_h200_session5.log
timeout 90 python3 benchmarks/decode_attention.py --graph --window 128 --window-block-size 20 --block-size 128 \
  --contexts 32768 --batches 8,32 --configs 32/4/128,32/8/128 --group-sizes 64 --iters 30 \
  --max-bf16-bytes 0 --out $OUT/decode_window_split0_h200.json > $OUT/decode_window_split0_h200.log 2>&1
echo "window exit $? at ${SECONDS}s"
grep -h "window 128\|S= \|capture failed" $OUT/decode_window_split0_h200.log | cut -c1-170 | head -12
