#!/usr/bin/env bash
# H200 call (nvidia-h200), session 5: decode timings as CUDA-graph replays (the engine's decode
# mode; eager timing charged each extra launch its host cost): 1) window + sinks cost at 32K with
# G = 64 and the engine's pages (int2 128, window 20); 2) int2 G = 64 vs bf16 at 32K / 128K.
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
timeout 150 python3 benchmarks/decode_attention.py --graph --window 128 --window-block-size 20 --block-size 128 \
  --contexts 32768 --batches 8,32 --configs 32/4/128,32/8/128 --group-sizes 64 --iters 30 \
  --max-bf16-bytes 0 --out $OUT/decode_window_graph_h200.json > $OUT/decode_window_graph_h200.log 2>&1
echo "window exit $? at ${SECONDS}s"
grep -h "window 128\|S= \|capture failed" $OUT/decode_window_graph_h200.log | cut -c1-170 | head -12
left=$((330 - SECONDS))
timeout $left python3 benchmarks/decode_attention.py --graph --block-size 128 --contexts 32768,131072 \
  --batches 8,32,64 --configs 32/4/128,16/2/256 --group-sizes 64 --iters 20 \
  --out $OUT/decode_attention_graph_h200.json > $OUT/decode_attention_graph_h200.log 2>&1
echo "decode exit $? at ${SECONDS}s"
grep -h "S= \|capture failed" $OUT/decode_attention_graph_h200.log | cut -c1-200 | head -14
