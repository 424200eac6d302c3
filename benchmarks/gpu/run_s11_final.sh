#!/usr/bin/env bash
# H200 call (nvidia-h200), session 11: the kernels and pages as shipped -- the folded tile with V as
# 16-bit words and P.V transposed (kernels/folded.py), pages heads first (int2/format.py
# pages_heads_first), 24 programs per multiprocessor at head_dim 128. 1) every kernel test and the
# engine-glue tests with real compilation; 2) the decode table vs bf16 (4K-128K, batch 1-64);
# 3) window 128 + 16 sinks over it at 32K.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
run() { local t=$1 label=$2; shift 2; if [ $((585 - SECONDS)) -lt $t ]; then t=$((585 - SECONDS)); fi
        [ $t -gt 20 ] || { echo "$label skipped (time)"; return; }
        timeout $t env "$@" > "$OUT/logs/$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
bash benchmarks/gpu/kernel_tests_sharded.sh $OUT 200; echo "kernel tests exit $?"
run 150 glue_tests python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_backend_cpu.py
tail -1 $OUT/logs/glue_tests.log; grep -h "^FAILED" $OUT/logs/glue_tests.log | cut -c1-200
run 220 decode_table python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
  --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --out $OUT/decode_attention_h200.json
grep -h "S=" $OUT/logs/decode_table.log | cut -c1-150
run 70 decode_window python3 benchmarks/decode_attention.py --graph --window 128 --sinks 16 --window-block-size 20 \
  --block-size 128 --contexts 32768 --batches 8,32 --configs 32/4/128,32/8/128,16/2/256 --group-sizes 64 --iters 30 \
  --max-bf16-bytes 0 --out $OUT/decode_window_h200.json
grep -h "window 128" $OUT/logs/decode_window.log | cut -c1-150
(cd $OUT && mv kernel_tests_shard_*.log logs/ && tar czf final_logs.tgz logs && rm -r logs)
