#!/usr/bin/env bash
# H200 call (nvidia-h200), session 11: is head_dim 128 held back by the page layout? A token's slots
# of all KV heads are contiguous (80 B each at head_dim 128: half the heads' 32-byte code runs
# straddle two sectors), so a program reading one head fetches ~1.6x its bytes from L2. Same A/B
# as run_s11_pairs.sh, plus the new kernel on the same pages viewed heads first
# (decode_ab.py --head-major: strides only, the kernels unchanged).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 400 python3 benchmarks/decode_ab.py --baseline-path .ab --head-major --per-sm 8,12,24 --variants 64/1/3,32/1/3 \
  --out $OUT/decode_ab_headmajor.json > $OUT/decode_ab_headmajor.log 2>&1
echo "ab exit $? at ${SECONDS}s"; grep "^Hq" $OUT/decode_ab_headmajor.log | cut -c1-900; grep -v "^Hq" $OUT/decode_ab_headmajor.log | head -20 | cut -c1-300
