#!/usr/bin/env bash
# H200 call (nvidia-h200), session 13: with fewer tiles than programs, program p takes tile p (so
# every slot the merge reads was written and its partial-result loads no longer wait for the lse
# loads). 1) every kernel test with real compilation; 2) A/B against d82f783 (.ab/int2kv_base),
# b1b2fb8's per-sequence split at 12 programs per multiprocessor (.ab/int2kv_even: the launch before
# the batch was balanced) and this tree with the split launched after the tail normally
# (.ab/int2kv_nochain), without and with the window of 128; 3) per-kernel profiler times.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
for w in 0 128; do
  for c in 32/4/128 16/2/256; do
    timeout 70 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $c --contexts 4096,32768,131072 \
      --batches 1,8,32,64 --alt-modules int2kv_even,int2kv_nochain --window $w --out $OUT/decode_ab_deal_${c//\//_}_w$w.json > $OUT/logs/ab_${c//\//_}_w$w.log 2>&1
    echo "ab $c window $w exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab_${c//\//_}_w$w.log | cut -c1-220; grep -i "error\|capture failed" $OUT/logs/ab_${c//\//_}_w$w.log | head -3
  done
done
timeout 90 python3 benchmarks/decode_kernel_times.py --baseline-path .ab --modules int2kv_base,int2kv_even \
  --shapes 32/4/128/4096/64,32/4/128/32768/1,32/4/128/32768/8,32/4/128/131072/1,16/2/256/32768/8 \
  --out $OUT/decode_kernel_times.json 2>&1 | grep -v -i warn | tail -20
(cd $OUT && tar czf deal_call3_logs.tgz logs && rm -r logs)
