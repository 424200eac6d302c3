#!/usr/bin/env bash
# H200 call (nvidia-h200), session 13, diagnostics on 5321a3b (no kernel tests: the variants are
# not the product). 1) why b1b2fb8's per-sequence split (.ab/int2kv_even, 12 per multiprocessor) is
# ~2 us faster at batch <= 8 than the balanced one: 5321a3b with its sequence loop cut to one
# sequence (.ab/int2kv_noloop; uniform lengths only); 2) the window chain at batch 1-2 (1.05-1.16x
# slower at 128K batch 1): without the chain (.ab/int2kv_nochain) and with batch-1 grids filling
# the wave (splits capped at 1024 instead of 256: .ab/int2kv_b1wave).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
for c in 32/4/128 16/2/256; do
  timeout 60 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $c --contexts 32768,131072 \
    --batches 1,8,32 --alt-modules int2kv_even,int2kv_noloop --out $OUT/decode_ab_noloop_${c//\//_}.json > $OUT/logs/noloop_${c//\//_}.log 2>&1
  echo "noloop $c exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/noloop_${c//\//_}.log | cut -c1-240; grep -i "error\|capture failed" $OUT/logs/noloop_${c//\//_}.log | head -3
  timeout 60 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs $c --contexts 4096,32768,65536,131072 \
    --batches 1,2 --alt-modules int2kv_nochain,int2kv_b1wave --window 128 --out $OUT/decode_ab_b1chain_${c//\//_}.json > $OUT/logs/b1chain_${c//\//_}.log 2>&1
  echo "b1 chain $c exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/b1chain_${c//\//_}.log | cut -c1-240; grep -i "error\|capture failed" $OUT/logs/b1chain_${c//\//_}.log | head -3
done
(cd $OUT && tar czf diag_call5_logs.tgz logs && rm -r logs)
