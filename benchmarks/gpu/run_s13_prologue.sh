#!/usr/bin/env bash
# H200 call (nvidia-h200), session 13: the split programs' prologue -- one pass over <= 64 lengths,
# 32-bit divisions where the product fits (a 64-bit one is a subroutine call). 1) every kernel test
# with real compilation; 2) A/B against d82f783 (.ab/int2kv_base), 5321a3b (.ab/int2kv_deal: the
# two-pass prologue), b1b2fb8's per-sequence split at 12 per multiprocessor (.ab/int2kv_even) and
# this tree with the split waiting for the tail at its start instead of its end
# (.ab/int2kv_waitstart), without and with the window of 128; 3) per-kernel profiler times.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
for w in 0 128; do
  for c in 32/4/128 16/2/256; do
    timeout 80 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $c --contexts 4096,32768,131072 \
      --batches 1,8,32,64 --alt-modules int2kv_deal,int2kv_even,int2kv_waitstart --window $w \
      --out $OUT/decode_ab_prologue_${c//\//_}_w$w.json > $OUT/logs/ab_${c//\//_}_w$w.log 2>&1
    echo "ab $c window $w exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_${c//\//_}_w$w.log | cut -c1-240; grep -i "error\|capture failed" $OUT/logs/ab_${c//\//_}_w$w.log | head -3
  done
done
timeout 90 python3 benchmarks/decode_kernel_times.py --baseline-path .ab --modules int2kv_deal,int2kv_even \
  --shapes 32/4/128/4096/8,32/4/128/32768/1,32/4/128/32768/8,32/4/128/131072/1,16/2/256/32768/8 \
  --out $OUT/decode_kernel_times.json 2>&1 | grep -v -i warn | grep split | tail -20
(cd $OUT && tar czf prologue_call4_logs.tgz logs && rm -r logs)
