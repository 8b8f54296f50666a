"""Routers: which instance of a role receives the next request; registered by name.

* ``round_robin`` (default): request ``k`` of the role goes to instance ``k mod N``. It does not
  look at the instances (``reads_load = False``), so an open-loop stream can be routed all at
  once and the instances simulated one by one.
* ``least_outstanding``: the instance with the fewest assigned-but-unfinished requests at the
  arrival time (ties: lowest index). The instances are advanced to the arrival time first; a
  step in progress at that time is counted as finished (its completions are known a step early).

Adding a router: subclass :class:`Router`, decorate with ``@register_router("<name>")``, set
``reads_load`` (True when :meth:`Router.pick` reads instance state, so the fleet advances the
instances to the arrival time before asking) and implement :meth:`Router.pick`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol

from serveplan.errors import SpecError


class Routable(Protocol):
    """What a router may read of an instance."""

    @property
    def outstanding(self) -> int: ...


#: Registered routers by name.
ROUTERS: dict[str, type[Router]] = {}


def register_router(name: str) -> Callable[[type[Router]], type[Router]]:
    def deco(cls: type[Router]) -> type[Router]:
        ROUTERS[name] = cls
        cls.name = name
        return cls

    return deco


def check_router(name: str) -> str:
    """``name`` when it is registered, else :class:`SpecError` listing the options."""
    if name not in ROUTERS:
        raise SpecError(f"router={name!r}; expected one of: {', '.join(ROUTERS)}")
    return name


def get_router(name: str) -> type[Router]:
    return ROUTERS[check_router(name)]


class Router:
    """Routing policy of one role's instances (one object per role and run)."""

    name: ClassVar[str] = "base"
    #: whether :meth:`pick` reads instance state (the fleet then advances instances first)
    reads_load: ClassVar[bool] = False

    def pick(self, instances: Sequence[Routable]) -> int:  # pragma: no cover - abstract
        """Index of the instance that receives the next request."""
        raise NotImplementedError

    def picks(self, instances: Sequence[Routable], count: int) -> list[int]:
        """Indices for the next ``count`` requests at once (only for routers that do not read
        load, whose choices do not depend on the instances' progress)."""
        assert not self.reads_load, "a router that reads load picks one request at a time"
        return [self.pick(instances) for _ in range(count)]


@register_router("round_robin")
class RoundRobinRouter(Router):
    """Request ``k`` of the role to instance ``k mod N``."""

    def __init__(self) -> None:
        self._k = 0

    def pick(self, instances: Sequence[Routable]) -> int:
        i = self._k % len(instances)
        self._k += 1
        return i

    def picks(self, instances: Sequence[Routable], count: int) -> list[int]:
        n, k0 = len(instances), self._k
        self._k += count
        return [(k0 + j) % n for j in range(count)]


@register_router("least_outstanding")
class LeastOutstandingRouter(Router):
    """The instance with the fewest assigned-but-unfinished requests (ties: lowest index)."""

    reads_load = True

    def pick(self, instances: Sequence[Routable]) -> int:
        return least_outstanding(instances)


def least_outstanding(instances: Sequence[Routable]) -> int:
    best, best_n = 0, instances[0].outstanding
    for i in range(1, len(instances)):
        n = instances[i].outstanding
        if n < best_n:
            best, best_n = i, n
    return best
