#!/usr/bin/env bash
# H200 call (nvidia-h200), session 11: odd slots (docs/format.md) -- the slot of a token at an odd
# page offset rotated by its metadata block, so that every K and V code run starts on a 32-byte
# sector (head_dim 128: Nsight Compute showed ~1.6 L2 sector requests per sector of data).
# 1) every kernel test with real compilation; 2) A/B against the kernels before (.ab/int2kv_base,
# git archive 0535d35, which read the same logical slots unrotated), heads-first pages, head_dim
# 128 (head_dim 256 at G = 64 has no rotation); 3) if the tests passed, the decode table.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
grep -h "^FAILED" $OUT/logs/kernel_tests_shard_*.log | cut -c1-160 | head -5
timeout 70 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 32/4/128 \
  --out $OUT/decode_ab_odd.json > $OUT/logs/ab.log 2>&1
echo "ab exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab.log | cut -c1-200; grep -v "^Hq" $OUT/logs/ab.log | head -4 | cut -c1-200
if [ $ok = 0 ]; then
  timeout $((300 - SECONDS)) python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --out $OUT/decode_attention_h200.json \
    > $OUT/logs/decode_table.log 2>&1
  echo "table exit $? at ${SECONDS}s"; grep -h "S=" $OUT/logs/decode_table.log | cut -c1-150
fi
(cd $OUT && tar czf odd_logs.tgz logs && rm -r logs)
