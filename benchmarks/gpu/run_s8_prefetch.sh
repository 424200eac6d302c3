#!/usr/bin/env bash
# H200 call (nvidia-h200), session 8, last of the budget (~190 s): the folded tile's hand-pipelined
# loop (int2_decode(prefetch=True), common.py _folded_tiles). Triton's pipeliner left this loop with
# async_wait 0 at its top (every copy waited for before each tile: TTGIR / SASS DEPBAR.LE SB0, 0x0),
# and Nsight Compute put long-scoreboard stalls right after issuing. 1) folded kernel tests with real
# compilation (both loops); 2) launch sweep: Triton's loop at 64 and 32 tokens vs the hand-pipelined
# loop at 32 tokens (236 registers, no spills; at 64 tokens it spills).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
echo "setup done at ${SECONDS}s"
timeout 60 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_kernels.py -k folded \
  > $OUT/gpu_kernel_tests_prefetch.log 2>&1
echo "tests exit $? at ${SECONDS}s"; tail -1 $OUT/gpu_kernel_tests_prefetch.log
left=$((175 - SECONDS)); [ $left -gt 20 ] && timeout $left python3 benchmarks/decode_tune.py --fold \
  --variants 64/1/3,32/1/3,32/1/1/0/1 --per-sm 8,16 --out $OUT/decode_tune_prefetch_s8.json \
  > $OUT/decode_tune_prefetch_s8.log 2>&1
echo "tune exit $? at ${SECONDS}s"; grep -h "best\|Hq" $OUT/decode_tune_prefetch_s8.log | cut -c1-300
