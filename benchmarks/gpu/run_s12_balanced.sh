#!/usr/bin/env bash
# H200 call (nvidia-h200), session 12: the split launch deals the batch's tiles evenly to
# num_splits * B programs per head tile (shares may span sequences). 1) every kernel test with real
# compilation; 2) A/B against 93acc96 (.ab/int2kv_base: one sequence's tiles per split), uniform
# and ragged lengths (S/8 .. 15S/8), with 12/16/24 programs per multiprocessor on the new side at
# head_dim 128; 3) if the tests passed, the decode table at the shipped launch.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
for r in "" --ragged; do
  timeout 120 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 32/4/128 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --per-sm 12,16,24 $r --out $OUT/decode_ab_balanced_d128$r.json > $OUT/logs/ab_d128$r.log 2>&1
  echo "ab d128 $r exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_d128$r.log | cut -c1-200
  timeout 90 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 16/2/256 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 $r --out $OUT/decode_ab_balanced_d256$r.json > $OUT/logs/ab_d256$r.log 2>&1
  echo "ab d256 $r exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_d256$r.log | cut -c1-200
done
if [ $ok = 0 ]; then
  timeout $((580 - SECONDS)) python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
    --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --out $OUT/decode_attention_h200.json \
    > $OUT/logs/decode_table.log 2>&1
  echo "table exit $? at ${SECONDS}s"; grep -h "S=" $OUT/logs/decode_table.log | cut -c1-150
fi
(cd $OUT && tar czf balanced_logs.tgz logs && rm -r logs)
