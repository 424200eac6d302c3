#!/usr/bin/env bash
# H200 call (nvidia-h200), session 10, call 4: every kernel test with real compilation (DecodeLaunch
# now carries the tile) and, side by side, the engine-glue tests (test_backend_cpu.py: rotation, store,
# decode / prefill split, the paged and the ring window, centering) on the GPU instead of the interpreter.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
timeout 300 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_backend_cpu.py > $OUT/logs/backend_tests_gpu.log 2>&1 &
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 300; echo "kernel tests rc $?"
wait; echo "glue tests done at ${SECONDS}s"; tail -n1 $OUT/logs/backend_tests_gpu.log
grep -h "^FAILED\|^ERROR" $OUT/logs/backend_tests_gpu.log | cut -c1-200 | head
(cd $OUT && tar czf final_logs.tgz logs && rm -r logs)
