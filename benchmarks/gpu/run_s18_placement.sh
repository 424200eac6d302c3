#!/usr/bin/env bash
# H200 call (nvidia-h200), session 18, call 8: benchmarks/cache_placement.py (int2 decode on the same
# pages in their own allocation and inside 2-64 GiB tensors, shuffled or in-order tables; bf16 SDPA
# in its own allocation and inside 64 GiB).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 300 python3 benchmarks/cache_placement.py --out $OUT/cache_placement.json 2>&1 | tail -40
nvidia-smi -q > $OUT/nvidia_smi_q.txt 2>&1
