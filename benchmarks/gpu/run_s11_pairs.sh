#!/usr/bin/env bash
# H200 call (nvidia-h200), session 11: the folded tile with V read as 16-bit words and P.V
# transposed (kernels/folded.py; SASS on the CPU: 1,393 -> 1,127 instructions per 64-token tile at
# head_dim 128, 255 -> 168 registers). 1) every kernel test with real compilation; 2) A/B against
# the kernels of d86c884 in one process (.ab/int2kv_base, see benchmarks/decode_ab.py), with
# split counts of 8/12/16/24 programs per multiprocessor and 32- / 64-token tiles.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT 300; echo "tests exit $?"
timeout 330 python3 benchmarks/decode_ab.py --baseline-path .ab --per-sm 8,12,16,24 --variants 64/1/3,32/1/3 \
  --out $OUT/decode_ab_pairs.json > $OUT/decode_ab_pairs.log 2>&1
echo "ab exit $? at ${SECONDS}s"; grep "^Hq" $OUT/decode_ab_pairs.log | cut -c1-600; grep -v "^Hq" $OUT/decode_ab_pairs.log | head -20 | cut -c1-300
