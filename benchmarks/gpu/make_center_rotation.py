#!/usr/bin/env python3
"""K rotation file for the centering GPU runs: per layer, one rotation per KV head (Hadamard for head
0, random orthogonal for the others) and one K offset per KV head, for MODEL_DIR's config.

  python3 benchmarks/gpu/make_center_rotation.py MODEL_DIR OUT_FILE
"""
import json
import sys

import torch

from aphrodite_int2kv.int2.rotation import hadamard, save_rotation_file

model, out = sys.argv[1:3]
cfg = json.load(open(f"{model}/config.json"))
D, H, L = cfg["head_dim"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
g = torch.Generator().manual_seed(0)
rots = {i: torch.stack([hadamard(D)] + [torch.linalg.qr(torch.randn(D, D, generator=g))[0] for _ in range(H - 1)])
        for i in range(L)}
extra = {i: {"k_offset": 0.5 * torch.randn(H, D, generator=g)} for i in range(L)}
save_rotation_file(out, rots, extra)
print("k rotation file:", out, "layers", L, "kv heads", H, "head_dim", D)
