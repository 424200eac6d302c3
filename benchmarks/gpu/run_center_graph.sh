#!/usr/bin/env bash
# H200 call (nvidia-h200): the tiny dense model with K centering on (a K rotation file holding one
# rotation and one K offset per KV head), the recent window and CUDA graphs (issue #6's last
# generation mode not yet run).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
python3 benchmarks/gpu/make_center_rotation.py /tmp/models/qwen3 /tmp/k_rot.pt
APHRODITE_INT2KV_K_ROTATION=/tmp/k_rot.pt timeout 120 python3 benchmarks/gpu/e2e_int2.py --model /tmp/models/qwen3 \
    --kv int2 --graph --label dense-int2-center-graph > $OUT/e2e_dense-int2-center-graph.log 2>&1
echo "exit $? at ${SECONDS}s"
grep -h "int2 KV cache active\|KV cache size\|Error" $OUT/e2e_dense-int2-center-graph.log | cut -c1-300 | head -4
grep -c E2E_RESULT $OUT/e2e_dense-int2-center-graph.log
