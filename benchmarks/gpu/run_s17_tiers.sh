#!/usr/bin/env bash
# H200 call (nvidia-h200), session 17, call 3: the split grid transposed (head tile fastest in
# launch order) and the deal weighted per dispatch tier (int2_decode tier_weights). 1) the decode
# kernel tests with real compilation; 2) A/B against main before the change (.ab/int2kv_base),
# even deal and four weightings per head_dim.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
K="decode" bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "decode kernel tests exit $ok at ${SECONDS}s"
for cfg in "d128 32/4/128 10:8:7:7,10:7:5:5,10:9:8:8,10:8:6:6" "d256 16/2/256 10:9:9:9,10:8:8:8,10:7:7:7,11:10:10:10"; do
  set -- $cfg
  timeout 150 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $2 --contexts 32768,131072 \
    --batches 8,32,64 --tiers $3 --out $OUT/decode_ab_tiers_$1.json > $OUT/logs/ab_$1.log 2>&1
  echo "ab $1 exit $? at ${SECONDS}s"; grep "^Hq\|Error\|error" $OUT/logs/ab_$1.log | cut -c1-260
done
(cd $OUT && tar czf tiers_logs.tgz logs && rm -r logs)
