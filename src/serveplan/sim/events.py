"""The simulator's event loop: a queue of ``(time, priority, sequence, event)``, as SimPy and Vidur keep.

The loop owns the clock and the tie-breaker. Events with equal times run in ``priority`` order
(:class:`Priority`), then in the order they were scheduled (the sequence number), so a run is
deterministic. A handler returns the events it causes (``(time, priority, event)`` triples),
which the loop schedules; handlers may also schedule directly (hooks called from inside an
instance, e.g. a completion releasing a closed-loop client).

Instances advance lazily: their clocks may run ahead of the loop's, up to the next time
something could reach them. How far that is depends on what feeds them; see
:mod:`serveplan.sim.cluster` for the stages and :doc:`docs/simulator.md` for the rules.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable
from enum import IntEnum
from typing import Protocol

INF = math.inf


class Priority(IntEnum):
    """Order of events at equal times (lower first)."""

    ARRIVAL = 0       # a request enters the fleet (routed before instances move past it)
    TRANSFER = 1      # a KV cache lands at a decode instance
    CHECK = 2         # early-stop checkpoint (after the arrivals of its instant)
    WAKE = 3          # an instance runs its next steps (lockstep stages)
    DRAIN = 4         # a stage runs to its horizon


Scheduled = tuple[float, Priority, "Event"]


class Event(Protocol):
    """Something that happens at a time; returns the events it causes."""

    def handle(self, loop: EventLoop) -> Iterable[Scheduled]: ...


class EventLoop:
    """A deterministic discrete-event loop.

    Examples
    --------
    >>> class Tick:
    ...     def __init__(self, n): self.n = n
    ...     def handle(self, loop):
    ...         return [(loop.now + 1.0, Priority.WAKE, Tick(self.n - 1))] if self.n > 1 else []
    >>> loop = EventLoop()
    >>> loop.schedule(0.0, Priority.WAKE, Tick(3))
    >>> loop.run()
    >>> loop.now
    2.0
    """

    __slots__ = ("now", "stopped", "_queue", "_seq")

    def __init__(self) -> None:
        self.now = 0.0
        self.stopped = False
        self._queue: list[tuple[float, int, int, Event]] = []
        self._seq = itertools.count()

    def schedule(self, time: float, priority: Priority, event: Event) -> None:
        """Run ``event`` at ``time`` (never before the current time)."""
        heapq.heappush(self._queue, (time if time > self.now else self.now, int(priority), next(self._seq), event))

    def peek(self) -> float:
        """Time of the next event (``inf``: none)."""
        return self._queue[0][0] if self._queue else INF

    def stop(self) -> None:
        """End the run after the current event."""
        self.stopped = True

    def run(self, until: float = INF) -> None:
        """Handle events in order until the queue empties, ``until`` passes or :meth:`stop`."""
        q = self._queue
        while q and q[0][0] <= until and not self.stopped:
            self.now, _, _, event = heapq.heappop(q)
            for t, prio, follow_up in event.handle(self):
                self.schedule(t, prio, follow_up)
