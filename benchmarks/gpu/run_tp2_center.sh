#!/usr/bin/env bash
# On the two-GPU H200 machine, from the repo root (.gpu-bundle carried): int2 with tensor
# parallel 2 on the tiny dense model, with a K rotation file holding one rotation and one K offset
# per KV head (each rank must pick its own head: int2/rotation.py:select_local_heads).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1
python3 -c "import torch; print('gpus', torch.cuda.device_count())"
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
print("k rotation file: layers", L, "kv heads", H, "head_dim", D)
PY
APHRODITE_INT2KV_K_ROTATION=/tmp/k_rot.pt timeout 240 python3 benchmarks/gpu/e2e_int2.py --model /tmp/models/qwen3 \
    --kv int2 --tp 2 --label tp2-int2-center > $OUT/tp2_int2_center.log 2>&1
echo "exit $?"
grep -E "int2 KV cache active|KV cache size|E2E_RESULT|Error|error" $OUT/tp2_int2_center.log | grep -v Warning | cut -c1-400 | tail -8
