#!/usr/bin/env bash
# H200 call (nvidia-h200), session 18, call 6: the decode table's int2 timing with no bf16 kernels
# in the process (--max-bf16-bytes 0) and with them, 128K batch 32 and 32K batch 64, head_dim 128.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
for mb in 0 40e9; do
  for sh in "131072 32" "32768 64"; do
    set -- $sh
    timeout 100 python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts $1 --batches $2 \
      --configs 32/4/128 --group-sizes 64 --iters 20 --max-bf16-bytes $mb --out $OUT/table_${mb}_$1_$2.json 2>&1 | grep "S=" | cut -c1-200
  done
done
