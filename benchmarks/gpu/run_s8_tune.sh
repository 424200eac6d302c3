#!/usr/bin/env bash
# H200 call (nvidia-h200), session 8: launch sweep of the folded tile (the engine's decode tile since
# 228a9c4) with register caps: at 244-255 registers only 8 one-warp programs fit a multiprocessor,
# and the tile is latency-bound (31 % of the issue rate by its SASS count). 32-token tiles need 213
# registers, 168 with 16 bytes of stack (sass_report.py, CPU).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 500 python3 benchmarks/decode_tune.py --fold --variants 64/1/3,32/1/3,32/1/3/168,32/1/3/128,64/1/3/168,32/1/2/168 \
  --per-sm 8,12,16 --out $OUT/decode_tune_fold_s8.json > $OUT/decode_tune_fold_s8.log 2>&1
echo "tune exit $? at ${SECONDS}s"; grep -h "best" $OUT/decode_tune_fold_s8.log
