"""The plugin's settings known to the engine's environment check.

Why:
    aphrodite checks every ``APHRODITE_*`` variable against its own table
    (``aphrodite.envs.environment_variables``) when engine arguments are built: an unknown name logs
    "Unknown Aphrodite environment variable detected", which tells a user that a valid int2
    setting is being ignored, and with ``--fail-on-environ-validation`` it stops start-up.
How:
    Add each ``APHRODITE_INT2KV_*`` name the plugin reads (``engine/options.py`` ``KNOWN``) to that
    table, with a getter that reads the variable. A misspelt name is still unknown to both: the
    engine warns as before, and the plugin's option check names the setting it was probably
    meant to be.
Upstream PR:
    None: the table is the engine's list of its own variables; plugins have no registry for
    theirs.
Remove when:
    the engine gives plugins a way to declare their variables, or stops checking the prefix.
"""

from __future__ import annotations

import os

from aphrodite_int2kv.patches import APPLIED, UNAVAILABLE, UPSTREAM, Outcome

NAME = "env-names"
PR = None


def apply() -> Outcome:
    from aphrodite_int2kv.engine.options import KNOWN, PREFIX

    try:
        from aphrodite import envs
    except ImportError as exc:
        return Outcome(NAME, UNAVAILABLE, f"aphrodite.envs: {exc}", PR)
    table = getattr(envs, "environment_variables", None)
    if not isinstance(table, dict):
        return Outcome(NAME, UNAVAILABLE, "aphrodite.envs has no environment_variables table", PR)
    missing = [PREFIX + n for n in KNOWN if PREFIX + n not in table]
    if not missing:
        return Outcome(NAME, UPSTREAM if not _ours(table) else APPLIED, "every int2 setting is known to the engine", PR)
    for name in missing:
        table[name] = _getter(name)
    return Outcome(NAME, APPLIED, f"{len(missing)} APHRODITE_INT2KV_* names added to the engine's table", PR)


def _getter(name):
    def get():
        return os.environ.get(name)

    get.__aphrodite_int2kv_patch__ = True
    return get


def _ours(table) -> bool:
    from aphrodite_int2kv.engine.options import KNOWN, PREFIX

    return any(getattr(table.get(PREFIX + n), "__aphrodite_int2kv_patch__", False) for n in KNOWN)
