"""Lazy re-exports for a package's ``__init__`` (PEP 562, module ``__getattr__`` and ``__dir__``).

A package re-exports its public names (``from serveplan.sim import simulate``) without importing
every submodule when it is itself imported: ``serveplan estimate`` then loads the estimator and
the catalog, not the simulator, the optimizer and the validation suite behind the other commands.
Each name is imported from its module on first use and cached in the package's namespace; a name
that is a submodule (``serveplan.sim`` after ``import serveplan``) is imported as such, as an
eager ``__init__`` made it reachable before. Type checkers read the same names from an
``if TYPE_CHECKING:`` block of real imports beside the table, so the API stays typed.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, modules: Mapping[str, Sequence[str]],
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` re-exporting ``modules[module]``'s names from each
    module (the table mirrors the package's ``TYPE_CHECKING`` imports, module by module)."""
    names = {name: module for module, exported in modules.items() for name in exported}

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module), name)
        elif not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}") is not None:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
