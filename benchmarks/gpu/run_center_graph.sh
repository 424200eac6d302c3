#!/usr/bin/env bash
# H200 call (nvidia-h200): the tiny dense model with K centering on (a K rotation file holding one
# rotation and one K offset per KV head), the recent window and CUDA graphs (issue #6's last
# generation mode not yet run).
set -u
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 .gpu-bundle/gpu/make_models.py /tmp/models > /dev/null 2>&1
python3 - <<'PY'
import json, torch
from aphrodite_int2kv.int2.rotation import hadamard, save_rotation_file
cfg = json.load(open("/tmp/models/qwen3/config.json"))
D, H, L = cfg["head_dim"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
g = torch.Generator().manual_seed(0)
rots = {i: torch.stack([hadamard(D)] + [torch.linalg.qr(torch.randn(D, D, generator=g))[0] for _ in range(H - 1)])
        for i in range(L)}
extra = {i: {"k_offset": 0.5 * torch.randn(H, D, generator=g)} for i in range(L)}
save_rotation_file("/tmp/k_rot.pt", rots, extra)
PY
APHRODITE_INT2KV_K_ROTATION=/tmp/k_rot.pt timeout 120 python3 benchmarks/gpu/e2e_int2.py --model /tmp/models/qwen3 \
    --kv int2 --graph --label dense-int2-center-graph > $OUT/e2e_dense-int2-center-graph.log 2>&1
echo "exit $? at ${SECONDS}s"
grep -h "int2 KV cache active\|KV cache size\|Error" $OUT/e2e_dense-int2-center-graph.log | cut -c1-300 | head -4
grep -c E2E_RESULT $OUT/e2e_dense-int2-center-graph.log
