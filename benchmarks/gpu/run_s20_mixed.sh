#!/usr/bin/env bash
# H200 call (nvidia-h200), session 20, call 1: short shares in mixed tiles (int2_decode mixed:
# a share's positions from its first multiple of 64 on in tiles of 64, the rest in tiles of 32;
# sass_report: 855 instructions per 64 positions against 2 x 488). 1) ABBA A/B against a693fe2's
# kernels (.ab/int2kv_base) at head_dim 128, where short shares apply (batch 1-8), plain and with
# the window of 128; 2) every kernel test with real compilation and the engine-glue tests.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
timeout 150 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 32/4/128 \
  --contexts 4096,16384,32768,131072 --batches 1,2,4,8 --out $OUT/decode_ab_mixed_d128.json > $OUT/logs/ab_d128.log 2>&1
echo "ab d128 exit $? at ${SECONDS}s"; grep "Hq" $OUT/logs/ab_d128.log | cut -c1-200
timeout 100 python3 benchmarks/decode_ab.py --baseline-path .ab --heads-first --configs 32/4/128 --window 128 \
  --contexts 16384,32768 --batches 2,8 --out $OUT/decode_ab_mixed_d128_window.json > $OUT/logs/ab_d128_window.log 2>&1
echo "ab window exit $? at ${SECONDS}s"; grep "Hq" $OUT/logs/ab_d128_window.log | cut -c1-200
timeout 200 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_backend_cpu.py > $OUT/logs/backend_tests_gpu.log 2>&1 &
glue=$!
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT/logs 150; ok=$?; echo "kernel tests exit $ok at ${SECONDS}s"
wait $glue; echo "glue tests exit $? at ${SECONDS}s"; tail -1 $OUT/logs/backend_tests_gpu.log
grep -h "^FAILED" $OUT/logs/backend_tests_gpu.log | head -5
(cd $OUT && tar czf mixed_logs.tgz logs && rm -r logs)
