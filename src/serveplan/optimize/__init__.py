"""Optimizer: goodput of every serving fleet within a device budget, ranked (BestServe §11).

Public API (the search over a space is :func:`serveplan.optimize.search.search`; it is not
re-exported here so that the ``search`` module stays reachable by its dotted name)::

    from serveplan.optimize import SearchSpace, GoodputSettings, max_goodput, search_many
"""

import typing

from serveplan.lazy import lazy_exports as _lazy_exports

if typing.TYPE_CHECKING:
    from serveplan.optimize.goodput import GoodputResult, GoodputSettings, GoodputStatus, capacity_bound, max_goodput
    from serveplan.optimize.search import SearchResult, pareto_front, search_many
    from serveplan.optimize.space import Pruned, SearchSpace, SpaceListing, enumerate_space

__getattr__, __dir__ = _lazy_exports(__name__, {
    "serveplan.optimize.goodput": ("GoodputResult", "GoodputSettings", "GoodputStatus", "capacity_bound",
        "max_goodput"),
    "serveplan.optimize.search": ("SearchResult", "pareto_front", "search_many"),
    "serveplan.optimize.space": ("Pruned", "SearchSpace", "SpaceListing", "enumerate_space"),
})

__all__ = [
    "GoodputResult", "GoodputSettings", "GoodputStatus", "Pruned", "SearchResult", "SearchSpace", "SpaceListing",
    "capacity_bound", "enumerate_space", "max_goodput", "pareto_front", "search_many",
]
