"""``aphrodite-int2kv doctor``: what is installed, whether aphrodite sees the plugin, and
what each patch did. Exit status 1 if a needed patch failed or the plugin is invisible."""

from __future__ import annotations

import importlib.metadata as md
import os

ENTRY_POINT_GROUP = "aphrodite.general_plugins"
ENTRY_POINT_VALUE = "aphrodite_int2kv:register"


def add_parser(sub):
    p = sub.add_parser("doctor", help="check the installation and the patches (CPU is fine)")
    p.set_defaults(func=run)


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "not installed"


def entry_point_status() -> tuple[bool, str]:
    eps = [ep for ep in md.entry_points(group=ENTRY_POINT_GROUP) if ep.value == ENTRY_POINT_VALUE]
    if not eps:
        return False, f"no '{ENTRY_POINT_GROUP}' entry point -> {ENTRY_POINT_VALUE}; reinstall the package"
    allow = os.environ.get("APHRODITE_PLUGINS")
    if allow is not None and eps[0].name not in [n.strip() for n in allow.split(",")]:
        return False, (f"APHRODITE_PLUGINS={allow!r} does not list '{eps[0].name}': aphrodite will "
                       f"not load the plugin; add it to the list")
    return True, f"visible as '{eps[0].name}'"


def engine_in_range(version: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(version)
    except InvalidVersion:
        return False
    return Version("0.21.0") <= v < Version("0.25")


def run(args) -> int:
    import aphrodite_int2kv
    from aphrodite_int2kv.patches import FAILED

    engine = _version("aphrodite-engine")
    rows = [
        ("aphrodite-int2kv", aphrodite_int2kv.__version__),
        ("aphrodite-engine", engine + ("" if engine_in_range(engine) else
                                       "  (outside the supported 0.21.0 - 0.24.x)")),
        ("torch", _version("torch")),
        ("triton", _version("triton")),
    ]
    visible, ep_detail = entry_point_status()
    rows.append(("entry point", ep_detail))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")

    print("\npatches:")
    outcomes = aphrodite_int2kv.register()
    labels = {"applied": "applied", "upstream": "not needed (upstream)",
              "failed": "FAILED", "unavailable": "not available in this build"}
    for o in outcomes:
        print(f"  {o.name:<24} {o.pr or '':<20} {labels.get(o.state, o.state):<24} {o.detail}")

    # the APHRODITE_INT2KV_* settings every engine process will read (validated as at start-up)
    from aphrodite_int2kv.engine.options import Int2Options
    from aphrodite_int2kv.int2.format import Int2ConfigError

    try:
        print("\nint2 options:", Int2Options.from_env().describe())
        options_ok = True
    except Int2ConfigError as exc:
        print("\nint2 options: INVALID:", exc)
        options_ok = False

    failed = [o for o in outcomes if o.state == FAILED]
    ok = visible and not failed and engine_in_range(engine) and options_ok
    print("\nstatus:", "OK" if ok else "PROBLEMS FOUND")
    return 0 if ok else 1
