#!/usr/bin/env bash
# H200 call (nvidia-h200), session 9: launch sweep of the folded tile as the engine now runs it (one
# page per tile, table ahead) -- the loop changed enough (1,626 -> 1,393 instructions, shared
# memory per stage 6,400 -> 6,148 B) that tile size and stage count may have moved.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 240 python3 benchmarks/decode_tune.py --fold --table-ahead --per-sm 8,16 \
  --variants 64/1/3,64/1/4,64/1/2,32/1/3,32/1/4 --out $OUT/decode_tune_onepage.json > $OUT/decode_tune_onepage.log 2>&1
echo "tune exit $? at ${SECONDS}s"; grep -v "^ " $OUT/decode_tune_onepage.log | tail -8 | cut -c1-400
