"""aphrodite-int2kv: a 2-bit KV cache and EXL3+LoRA fixes for aphrodite-engine, as a plugin.

aphrodite calls :func:`register` through the ``aphrodite.general_plugins`` entry point in every
engine process (API server, engine core, workers, model-inspection subprocess).
"""

from __future__ import annotations

import logging

__version__ = "0.1.0"

SUPPORTED_ENGINE = ">=0.21.0,<0.25"

logger = logging.getLogger("aphrodite_int2kv")

_last_outcomes = None


def register():
    """Apply the patches this engine needs. Idempotent; touches no CUDA state; never raises
    for a patch that fails (it is logged, and `aphrodite-int2kv doctor` reports it)."""
    global _last_outcomes
    from aphrodite_int2kv.patches import apply_all

    outcomes = apply_all()
    summary = ", ".join(f"{o.name}={o.state}" for o in outcomes)
    states = [(o.name, o.state) for o in outcomes]
    if states != _last_outcomes:  # one line per process, not one per call
        _log_info(f"aphrodite-int2kv {__version__}: {summary}")
    _last_outcomes = states
    return outcomes


def _log_info(msg: str) -> None:
    try:  # the engine's logger, so the line lands where users read engine start-up
        from aphrodite.logger import init_logger

        init_logger("aphrodite.int2kv").info(msg)  # under the engine's handler
    except Exception:
        logger.info(msg)
