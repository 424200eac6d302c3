"""What a GPU allows one kernel launch: multiprocessors, shared memory, registers, capability.

Launch planning (decode.py `decode_launch_config`, prefill.py `prefill_launch_config`) reads these
once per device instead of assuming the H200's. `PRESETS` holds the GPUs we plan for, by their
vendor's published limits; the ahead-of-time check (`aot.py`) compiles every kernel for each of
them and fails where a planned launch would not fit. No engine imports here.

APHRODITE_INT2KV_DEVICE_LIMITS=<preset> (e.g. ``rtx4090``) makes a real GPU plan as if it were that
one: the kernels then run in the smaller part's launches, which is how the fallback launches are
tested on a large GPU. Not meant for serving.
"""

from __future__ import annotations

import dataclasses
import functools
import os

ENV = "APHRODITE_INT2KV_DEVICE_LIMITS"


@dataclasses.dataclass(frozen=True)
class DeviceLimits:
    name: str
    capability: tuple[int, int]
    num_sms: int
    smem_per_block: int         # bytes one block may opt in to (cudaDevAttrMaxSharedMemoryPerBlockOptin)
    smem_per_sm: int            # bytes per multiprocessor
    regs_per_sm: int = 65536
    max_warps_per_sm: int = 64
    max_blocks_per_sm: int = 32

    @property
    def pdl(self) -> bool:
        """Programmatic dependent launches: only on Hopper, the one family they were measured on
        (the hardware has them from sm_90 on; Blackwell parts take the plain launch order)."""
        return self.capability[0] == 9

    @property
    def target(self) -> int:
        """Triton's GPUTarget arch number (90 for sm_90)."""
        return self.capability[0] * 10 + self.capability[1]

    def resident(self, regs_per_thread: int, num_warps: int, smem: int) -> int:
        """Blocks of one kernel that fit on a multiprocessor at once (the CUDA occupancy rules:
        registers are granted per warp in units of 256, each block reserves 1 KB of shared memory
        beside its own)."""
        regs_per_warp = -(-regs_per_thread * 32 // 256) * 256
        by_regs = self.regs_per_sm // max(1, regs_per_warp * num_warps)
        by_smem = self.smem_per_sm // (smem + 1024) if smem else self.max_blocks_per_sm
        by_warps = self.max_warps_per_sm // num_warps
        return max(1, min(by_regs, by_smem, by_warps, self.max_blocks_per_sm))


KB = 1024
# CUDA C Programming Guide, "Technical Specifications per Compute Capability"; SM counts of the
# named parts. smem_per_block is the opt-in maximum (what Triton's launches may use).
PRESETS: dict[str, DeviceLimits] = {p.name: p for p in (
    DeviceLimits("a100", (8, 0), 108, 163 * KB, 164 * KB, max_warps_per_sm=64, max_blocks_per_sm=32),
    DeviceLimits("rtx3090", (8, 6), 82, 99 * KB, 100 * KB, max_warps_per_sm=48, max_blocks_per_sm=16),
    DeviceLimits("rtx4090", (8, 9), 128, 99 * KB, 100 * KB, max_warps_per_sm=48, max_blocks_per_sm=24),
    DeviceLimits("h200", (9, 0), 132, 227 * KB, 228 * KB, max_warps_per_sm=64, max_blocks_per_sm=32),
    DeviceLimits("rtx5090", (12, 0), 170, 99 * KB, 100 * KB, max_warps_per_sm=48, max_blocks_per_sm=32),
    DeviceLimits("rtx5070", (12, 0), 48, 99 * KB, 100 * KB, max_warps_per_sm=48, max_blocks_per_sm=32),
)}
H200 = PRESETS["h200"]
# One preset per compile target the ahead-of-time check covers (sm_80, 86, 89, 90, 120).
TARGETS = ("a100", "rtx3090", "rtx4090", "h200", "rtx5090")


def preset(name: str) -> DeviceLimits:
    try:
        return PRESETS[name.strip().lower()]
    except KeyError:
        raise ValueError(f"{ENV}={name!r}: not a known GPU; use one of {', '.join(PRESETS)}") from None


@functools.lru_cache(maxsize=None)
def _read(index: int) -> DeviceLimits:
    import torch

    p = torch.cuda.get_device_properties(index)
    cap = (p.major, p.minor)
    # torch names these since 2.x; the fallbacks are the smallest of the presets' values
    smem_block = getattr(p, "shared_memory_per_block_optin", 0) or 99 * KB
    smem_sm = getattr(p, "shared_memory_per_multiprocessor", 0) or smem_block + KB
    regs = getattr(p, "regs_per_multiprocessor", 0) or 65536
    warps = getattr(p, "max_threads_per_multi_processor", 0) // 32 or 48
    blocks = 16 if cap in ((8, 6), (8, 7)) else 24 if cap == (8, 9) else 32
    return DeviceLimits(p.name, cap, p.multi_processor_count, smem_block, smem_sm, regs, warps, blocks)


def device_limits(device=None) -> DeviceLimits:
    """The limits of `device` (a torch device or index; read once per device), or of the preset
    named by APHRODITE_INT2KV_DEVICE_LIMITS. A CPU device (tests under the interpreter) plans as
    the H200 does, with no dependent launches."""
    forced = os.environ.get(ENV, "").strip()
    if forced:
        return preset(forced)
    import torch

    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "cuda":
            return dataclasses.replace(H200, name="cpu", capability=(0, 0))
        device = device.index
    return _read(torch.cuda.current_device() if device is None else int(device))
