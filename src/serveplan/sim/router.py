"""Routers: which instance of a role receives the next request.

* ``round_robin`` (default): request ``k`` of the role goes to instance ``k mod N``; it does
  not look at the instances, so the fleet can be simulated instance by instance.
* ``least_outstanding``: the instance with the fewest assigned-but-unfinished requests at the
  arrival time (ties: lowest index). Instances are advanced to the arrival time first; a step in
  progress at that time is counted as finished (its completions are known a step early).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from serveplan.errors import SpecError

ROUTERS = ("round_robin", "least_outstanding")


class _Routable(Protocol):
    @property
    def outstanding(self) -> int: ...


def check_router(name: str) -> str:
    if name not in ROUTERS:
        raise SpecError(f"router={name!r}; expected one of: {', '.join(ROUTERS)}")
    return name


def least_outstanding(instances: Sequence[_Routable]) -> int:
    best, best_n = 0, instances[0].outstanding
    for i in range(1, len(instances)):
        n = instances[i].outstanding
        if n < best_n:
            best, best_n = i, n
    return best
