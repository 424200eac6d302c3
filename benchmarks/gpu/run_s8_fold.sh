#!/usr/bin/env bash
# H200 call (nvidia-h200), prepared in session 7 for the next session: the folded tile
# (int2_decode(fold=True), kernels/common.py int2_tile_folded) on the GPU for the first time:
# 1) the decode kernel tests with real compilation (folded ones included: they exercise the
#    2^(10-2p) + code magic terms the interpreter cannot); 2) folded vs per-code at 32K, same launch,
#    CUDA-graph replays, with the bf16 baselines; 3) a launch sweep of the folded tile.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 150 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_kernels.py -k "decode or folded" \
  > $OUT/gpu_kernel_tests_fold.log 2>&1
echo "tests exit $? at ${SECONDS}s"; tail -1 $OUT/gpu_kernel_tests_fold.log
timeout 200 python3 benchmarks/decode_attention.py --graph --fold --block-size 128 --contexts 32768 \
  --batches 8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 \
  --out $OUT/decode_fold_h200.json > $OUT/decode_fold_h200.log 2>&1
echo "decode exit $? at ${SECONDS}s"; grep -h "folded tile\|S= " $OUT/decode_fold_h200.log | cut -c1-200 | head -16
left=$((570 - SECONDS))
[ $left -gt 40 ] && timeout $left python3 benchmarks/decode_tune.py --fold --variants 64/1/3,32/1/3,64/2/3,32/2/3 \
  --per-sm 8,16 --out $OUT/decode_tune_fold_h200.json > $OUT/decode_tune_fold_h200.log 2>&1
echo "tune exit $? at ${SECONDS}s"; grep -h "best" $OUT/decode_tune_fold_h200.log | head -10
