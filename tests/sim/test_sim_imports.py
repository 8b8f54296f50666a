"""The simulator's modules import one another in one direction: no import circle (a lazy import
inside a function counts: it only hides the circle), and no module reads another's private names."""

from __future__ import annotations

import ast
import pathlib

import serveplan.sim

SIM = pathlib.Path(serveplan.sim.__file__).parent


def _module(py: pathlib.Path) -> str:
    parts = ("serveplan", "sim", *py.relative_to(SIM).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(py): py for py in SIM.rglob("*.py")}


def _runtime_imports(tree: ast.Module) -> list[ast.ImportFrom | ast.Import]:
    """Every import statement outside ``if TYPE_CHECKING:`` blocks (annotations only)."""
    out: list[ast.ImportFrom | ast.Import] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for sub in child.orelse:
                    visit(sub)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.append(child)
            visit(child)

    visit(tree)
    return out


def _edges(name: str, py: pathlib.Path) -> set[str]:
    """The simulator modules ``name`` imports when it runs (the ``serveplan.sim`` package itself
    left out: every submodule's import runs it first)."""
    deps = set()
    for node in _runtime_imports(ast.parse(py.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names]
        deps |= {t for t in targets if t in MODULES and t not in ("serveplan.sim", name)}
    return deps


def test_no_import_circle_in_the_simulator():
    graph = {name: _edges(name, py) for name, py in MODULES.items()}
    circles = []
    state: dict[str, int] = {}   # 1: on the current path, 2: done

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                circles.append(" -> ".join(path[path.index(dep):] + [dep]))
            elif dep not in state:
                walk(dep, path + [dep])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name, [name])
    assert not circles, circles


def test_no_simulator_module_imports_another_modules_private_names():
    bad = []
    for name, py in MODULES.items():
        for node in ast.walk(ast.parse(py.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("serveplan"):
                bad += [f"{name}: {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad, bad
