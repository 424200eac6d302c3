"""Rotations applied before quantization: the built-in normalized Hadamard and user files.

K is stored as K @ R_k and Q is multiplied by R_k at attention time, so Q K^T is unchanged
(R orthogonal). V is stored as V @ R_v and the attention output is multiplied by R_v^T.

Built-in: the normalized Sylvester Hadamard H_D / sqrt(D) when D is a power of two. For other
head_dims the rule is block-diagonal: Hadamard blocks of the largest power of two b that divides
D (b >= 16 required, else a clear error).

Files (``torch.save``; loaded with ``weights_only=True``)::

    {"layers": {layer_index: {"rotation": T}}}      T: [D, D] or [num_kv_heads, D, D], fp32

one file for K and one for V. Each is validated on load: shape, finite values, orthogonality
(max |T^T T - I| <= ORTHO_TOL) and coverage of every attention layer; errors name the file, the
layer and the problem. (Offsets for K centering, when present, live next to "rotation" as
"k_offset"; see docs/format.md.)
"""

from __future__ import annotations

import functools
import os

import torch

from aphrodite_int2kv.int2.format import Int2ConfigError

ORTHO_TOL = 1e-3
MIN_HADAMARD_BLOCK = 16


@functools.lru_cache(maxsize=16)
def _sylvester(n: int) -> torch.Tensor:
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / n ** 0.5


def hadamard(dim: int) -> torch.Tensor:
    """Orthogonal [dim, dim] fp32: Sylvester Hadamard, block-diagonal if dim is not a power of 2."""
    block = dim & -dim  # largest power of two dividing dim
    if block < MIN_HADAMARD_BLOCK:
        raise Int2ConfigError(
            f"int2 KV: head_dim {dim} has no power-of-two factor >= {MIN_HADAMARD_BLOCK}, so no "
            f"built-in Hadamard rotation exists for it; supply a rotation file "
            f"(aphrodite-int2kv make-rotation / calibrate)")
    return torch.block_diag(*[_sylvester(block)] * (dim // block)).clone()


def orthogonality_error(t: torch.Tensor) -> float:
    t = t.double()
    eye = torch.eye(t.shape[-1], dtype=torch.float64)
    return (t.transpose(-1, -2) @ t - eye).abs().amax().item()


def validate_rotation(t, head_dim: int, num_kv_heads: int | None, where: str) -> torch.Tensor:
    """Return T as fp32 [H or 1, D, D]; raise Int2ConfigError naming `where` otherwise."""
    if not isinstance(t, torch.Tensor):
        raise Int2ConfigError(f"{where}: rotation is a {type(t).__name__}, expected a torch tensor")
    if t.dim() == 2:
        t = t[None]
    ok_heads = t.shape[0] == 1 or num_kv_heads is None or t.shape[0] == num_kv_heads
    if t.dim() != 3 or t.shape[-2:] != (head_dim, head_dim) or not ok_heads:
        want = f"[{head_dim}, {head_dim}]" + (f" or [{num_kv_heads}, {head_dim}, {head_dim}]"
                                             if num_kv_heads else "")
        raise Int2ConfigError(f"{where}: rotation has shape {list(t.shape)}, expected {want}")
    if not torch.isfinite(t).all():
        raise Int2ConfigError(f"{where}: rotation contains NaN or Inf")
    err = orthogonality_error(t)
    if err > ORTHO_TOL:
        raise Int2ConfigError(f"{where}: rotation is not orthogonal (max |T^T T - I| = {err:.3g} > "
                              f"{ORTHO_TOL}); regenerate it with aphrodite-int2kv make-rotation")
    return t.float().contiguous()


def select_local_heads(t: torch.Tensor, local_heads: int, tp_rank: int, tp_size: int) -> torch.Tensor:
    """Per-KV-head tensors in a file cover the model's KV heads; under tensor parallelism a rank
    holds `local_heads` of them: heads [rank*local, (rank+1)*local), or, when there are fewer KV
    heads than ranks (each replicated), head rank * heads // tp_size. Shared ([1, ...]) tensors
    and tensors that already have `local_heads` heads pass unchanged."""
    n = t.shape[0]
    if tp_size <= 1 or n in (1, local_heads):
        return t
    if n == local_heads * tp_size:
        return t[tp_rank * local_heads:(tp_rank + 1) * local_heads]
    if local_heads == 1 and n < tp_size and tp_size % n == 0:
        h = tp_rank * n // tp_size
        return t[h:h + 1]
    return t   # validation below names the mismatch


def _read_rotation_table(path: str) -> dict:
    if not os.path.isfile(path):
        raise Int2ConfigError(f"int2 KV rotation file {path!r} does not exist")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise Int2ConfigError(f"int2 KV rotation file {path!r} cannot be read as a torch.save "
                              f"file: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("layers"), dict):
        raise Int2ConfigError(f"int2 KV rotation file {path!r}: expected "
                              f"{{'layers': {{index: {{'rotation': T}}}}}}")
    try:
        return {int(k): v for k, v in data["layers"].items()}
    except (TypeError, ValueError):
        raise Int2ConfigError(f"int2 KV rotation file {path!r}: 'layers' must be keyed by layer index") from None


def _entry(path, i, entry, head_dim, num_kv_heads, tp) -> dict[str, torch.Tensor]:
    where = f"int2 KV rotation file {path!r}, layer {i}"
    if not isinstance(entry, dict) or "rotation" not in entry:
        raise Int2ConfigError(f"{where}: expected a dict with key 'rotation'")
    rot = entry["rotation"]
    if isinstance(rot, torch.Tensor) and rot.dim() == 3 and num_kv_heads:
        rot = select_local_heads(rot, num_kv_heads, *tp)
    out = {"rotation": validate_rotation(rot, head_dim, num_kv_heads, where)}
    if "k_offset" in entry:
        off = entry["k_offset"]
        if not isinstance(off, torch.Tensor) or off.shape[-1] != head_dim or not torch.isfinite(off).all():
            raise Int2ConfigError(f"{where}: k_offset must be a finite tensor [..., {head_dim}]")
        off = off.float().reshape(-1, head_dim)
        out["k_offset"] = select_local_heads(off, num_kv_heads, *tp) if num_kv_heads else off
    return out


def check_rotation_file(path: str) -> None:
    """Validate every entry of a rotation file as the engine will, at the head_dim its own
    matrices have (start-up and `doctor` run this before any layer is built)."""
    table = _read_rotation_table(path)
    if not table:
        raise Int2ConfigError(f"int2 KV rotation file {path!r} has no layers")
    for i, entry in table.items():
        rot = entry.get("rotation") if isinstance(entry, dict) else None
        dim = rot.shape[-1] if isinstance(rot, torch.Tensor) and rot.dim() else 0
        _entry(path, i, entry, dim, None, (0, 1))


def load_rotation_file(path: str, head_dim: int, num_kv_heads: int | None,
                       layers: list[int], tp: tuple[int, int] = (0, 1)) -> dict[int, dict[str, torch.Tensor]]:
    """Load and validate a rotation file for the given attention layer indices; `tp` =
    (rank, world size) picks this rank's KV heads from per-head tensors."""
    table = _read_rotation_table(path)
    missing = [i for i in layers if i not in table]
    if missing:
        raise Int2ConfigError(f"int2 KV rotation file {path!r} has no entry for attention "
                              f"layer(s) {missing}; it covers {sorted(table)}")
    return {i: _entry(path, i, table[i], head_dim, num_kv_heads, tp) for i in layers}


def file_has_k_offsets(path: str) -> bool:
    """Whether a K rotation file carries 'k_offset' entries (the engine then centers K)."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
        return any(isinstance(e, dict) and "k_offset" in e for e in data["layers"].values())
    except Exception:
        return False


def save_rotation_file(path: str, per_layer: dict[int, torch.Tensor], extra: dict | None = None) -> None:
    layers = {int(i): {"rotation": t.float().contiguous()} for i, t in per_layer.items()}
    for i, more in (extra or {}).items():
        layers[int(i)].update(more)
    torch.save({"layers": layers}, path)
