#!/usr/bin/env bash
# On the H200 machine, from the repo root: bf16 vs int2 on the tiny dense and hybrid models.
set -u
source benchmarks/gpu_setup.sh >/dev/null
python3 .gpu-bundle/gpu/make_models.py /tmp/models >/dev/null 2>&1
run() { local label=$1; shift; echo "=== $label"; timeout 300 python3 benchmarks/gpu/e2e_int2.py --label "$label" "$@" > "$OUT/e2e_$label.log" 2>&1; echo "exit $?";
        grep -E "int2|KV cache size|E2E_RESULT|Error|error" "$OUT/e2e_$label.log" | grep -v Warning | tail -8; }
run dense-bf16 --model /tmp/models/qwen3 --kv auto
run dense-int2 --model /tmp/models/qwen3 --kv int2
run dense-int2-graph --model /tmp/models/qwen3 --kv int2 --graph
run hybrid-int2 --model /tmp/models/qwen35 --kv int2 --lm-only
