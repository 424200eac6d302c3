#!/usr/bin/env bash
# H200 call (nvidia-h200), session 11: the folded tile's token sums (l, and per group sum p.vs and
# sum p.vz for the bias) as MMAs of a tile of ones, and the softmax scale folded into q once
# (SASS on the CPU: 1,127 -> 1,061 instructions per 64-token tile at head_dim 128). 1) every kernel
# test with real compilation; 2) A/B against the previous commit (.ab/int2kv_base, git archive
# f22e5fd), both on heads-first pages, same launch; 3) if every test passed, the decode table.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 200; ok=$?; echo "kernel tests exit $ok"
timeout 150 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --iters 30 \
  --out $OUT/decode_ab_sums.json > $OUT/logs/ab.log 2>&1
echo "ab exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab.log | cut -c1-300; grep -v "^Hq" $OUT/logs/ab.log | head -5 | cut -c1-300
if [ $ok = 0 ]; then
  timeout 200 python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --out $OUT/decode_attention_h200.json \
    > $OUT/logs/decode_table.log 2>&1
  echo "table exit $? at ${SECONDS}s"; grep -h "S=" $OUT/logs/decode_table.log | cut -c1-150
fi
(cd $OUT && tar czf sums_logs.tgz logs && rm -r logs)
