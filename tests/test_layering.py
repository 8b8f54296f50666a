"""Guards: layers import only rightward, and the public API is what ``__all__`` says."""

from __future__ import annotations

import ast
import pathlib

import serveplan

# calibrate (profiling, fitting, sampling profiles) needs only the estimator; validate runs the
# simulator and the optimizer (comparison with served runs, bands of simulations and goodput)
# commands are the library's commands (options in, result out); ui and cli are the two front ends over
# them: the CLI may start the page (serveplan ui), the page never imports the CLI
ORDER = ["lazy", "errors", "units", "specs", "ops", "estimator", "calibrate", "sim", "optimize", "offload", "validate",
         "report", "commands", "ui", "cli"]
RANK = {name: i for i, name in enumerate(ORDER)}
# optimize and offload are siblings
SIBLINGS = {("optimize", "offload"), ("offload", "optimize")}
SRC = pathlib.Path(serveplan.__file__).parent


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "serveplan":
        return None
    if len(parts) < 2:   # the package root re-exports the public API: importing it imports its top layer
        return _root_layer()
    head = parts[1]
    if head == "metrics":
        return "sim"
    return head if head in RANK else None


def _imported_layers(tree: ast.AST) -> list[str]:
    names = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    return [layer for name in names if name != "serveplan" and (layer := _layer(name)) is not None]


def _root_layer() -> str:
    """The highest layer ``serveplan/__init__.py`` imports (``from serveplan import X`` depends on it)."""
    return max(_imported_layers(ast.parse((SRC / "__init__.py").read_text())), key=RANK.__getitem__)


def test_lower_layers_never_import_higher_ones():
    bad = []
    for py in SRC.rglob("*.py"):
        rel = py.relative_to(SRC)
        if rel.parts[0] in ("__init__.py", "__main__.py"):
            continue
        own = rel.parts[0].removesuffix(".py")
        own = "sim" if own == "metrics" else own
        if own not in RANK:
            continue
        for node in ast.walk(ast.parse(py.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                target = _layer(node.module)
            elif isinstance(node, ast.Import):
                target = next((_layer(a.name) for a in node.names if _layer(a.name)), None)
            else:
                continue
            if target and RANK[target] > RANK[own] and (own, target) not in SIBLINGS:
                bad.append(f"{rel}: imports {target}")
    assert not bad, bad


def test_every_package_and_top_level_module_has_a_layer():
    """A new package or top-level module must be placed in ORDER, or the tests above would not see it."""
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    modules = {p.stem for p in SRC.glob("*.py")} - {"__init__", "__main__"}
    assert packages | modules <= set(ORDER), sorted((packages | modules) - set(ORDER))


def test_importing_the_package_root_counts_as_importing_its_top_layer():
    """``from serveplan import X`` pulls in every layer the root re-exports (up to ``commands``): a
    lower layer doing it would hide an upward import from the check above."""
    assert _root_layer() == "commands"
    assert _layer("serveplan") == "commands" and _layer("serveplan.sim.fleet") == "sim"


def test_the_page_never_imports_the_cli():
    bad = []
    for py in (SRC / "ui").rglob("*.py"):
        for node in ast.walk(ast.parse(py.read_text())):
            mods = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            bad += [f"{py.relative_to(SRC)}: {m}" for m in mods if m.startswith("serveplan.cli")]
    assert not bad, bad


def test_library_layers_import_other_layers_at_module_level():
    """An import of another layer inside a function hides a dependency from the order above; only
    the CLI defers imports (start-up time). Within a layer a function may import a module that
    pulls in an optional library (calibrate's torch modules)."""
    bad = []
    for py in SRC.rglob("*.py"):
        rel = py.relative_to(SRC)
        own = _layer("serveplan." + ".".join(rel.with_suffix("").parts))
        if rel.parts[0] == "cli":
            continue
        for fn in ast.walk(ast.parse(py.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                         [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                bad += [f"{rel}:{node.lineno}: {n} inside {fn.name}" for n in names if _layer(n) not in (None, own)]
    assert not bad, bad


def test_all_matches_public_names():
    public = {n for n in dir(serveplan) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(serveplan, n)).__name__ == "module"}
    assert set(serveplan.__all__) == public - modules


def test_test_module_basenames_are_unique():
    """pytest's default import mode puts each test folder on sys.path: two test files with the same
    name in different folders collide at collection."""
    tests = pathlib.Path(__file__).parent
    names = [p.name for p in tests.rglob("test_*.py")]
    dupes = sorted({n for n in names if names.count(n) > 1})
    assert not dupes, dupes


def test_each_lazy_table_is_its_packages_type_checking_imports():
    """A lazily re-exporting ``__init__`` (serveplan.lazy) lists each name twice: in its
    ``TYPE_CHECKING`` imports (for type checkers) and in its table (at run time); they must agree."""
    for init in [SRC / "__init__.py", *SRC.glob("*/__init__.py")]:
        tree = ast.parse(init.read_text())
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "_lazy_exports"]
        if not calls:
            continue
        table = {mod: set(names) for mod, names in ast.literal_eval(calls[0].args[1]).items()}
        guarded = [n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)]
        imported: dict[str, set[str]] = {}
        for node in guarded[0].body:
            assert isinstance(node, ast.ImportFrom) and node.module
            imported.setdefault(node.module, set()).update(a.asname or a.name for a in node.names)
        assert table == imported, init
