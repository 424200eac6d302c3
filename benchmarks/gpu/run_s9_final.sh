#!/usr/bin/env bash
# H200 call (nvidia-h200), session 9, the final kernels (one page per tile, metadata in one load)
# with table_ahead for the folded tile at every head_dim (call 3 measured it 1.14-1.18x faster at
# 256 too): 1) the launch-config and one-page kernel tests with real compilation (all 117 passed in
# call 3 on the same kernel code); 2) the decode table vs bf16 (4K-128K, batch 1-64); 3) window 128
# + 16 sinks over it at 32K (issue #6's <= 10 %); 4) dense8b, 32K, C = 11 decode throughput.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
mkdir -p $OUT/logs
run() { local t=$1 label=$2; shift 2; if [ $((585 - SECONDS)) -lt $t ]; then t=$((585 - SECONDS)); fi
        [ $t -gt 20 ] || { echo "$label skipped (time)"; return; }
        timeout $t env "$@" > "$OUT/logs/$label.log" 2>&1; echo "$label exit $? at ${SECONDS}s"; }
run 90 kernel_tests python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_kernels.py -k "launch or one_page or table_ahead"
tail -1 $OUT/logs/kernel_tests.log
run 200 decode_table python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 4096,32768,131072 \
  --batches 1,8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 --out $OUT/decode_attention_final_h200.json
grep -h "S=" $OUT/logs/decode_table.log | cut -c1-150
run 60 decode_window python3 benchmarks/decode_attention.py --graph --window 128 --sinks 16 --window-block-size 20 \
  --block-size 128 --contexts 32768 --batches 8,32 --configs 32/4/128,32/8/128,16/2/256 --group-sizes 64 --iters 30 \
  --max-bf16-bytes 0 --out $OUT/decode_window_final_h200.json
grep -h "window 128" $OUT/logs/decode_window.log | cut -c1-150
run 200 e2e_dense8b python3 benchmarks/gpu/e2e_throughput.py --model-config dense8b \
  --kv int2 --context 32768 --concurrency 11 --out $OUT/e2e_dense8b_int2_s9.jsonl
grep -h "^ROW" $OUT/logs/e2e_dense8b.log | cut -c1-400
(cd $OUT && tar czf final_logs.tgz logs && rm -r logs)
