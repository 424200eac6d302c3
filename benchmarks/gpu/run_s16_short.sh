#!/usr/bin/env bash
# H200 call (nvidia-h200), session 16, call 4: with the cheaper int8-K tile, does dealing short
# tiles pay at more shapes? decode_ab.py --short SN/SU (tiles of SN where the shares average at
# most SU of them) against the engine's launch (head_dim 128: 32/24; 256: none), same kernels.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
ab() { local name=$1 limit=$2; shift 2
  timeout $limit python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first "$@" \
    --out $OUT/decode_ab_short_$name.json > $OUT/logs/ab_$name.log 2>&1
  echo "ab $name exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_$name.log | cut -c1-230; grep -i "error\|capture failed\|mismatch" $OUT/logs/ab_$name.log | head -3; }
ab d128 150 --configs 32/4/128 --contexts 16384,32768,65536,131072 --batches 8,32,64 --short 32/48,32/96,32/192
ab d256 150 --configs 16/2/256 --contexts 32768,131072 --batches 8,32,64 --short 16/32,16/64,16/128
(cd $OUT && tar czf short_logs.tgz logs && rm -r logs)
