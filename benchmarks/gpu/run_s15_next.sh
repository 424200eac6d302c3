#!/usr/bin/env bash
# H200 call (nvidia-h200), prepared in session 14, not run yet. Where does the short-share kernel's
# unexplained cost come from (session 14 call 5: launches that keep tiles of 64 take 0.3-1.7 %
# longer than before, 4K batch 1-2 0.5-1.3 us)? Same process, same caches, head_dim 128:
#   base      .ab/int2kv_base = git archive of d5bea5e renamed (before short shares)
#   new       the engine's launch (short_n 32, short_units 24)
#   0/0       one loop of 64 (short_n 0): should equal base
#   32/0      both loops compiled, never short: the cost of carrying the second loop
#   32/48     a higher threshold (shares of up to 1,536 positions short)
# then 2) Nsight Compute source counters of the split kernel, 3) pipeline stages (below).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
for v in "" "--window 128"; do
  tag=d128$(echo $v | tr -d ' -')
  timeout 150 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 32/4/128 \
    --contexts 4096,16384,32768,65536,131072 --batches 1,2,8,32,64 --short 0/0,32/0,32/48 $v \
    --out $OUT/decode_ab_overhead_$tag.json > $OUT/logs/ab_$tag.log 2>&1
  echo "ab $tag exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_$tag.log | cut -c1-200
done
# 2) which shared-memory loads of the split kernel conflict: session 14's Nsight Compute (call 2,
# batch 32, 32K) counted 6.0M excess shared wavefronts, 46 % of 13.1M. Per-instruction tables.
which ncu > /dev/null || export PATH=$PATH:$(dirname $(ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1))
timeout 150 ncu --clock-control none -k regex:_int2_decode_split --launch-skip 1 --launch-count 1 \
  --section SourceCounters --print-details all \
  python3 benchmarks/decode_profile.py --config 32/4/128 --batch 32 --tiles folded > $OUT/ncu_source_b32.txt 2>&1
echo "ncu tables exit $? at ${SECONDS}s"
timeout 150 ncu --clock-control none -k regex:_int2_decode_split --launch-skip 1 --launch-count 1 \
  --section SourceCounters --page source --print-source sass --csv \
  python3 benchmarks/decode_profile.py --config 32/4/128 --batch 32 --tiles folded > $OUT/logs/ncu_sass_b32.csv 2>&1
echo "ncu sass exit $? at ${SECONDS}s"; grep -i "excessive\|bank" $OUT/ncu_source_b32.txt | head -20
# 3) fewer pipeline stages for short launches: a wave's programs all start at once and each first
# waits for its pipeline's first tiles (1,584 programs x 2 tiles x 5 KB = 16 MB, ~3.8 us of copy
# bandwidth at 64-token tiles); session 14's fit put the wave's fixed cost at 18.3 us with 64-token
# tiles against 11.8 with 32. Two stages at 64 were 0.986x at 32K batch 8 (call 2); 32 at two
# stages was not tried.
timeout 100 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 32/4/128 \
  --contexts 4096,16384,32768,65536 --batches 2,8 --variants 32/1/2,32/1/3,64/1/2 --per-sm 12 \
  --out $OUT/decode_ab_stages.json > $OUT/logs/ab_stages.log 2>&1
echo "ab stages exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_stages.log | cut -c1-250
(cd $OUT && tar czf overhead_logs.tgz logs && rm -r logs)
