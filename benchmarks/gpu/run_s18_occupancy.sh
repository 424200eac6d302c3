#!/usr/bin/env bash
# H200 call (nvidia-h200), session 18, call 3: with the subnormal V tile (fewer live values), more
# programs per multiprocessor under lower register caps (decode_ab --per-sm N:R: 13:152, 14:144,
# 15:136, 16:128), and one loop of 64-token tiles instead of the short shares (--short 0/0), against
# main before the session (.ab/int2kv_base, 5b83cf0) and this tree's launch (12 per SM, cap 168).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
for cfg in "d128 32/4/128 13:152,14:144,15:136,16:128" "d256 16/2/256 8:255,10:200"; do
  set -- $cfg
  timeout 200 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $2 \
    --contexts 32768,131072 --batches 8,32,64 --per-sm $3 --short 0/0 --out $OUT/decode_ab_occupancy_$1.json > $OUT/logs/ab_$1.log 2>&1
  echo "ab $1 exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_$1.log | cut -c1-400
done
(cd $OUT && tar czf occupancy_logs.tgz logs && rm -r logs)
