"""In-memory patches of aphrodite-engine, one module per upstream change.

Each patch module exposes ``NAME`` (short id), ``PR`` (upstream pull request or ``None``) and
``apply() -> Outcome``. ``apply`` must be idempotent, touch no CUDA state, and decide by probing
the installed engine's behaviour (never by its version string) whether it is needed.

``apply_all`` runs every patch on its own: one failing patch is logged and recorded, and never
stops the others or the engine.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging

logger = logging.getLogger("aphrodite_int2kv")

# Outcome states
APPLIED = "applied"          # patched now, or already patched by an earlier register() call
UPSTREAM = "upstream"        # the installed engine already behaves correctly: nothing changed
FAILED = "failed"            # needed (or could not be decided) and could not be applied
UNAVAILABLE = "unavailable"  # the patched module does not exist in this engine build

# Marker set on every function we install, so a second register() never wraps twice.
SENTINEL = "__aphrodite_int2kv_patch__"

PATCH_MODULES = (
    "aphrodite_int2kv.patches.exl3_shard_ids",   # PR #1711
    "aphrodite_int2kv.patches.lora_device",      # PR #1712
    "aphrodite_int2kv.patches.int2_kv_cache",    # the int2 dtype (no upstream PR)
    "aphrodite_int2kv.patches.env_names",        # our settings known to the engine's env check
)


@dataclasses.dataclass(frozen=True)
class Outcome:
    name: str
    state: str
    detail: str = ""
    pr: str | None = None

    @property
    def ok(self) -> bool:
        return self.state != FAILED


def mark(fn):
    setattr(fn, SENTINEL, True)
    return fn


def is_ours(fn) -> bool:
    return bool(getattr(fn, SENTINEL, False))


def apply_all() -> list[Outcome]:
    outcomes = []
    for modname in PATCH_MODULES:
        mod = importlib.import_module(modname)
        try:
            out = mod.apply()
        except Exception as exc:  # one broken patch must not stop the engine for other users
            out = Outcome(mod.NAME, FAILED, f"{type(exc).__name__}: {exc}", mod.PR)
            logger.warning("aphrodite-int2kv: patch %s failed: %s", mod.NAME, out.detail)
        outcomes.append(out)
    return outcomes
