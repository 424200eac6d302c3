#!/usr/bin/env bash
# On the H200 (nvidia-h200), repo root, .gpu-bundle/ and .whl/ carried: issue #6 / #4 evidence.
# 1. kernel tests with real compilation; 2. decode cost of window + centering sinks;
# 3. the tiny dense / hybrid models through the real engine: bf16 vs int2 (window on by default),
#    eager and CUDA graphs, a small window (16) so int2 is read, and a broken variant (no rotation,
#    no window) that the comparison must flag.
set -u
source benchmarks/gpu_setup.sh
python3 -m pytest -q -p no:cacheprovider aphrodite_int2kv_tests/test_kernels.py ${KERNEL_TESTS:+-k "$KERNEL_TESTS"} > $OUT/gpu_kernel_tests_h200.log 2>&1
tail -1 $OUT/gpu_kernel_tests_h200.log
python3 benchmarks/decode_attention.py --window 128 --contexts 32768,131072 --batches 8,32 \
  --configs 32/4/128,16/2/256 --group-sizes 32 --iters 15 --out $OUT/decode_window_h200.json > $OUT/decode_window_h200.log 2>&1
grep -E "window|speedup" $OUT/decode_window_h200.log | tail -16
python3 .gpu-bundle/gpu/make_models.py /tmp/models >/dev/null 2>&1
# two or three engines at a time on the one GPU (0.3 of its memory each) to fit the call's time limit;
# their KV capacity lines are therefore not comparable (capacity: e2e_throughput.py, one engine at a time)
run() { local label=$1; shift; timeout 300 env "$@" > "$OUT/e2e_$label.log" 2>&1; echo "$label exit $?"; }
E=benchmarks/gpu/e2e_int2.py
run dense-bf16 python3 $E --label dense-bf16 --model /tmp/models/qwen3 --kv auto &
run dense-int2 python3 $E --label dense-int2 --model /tmp/models/qwen3 --kv int2 &
run dense-int2-graph python3 $E --label dense-int2-graph --model /tmp/models/qwen3 --kv int2 --graph &
wait
run dense-int2-w16-graph APHRODITE_INT2KV_RECENT_WINDOW=16 python3 $E --label dense-int2-w16-graph --model /tmp/models/qwen3 --kv int2 --graph &
run dense-broken APHRODITE_INT2KV_RECENT_WINDOW=0 APHRODITE_INT2KV_K_ROTATION=none APHRODITE_INT2KV_V_ROTATION=none python3 $E --label dense-broken --model /tmp/models/qwen3 --kv int2 &
wait
run hybrid-bf16 python3 $E --label hybrid-bf16 --model /tmp/models/qwen35 --kv auto --lm-only &
run hybrid-int2 python3 $E --label hybrid-int2 --model /tmp/models/qwen35 --kv int2 --lm-only &
run hybrid-int2-w16-graph APHRODITE_INT2KV_RECENT_WINDOW=16 python3 $E --label hybrid-int2-w16-graph --model /tmp/models/qwen35 --kv int2 --lm-only --graph &
wait
python3 benchmarks/gpu/summarize_e2e.py $OUT dense-bf16 dense-bf16 dense-int2 dense-int2-graph \
  dense-int2-w16-graph dense-broken hybrid-bf16=hybrid-bf16 hybrid-int2=hybrid-bf16 hybrid-int2-w16-graph=hybrid-bf16 > $OUT/summary.json
python3 -c "import json; d=json.load(open('$OUT/summary.json')); [print(c['run'], c['mean_agreement'], c['max_logprob_diff']) for c in d['comparisons']]; print(d['kv_tokens'])"
grep -h "int2 KV cache active" $OUT/e2e_*.log | head -3 | cut -c1-400

# (the device tool brings back at most a few files: pack the logs)
(cd $OUT && tar czf e2e_logs.tgz e2e_*.log && rm e2e_*.log)
