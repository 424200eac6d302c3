#!/usr/bin/env bash
# H200 call (nvidia-h200), session 18, call 4: why the decode table (call 2) shows 1-4 % where the
# A/B shows 5-10 % at batch 32-64: the table times int2 right after the shape's bf16 kernels. The
# table at head_dim 128, 32K-128K, batch 8-64, with the SM clock logged (decode_attention.py
# gpu_state), without and with a 3 s cool-down before int2; then the A/B of the same shapes (no bf16).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
for cd in 0 3; do
  timeout 200 python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 32768,131072 \
    --batches 8,32,64 --configs 32/4/128 --group-sizes 64 --iters 20 --cooldown $cd --out $OUT/decode_table_cooldown$cd.json \
    > $OUT/logs/table_cooldown$cd.log 2>&1
  echo "table cooldown $cd exit $? at ${SECONDS}s"; grep -h "S=" $OUT/logs/table_cooldown$cd.log | cut -c1-220
done
timeout 100 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 32/4/128 \
  --contexts 32768,131072 --batches 8,32,64 --out $OUT/decode_ab_clocks.json > $OUT/logs/ab.log 2>&1
echo "ab exit $? at ${SECONDS}s"; grep "^Hq" $OUT/logs/ab.log | cut -c1-200
nvidia-smi -q -d CLOCK,POWER,PERFORMANCE > $OUT/logs/nvidia_smi_q.txt 2>&1
(cd $OUT && tar czf clocks_logs.tgz logs && rm -r logs)
