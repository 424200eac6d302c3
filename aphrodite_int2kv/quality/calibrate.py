"""Per-layer, per-KV-head rotations and K offsets fitted on calibration text (SmolLM2 forward).

K: eigenvectors of the query covariance (the directions in which q.k errors are weighted), V:
eigenvectors of the value covariance. The eigen-directions are dealt round-robin to the
quantization groups (so every group holds a similar share of the variance, hence similar scales),
then mixed inside each group by a Hadamard of the group size (so no single direction owns a group's
range). K offset: the per-channel mean of post-RoPE K (softmax ignores it; the quantizer no longer
spends its 4 levels on it).
"""

from __future__ import annotations

import torch

from aphrodite_int2kv.int2.rotation import hadamard


def interleaved_rotation(eigvecs: torch.Tensor, group_size: int) -> torch.Tensor:
    """eigvecs [D, D] (columns by decreasing eigenvalue) -> orthogonal R [D, D]."""
    D = eigvecs.shape[0]
    ng = D // group_size
    # column j of the result's group g, slot s <- eigen-direction s * ng + g
    order = torch.tensor([s * ng + g for g in range(ng) for s in range(group_size)])
    return eigvecs[:, order] @ torch.block_diag(*[hadamard(group_size)] * ng)


@torch.no_grad()
def collect(cfg, sd, windows):
    """Post-RoPE K, V [N, Hkv, D] and Q [N, Hq, D] per layer over the calibration windows."""
    from aphrodite_int2kv.int2.reference import attend
    from aphrodite_int2kv.quality import smollm

    stats = {i: {"q": [], "k": [], "v": []} for i in range(cfg.n_layers)}

    def hook(layer, q, k, v):
        stats[layer]["q"].append(q)
        stats[layer]["k"].append(k)
        stats[layer]["v"].append(v)
        return attend(q, k, v, cfg.head_dim ** -0.5, causal_offset=0)

    for w in windows:
        smollm.forward(cfg, sd, w, hook)
    return {i: {n: torch.cat(x) for n, x in s.items()} for i, s in stats.items()}


def fit(stats, n_kv_heads: int, group_size: int):
    """-> (k_layers, v_layers) for save_rotation_file: {layer: rotation [H, D, D]} and extras."""
    k_rot, v_rot, extra = {}, {}, {}
    for i, s in stats.items():
        q, k, v = s["q"], s["k"], s["v"]
        ratio = q.shape[1] // n_kv_heads
        rk, rv, offs = [], [], []
        for h in range(n_kv_heads):
            qh = q[:, h * ratio:(h + 1) * ratio].reshape(-1, q.shape[-1]).double()
            _, uq = torch.linalg.eigh(qh.T @ qh / len(qh))
            vh = v[:, h].double()
            vc = vh - vh.mean(0)
            _, uv = torch.linalg.eigh(vc.T @ vc / len(vc))
            rk.append(interleaved_rotation(uq.flip(-1).float(), group_size))
            rv.append(interleaved_rotation(uv.flip(-1).float(), group_size))
            offs.append(k[:, h].mean(0))
        k_rot[i], v_rot[i] = torch.stack(rk), torch.stack(rv)
        extra[i] = {"k_offset": torch.stack(offs)}
    return k_rot, v_rot, extra
