#!/usr/bin/env bash
# H200 call (nvidia-h200), session 18, call 5 (and 7): benchmarks/harness_check.py (call 5: the table's inputs vs
# the A/B's; call 7: the same pages in three allocations), both kernels, one process.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 200 python3 benchmarks/harness_check.py --baseline-path .ab --out $OUT/harness_check.json 2>&1 | tail -20
