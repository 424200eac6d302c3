"""EXL3 shard ids for the LoRA-enabled Gated DeltaNet projection ``in_proj_qkv``.

Why:
    With ``enable_lora=True`` the Qwen3.5/3.6 GDN layer builds ``in_proj_qkv`` (q, k, v) apart
    from ``in_proj_z``, and ``qwen3_5.load_weights`` loads the checkpoint's fused q+k+v EXL3
    tensors under the single tuple shard id ``(0, 1, 2)`` (exllamav3 always quantizes that
    projection as one matrix). aphrodite 0.21.0's ``Exl3LinearMethod._shard_ids_for_layer``
    only knows ``in_proj_qkvz`` and answers ``[0, 1, 2]`` for it, so start-up fails with
    ``ValueError: Missing EXL3 tensors for ...in_proj_qkv: suh[0], suh[1], suh[2], ...``.
How:
    Wrap ``_shard_ids_for_layer`` so a multi-partition layer whose prefix ends with
    ``in_proj_qkv`` gets ``[(0, 1, 2)]``; every other prefix keeps upstream's answer. The
    staticmethod form (0.21-0.23) and the instance-method form (0.24) are both handled. Need is
    decided by calling upstream's function on a probe layer, not by the version string.
Upstream PR:
    dphnAI/sonar#1711, merge commit 9cb097cb5, first released in aphrodite-engine 0.22.0.
Remove when:
    aphrodite-engine 0.21.x is no longer supported (the probe already makes this a no-op on
    0.22.0 and later).
"""

from __future__ import annotations

import functools
import types

from aphrodite_int2kv.patches import APPLIED, FAILED, UNAVAILABLE, UPSTREAM, Outcome, is_ours, mark

NAME = "exl3-gdn-in-proj-qkv"
PR = "dphnAI/sonar#1711"

FUSED_QKV = [(0, 1, 2)]
PROBE_PREFIX = "model.layers.0.linear_attn.in_proj_qkv"
PROBE_PARTITIONS = [128, 128, 256]


class _ProbeLayer:
    prefix = PROBE_PREFIX


class _ProbeQuantConfig:
    """Stands in for ``self.quant_config`` of the 0.24 instance method: no merged-prefix
    checkpoint entries, so upstream's ``_is_exl3_prefix`` early return does not fire."""

    def _is_exl3_prefix(self, prefix):  # noqa: D401 - engine API name
        return False


def _upstream_answer(raw) -> list:
    """What the installed ``_shard_ids_for_layer`` returns for the LoRA GDN layer."""
    if isinstance(raw, staticmethod):
        return raw.__func__(_ProbeLayer(), list(PROBE_PARTITIONS))
    fake_self = types.SimpleNamespace(quant_config=_ProbeQuantConfig())
    return raw(fake_self, _ProbeLayer(), list(PROBE_PARTITIONS))


def _is_lora_gdn_qkv(layer, output_partition_sizes) -> bool:
    return len(output_partition_sizes) > 1 and getattr(layer, "prefix", "").endswith("in_proj_qkv")


def _wrap(raw):
    if isinstance(raw, staticmethod):
        orig = raw.__func__

        @functools.wraps(orig)
        def _shard_ids_for_layer(layer, output_partition_sizes):
            if _is_lora_gdn_qkv(layer, output_partition_sizes):
                return list(FUSED_QKV)
            return orig(layer, output_partition_sizes)

        return staticmethod(mark(_shard_ids_for_layer))

    orig = raw

    @functools.wraps(orig)
    def _shard_ids_for_layer(self, layer, output_partition_sizes):
        if _is_lora_gdn_qkv(layer, output_partition_sizes):
            return list(FUSED_QKV)
        return orig(self, layer, output_partition_sizes)

    return mark(_shard_ids_for_layer)


def apply() -> Outcome:
    try:
        from aphrodite.model_executor.layers.quantization.exl3 import Exl3LinearMethod
    except ImportError as exc:
        return Outcome(NAME, UNAVAILABLE, f"cannot import Exl3LinearMethod: {exc}", PR)

    raw = Exl3LinearMethod.__dict__.get("_shard_ids_for_layer")
    if raw is None:
        return Outcome(NAME, FAILED, "Exl3LinearMethod has no _shard_ids_for_layer", PR)
    func = raw.__func__ if isinstance(raw, staticmethod) else raw
    if is_ours(func):
        return Outcome(NAME, APPLIED, "already patched in this process", PR)
    if _upstream_answer(raw) == FUSED_QKV:
        return Outcome(NAME, UPSTREAM, "already upstream", PR)

    Exl3LinearMethod._shard_ids_for_layer = _wrap(raw)
    got = _upstream_answer(Exl3LinearMethod.__dict__["_shard_ids_for_layer"])
    if got != FUSED_QKV:  # the self-check guards against a wrapper that did not take effect
        Exl3LinearMethod._shard_ids_for_layer = raw
        return Outcome(NAME, FAILED, f"patched method still returns {got!r}", PR)
    form = "staticmethod" if isinstance(raw, staticmethod) else "instance method"
    return Outcome(NAME, APPLIED, f"in_proj_qkv -> [(0, 1, 2)] ({form})", PR)
