"""LoRA device lookup for EXL3-quantized base layers.

Why:
    ``_get_lora_device`` finds a base layer's device from ``weight`` / ``qweight`` / ... and
    raises ``ValueError: Unsupported base layer: MergedColumnParallelLinear(...)`` for EXL3
    layers, which carry ``suh, svh, trellis, mcg, mul1`` and no ``weight``. Any EXL3 model with
    ``enable_lora=True`` fails while the LoRA wrappers are built (aphrodite-engine 0.21.0).
How:
    Wrap the function: if upstream raises ``ValueError`` and the layer has ``trellis``, return
    the current CUDA device, as upstream's fix does. The function is imported *by name* into
    ``lora.layers.base_linear`` and ``lora.layers.fused_moe`` too; every binding that still
    holds the original function is rebound. Need is decided by calling upstream's function on a
    probe layer with only ``trellis``, inside a sandbox whose ``torch`` touches no CUDA.
Upstream PR:
    dphnAI/sonar#1712, merge commit da0ad4d84 (+ 528bf7ad5), first released in 0.22.0.
Remove when:
    aphrodite-engine 0.21.x is no longer supported (a no-op from 0.22.0 on, by the probe).
"""

from __future__ import annotations

import functools
import sys
import types

from aphrodite_int2kv.patches import APPLIED, FAILED, UNAVAILABLE, UPSTREAM, Outcome, is_ours, mark

NAME = "lora-device-exl3"
PR = "dphnAI/sonar#1712"

BINDING_MODULES = (
    "aphrodite.lora.layers.utils",
    "aphrodite.lora.layers.base_linear",
    "aphrodite.lora.layers.fused_moe",
)


class _NoCudaTorch(types.ModuleType):
    """``torch`` as seen by the probe: real torch, except that device queries answer 0
    without creating a CUDA context (register() runs in processes that must not)."""

    def __init__(self, real):
        super().__init__("torch")
        self._real = real
        self.accelerator = types.SimpleNamespace(current_device_index=lambda: 0)
        self.cuda = types.SimpleNamespace(current_device=lambda: 0)
        self.device = lambda *args, **kwargs: ("device", args)

    def __getattr__(self, name):
        return getattr(self._real, name)


def _probe_handles_exl3(func) -> bool:
    """True if ``func`` already returns a device for a layer that only has ``trellis``."""
    import torch

    sandboxed = types.FunctionType(
        func.__code__, {**func.__globals__, "torch": _NoCudaTorch(torch)},
        func.__name__, func.__defaults__, func.__closure__)
    probe = torch.nn.Module()
    probe.trellis = None
    try:
        sandboxed(probe)
    except ValueError:
        return False
    return True


def cuda_device_of_current_process():
    import torch

    return torch.device("cuda", torch.accelerator.current_device_index())


def apply() -> Outcome:
    try:
        import aphrodite.lora.layers.utils as lora_utils  # also imports base_linear, fused_moe
    except ImportError as exc:
        return Outcome(NAME, UNAVAILABLE, f"cannot import aphrodite.lora.layers: {exc}", PR)

    current = lora_utils._get_lora_device
    if is_ours(current):
        return Outcome(NAME, APPLIED, "already patched in this process", PR)
    if _probe_handles_exl3(current):
        return Outcome(NAME, UPSTREAM, "already upstream", PR)

    orig = current

    @functools.wraps(orig)
    def _get_lora_device(base_layer):
        try:
            return orig(base_layer)
        except ValueError:
            if hasattr(base_layer, "trellis"):  # EXL3 tensors live on the worker's device
                return cuda_device_of_current_process()
            raise

    mark(_get_lora_device)
    rebound = []
    for modname in BINDING_MODULES:
        mod = sys.modules.get(modname)
        if mod is not None and getattr(mod, "_get_lora_device", None) is orig:
            mod._get_lora_device = _get_lora_device
            rebound.append(modname.rsplit(".", 1)[-1])
    stale = [m for m in BINDING_MODULES
             if getattr(sys.modules.get(m), "_get_lora_device", _get_lora_device) is not _get_lora_device]
    if stale:
        return Outcome(NAME, FAILED, "bindings not rebound: " + ", ".join(stale), PR)
    return Outcome(NAME, APPLIED, "EXL3 -> current CUDA device; rebound " + ", ".join(rebound),
                   PR)
