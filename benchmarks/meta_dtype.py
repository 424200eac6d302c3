#!/usr/bin/env python3
"""Which dtype for the per-group scale and zero? Reconstruction error of int2 (Hadamard-rotated,
uniform min/max) with scale/zero kept in fp32, fp16 or bf16, on K-like data (Gaussian with a few
large outlier channels and a per-channel offset), per group size. CPU, seconds.

  python benchmarks/meta_dtype.py [--out benchmarks/results/meta_dtype.json]
"""

import argparse
import json
import sys

import torch

sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
from aphrodite_int2kv.int2.rotation import hadamard  # noqa: E402


def fq(x, G, meta_dtype):
    g = x.reshape(*x.shape[:-1], -1, G)
    lo, hi = g.amin(-1), g.amax(-1)
    scale, zero = ((hi - lo) / 3).to(meta_dtype).float(), lo.to(meta_dtype).float()
    inv = torch.where(scale > 0, 1 / scale, torch.zeros_like(scale))
    c = torch.floor((g - zero[..., None]) * inv[..., None] + 0.5).clamp(0, 3)
    return (c * scale[..., None] + zero[..., None]).reshape(x.shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.manual_seed(0)
    D, N = 128, 16384
    k = torch.randn(N, D)
    ch = torch.randperm(D)[:6]
    k[:, ch] = k[:, ch] * 10 + 20            # outlier channels with an offset, as post-RoPE K has
    H = hadamard(D)
    rows = []
    for G in (32, 64, 128):
        base = None
        for name, dt in (("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
            kr = k @ H
            deq = fq(kr, G, dt)
            err = ((deq @ H.T - k).pow(2).mean() / k.pow(2).mean()).item()
            # the part of the error the metadata rounding adds (vs exact fp32 metadata)
            extra = ((deq - fq(kr, G, torch.float32)).pow(2).mean() / kr.pow(2).mean()).item()
            base = base or err
            rows.append({"group_size": G, "meta_dtype": name, "rel_mse": err, "vs_fp32": err / base,
                         "meta_rounding_rel_mse": extra})
            print(f"G={G:>3} {name}: relative MSE {err:.6f} ({err / base:.5f} x fp32), "
                  f"added by metadata rounding {extra:.2e}")
    if a.out:
        json.dump(rows, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
