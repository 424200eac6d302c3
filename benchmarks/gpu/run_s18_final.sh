#!/usr/bin/env bash
# H200 call (nvidia-h200), session 18, call 9: 1) the A/B of this tree (kernels as 588e0d8, the
# subnormal V tile) against main before the session (.ab/int2kv_base, 5b83cf0), every side timed
# twice in ABBA order (decode_ab.py now does); 2) cache_placement.py with copies in the pages' own
# (heads-first) layout: whether the place of the pages matters at all.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
for cfg in "d128 32/4/128" "d256 16/2/256"; do
  set -- $cfg
  timeout 150 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $2 \
    --contexts 4096,32768,131072 --batches 1,8,32,64 --out $OUT/decode_ab_abba_$1.json > $OUT/logs/ab_$1.log 2>&1
  echo "ab $1 exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_$1.log | cut -c1-200
done
timeout 150 python3 benchmarks/cache_placement.py --sizes 8,64 --out $OUT/cache_placement.json > $OUT/logs/placement.log 2>&1
echo "placement exit $? at ${SECONDS}s"; grep "int2\|bf16" $OUT/logs/placement.log
(cd $OUT && tar czf final_logs.tgz logs && rm -r logs)
