#!/usr/bin/env bash
# H200 call (nvidia-h200), prepared in session 8 for the next session: block-table entries loaded a
# tile ahead (int2_decode(table_ahead=True), common.py _int2_tiles). With them Triton's pipeliner
# keeps one tile's copies in flight (TTGIR async_wait 6, SASS DEPBAR.LE SB0, 0x6) instead of waiting
# for all of them at the top of each iteration (async_wait 0), which Nsight Compute showed as
# long-scoreboard stalls (session 8). SASS on CPU (triton 3.9): folded 1,522 instructions per tile,
# 228 registers (was 1,500 / 244). The H200 image has triton 3.6: check its TTGIR too.
# 1) kernel tests with real compilation; 2) the pipeliner's wait count under triton 3.6;
# 3) table-ahead vs as-is at 32K and 128K, folded and per-code, CUDA-graph replays.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 150 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_kernels.py \
  -k "decode or folded or table_ahead or window or sink or launch" > $OUT/gpu_kernel_tests_table_ahead.log 2>&1
echo "tests exit $? at ${SECONDS}s"; tail -1 $OUT/gpu_kernel_tests_table_ahead.log
for ta in 0 1; do TABLE_AHEAD=$ta FOLD=1 python3 benchmarks/sass_report.py 128 64 8 8 64 1 128 16 3 2>&1 | tail -2 | cut -c1-150; done
for tile in folded per-code; do
  timeout 120 python3 benchmarks/decode_attention.py --graph --table-ahead --tile $tile --block-size 128 \
    --contexts 32768,131072 --batches 8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 \
    --max-bf16-bytes 0 --out $OUT/decode_table_ahead_${tile}_h200.json > $OUT/decode_table_ahead_${tile}_h200.log 2>&1
  echo "$tile exit $? at ${SECONDS}s"; grep -h "table ahead\|S= " $OUT/decode_table_ahead_${tile}_h200.log | cut -c1-150
done
