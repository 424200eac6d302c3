"""The package's shape, read from its source (no imports run): no import cycles between its
modules, kernels that import nothing of the engine, and every patch documented as docs/design.md says."""

from __future__ import annotations

import ast
import pathlib

import aphrodite_int2kv

ROOT = pathlib.Path(aphrodite_int2kv.__file__).parent


def _module(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports, anywhere in its body (function-level imports too)."""
    mods = {_module(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            deps |= {t for t in targets if t in mods and t != name}
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle between modules (a package's __init__ imported by its own modules is not
    one: Python runs the package first), or None."""
    def edges(m):
        return {d for d in graph[m] if not m.startswith(d + ".")}

    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for d in sorted(edges(m)):
            if state.get(d) == "open":
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_no_import_cycle():
    assert find_cycle(import_graph()) is None


def test_the_cycle_check_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"p": set(), "p.x": {"p"}}) is None


def test_kernels_and_the_format_import_nothing_of_the_engine():
    for sub in ("kernels", "int2"):
        for path in (ROOT / sub).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                assert not any(n == "aphrodite" or n.startswith("aphrodite.") for n in names), path
                assert not any(n.startswith("aphrodite_int2kv.engine") or n.startswith("aphrodite_int2kv.patches")
                               for n in names), path


def test_every_patch_says_why_how_upstream_and_when_to_remove():
    for path in (ROOT / "patches").glob("*.py"):
        if path.name == "__init__.py":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        for head in ("Why:", "How", "Upstream PR:", "Remove when:"):
            assert head in doc, f"{path.name}: no '{head}' in its docstring"
