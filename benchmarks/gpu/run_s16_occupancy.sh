#!/usr/bin/env bash
# H200 call (nvidia-h200), session 16, call 3: more split programs per multiprocessor now that the
# int8 K dots need fewer registers (sass_report: head_dim 128 161, no tile-loop spills down to a cap
# of 128; head_dim 256 210, none down to 184). Same kernels, splits for N programs per SM under a
# register cap R (decode_ab.py --per-sm N:R) against the engine's launch (12 at 168 / 8 uncapped).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
ab() { local name=$1 limit=$2; shift 2
  timeout $limit python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first "$@" \
    --out $OUT/decode_ab_occ_$name.json > $OUT/logs/ab_$name.log 2>&1
  echo "ab $name exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_$name.log | cut -c1-230; grep -i "error\|capture failed\|mismatch" $OUT/logs/ab_$name.log | head -3; }
ab d128 150 --configs 32/4/128 --contexts 4096,32768,131072 --batches 1,8,32,64 --per-sm 12:144,13:152,14:144,16:128
ab d256 150 --configs 16/2/256 --contexts 4096,32768,131072 --batches 1,8,32,64 --per-sm 9,10:200,11:184
ab d128_ragged 100 --configs 32/4/128 --contexts 32768,131072 --batches 8,32,64 --ragged --per-sm 14:144,16:128
(cd $OUT && tar czf occ_logs.tgz logs && rm -r logs)
