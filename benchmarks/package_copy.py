"""A renamed copy of this tree's `aphrodite_int2kv` package, for diagnostics that compile an edited
kernel beside the shipped one in one process (decode_floor.py, decode_timeline.py). decode_ab.py's
baselines are the same thing made from an earlier commit (its docstring's `git archive` recipe)."""
import importlib
import pathlib
import shutil
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def renamed_copy(name: str) -> pathlib.Path:
    """aphrodite_int2kv copied into a new temporary directory as package `name`, every
    `aphrodite_int2kv` in its sources renamed; returns the copy's directory (edit it, then
    import_copy)."""
    pkg = pathlib.Path(tempfile.mkdtemp(prefix=f"{name}_")) / name
    shutil.copytree(ROOT / "aphrodite_int2kv", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for f in pkg.rglob("*.py"):
        f.write_text(f.read_text().replace("aphrodite_int2kv", name))
    return pkg


def import_copy(pkg: pathlib.Path, module: str = "kernels.decode"):
    """Import `module` of the copy at pkg, replacing any earlier copy of that name imported in this
    process (the tests build two)."""
    name = pkg.name
    for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[loaded]
    if str(pkg.parent) not in sys.path:
        sys.path.insert(0, str(pkg.parent))
    return importlib.import_module(f"{name}.{module}")
