#!/usr/bin/env bash
# H200 call (nvidia-h200), session 10, call 5: the engine-glue tests (test_backend_cpu.py) with real
# compilation again, with the GPU tolerance call 4 showed they need (fp16 dot operands).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 300 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_backend_cpu.py > $OUT/backend_tests_gpu.log 2>&1
echo "rc $? at ${SECONDS}s"; tail -n1 $OUT/backend_tests_gpu.log
grep -h "^FAILED\|^ERROR\|Greatest absolute" $OUT/backend_tests_gpu.log | cut -c1-200 | head
