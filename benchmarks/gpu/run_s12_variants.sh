#!/usr/bin/env bash
# H200 call (nvidia-h200), session 12: why the balanced split launch (4f145c0) is slower than the
# per-sequence splits of 93acc96 (.ab/int2kv_base): variants of 4f145c0 under .ab/ -- int2kv_v1
# grid (head tiles, programs) (heads fastest, as 93acc96's (batch, heads, splits) order ran them),
# int2kv_v2 one pass over <= 64 sequence lengths and int32 shares (the prologue), int2kv_v3 both.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
for r in "" --ragged; do
  for c in 32/4/128 16/2/256; do
    timeout 100 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $c --contexts 4096,32768,131072 \
      --batches 1,8,32,64 --alt-modules int2kv_v1,int2kv_v2,int2kv_v3 $r --out $OUT/decode_ab_variants_${c//\//_}$r.json > $OUT/logs/ab_${c//\//_}$r.log 2>&1
    echo "ab $c $r exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_${c//\//_}$r.log | cut -c1-200; grep -i "error" $OUT/logs/ab_${c//\//_}$r.log | head -3
  done
done
(cd $OUT && tar czf variants_logs.tgz logs && rm -r logs)
