#!/usr/bin/env bash
# H200 call (nvidia-h200), session 12: the merge step sized by the split count (merge_chunk).
# 1) every kernel test with real compilation; 2) A/B against 93acc96 (.ab/int2kv_base), uniform
# and ragged lengths, with this tree at 12 and 16 programs per multiprocessor (head_dim 128,
# folded: .ab/int2kv_s12, .ab/int2kv_s16) besides its 24; 3) per-kernel times.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
for r in "" --ragged; do
  for c in 32/4/128 16/2/256; do
    alt=""; [ $c = 32/4/128 ] && alt="--alt-modules int2kv_s12,int2kv_s16"
    timeout 100 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $c --contexts 4096,32768,131072 \
      --batches 1,8,32,64 $alt $r --out $OUT/decode_ab_chunk_${c//\//_}$r.json > $OUT/logs/ab_${c//\//_}$r.log 2>&1
    echo "ab $c $r exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_${c//\//_}$r.log | cut -c1-200; grep -i "error" $OUT/logs/ab_${c//\//_}$r.log | head -3
  done
done
timeout 60 python3 benchmarks/decode_kernel_times.py --baseline-path .ab --modules int2kv_base,int2kv_s12 \
  --shapes 32/4/128/4096/64,32/4/128/32768/1,32/4/128/32768/8,32/4/128/32768/64,16/2/256/32768/8 \
  --out $OUT/decode_kernel_times.json 2>&1 | grep -v -i warn | tail -20
(cd $OUT && tar czf chunk_logs.tgz logs && rm -r logs)
