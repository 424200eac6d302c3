#!/usr/bin/env bash
# On the H200 (from the repo root, .gpu-bundle carried): kernel tests, the decode table, then the
# dense e2e throughput/capacity rows. Each step has its own time limit so partial results come back.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1; tail -2 $OUT/setup.log
timeout 120 python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_kernels.py 2>&1 | tail -3 | tee $OUT/gpu_kernel_tests.log
timeout ${DECODE_LIMIT:-200} python3 benchmarks/decode_attention.py --contexts ${CONTEXTS:-4096,32768,131072} \
    --batches ${BATCHES:-1,8,32,64} --configs 32/4/128,16/2/256 --group-sizes 32,64 --iters 15 \
    --out $OUT/decode_attention_h200.json > $OUT/decode_attention_h200.log 2>&1
grep -E "^Hq" $OUT/decode_attention_h200.log | tail -40
for kv in ${E2E_KVS:-int2 auto fp8}; do
  timeout ${E2E_LIMIT:-150} python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b --kv $kv \
      --context 32768 --concurrency ${CONC:-8} --out $OUT/e2e_throughput_h200.jsonl > $OUT/e2e_$kv.log 2>&1
  echo "e2e $kv exit $?"; grep -E "^\[|ROW|engine:|Error" $OUT/e2e_$kv.log | tail -6
done
