"""The event loop and what it lets a fleet express: ordering, closed-loop clients, KV transfers."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.errors import SpecError
from serveplan.sim import Fleet, SimulationConfig, Workload, simulate
from serveplan.sim.events import EventLoop, Priority
from serveplan.sim.workload import LengthDist


class Record:
    def __init__(self, log, name, follow=()):
        self.log, self.name, self.follow = log, name, follow

    def handle(self, loop):
        self.log.append((loop.now, self.name))
        return self.follow


def test_events_run_in_time_then_priority_then_schedule_order():
    log: list = []
    loop = EventLoop()
    loop.schedule(2.0, Priority.ARRIVAL, Record(log, "late"))
    loop.schedule(1.0, Priority.DRAIN, Record(log, "drain"))
    loop.schedule(1.0, Priority.ARRIVAL, Record(log, "first", [(1.5, Priority.WAKE, Record(log, "caused"))]))
    loop.schedule(1.0, Priority.ARRIVAL, Record(log, "second"))
    loop.run()
    assert log == [(1.0, "first"), (1.0, "second"), (1.0, "drain"), (1.5, "caused"), (2.0, "late")]


def test_events_never_run_in_the_past_and_stop_ends_the_run():
    log: list = []
    loop = EventLoop()

    class Stopper:
        def handle(self, lp):
            lp.stop()
            return [(0.0, Priority.WAKE, Record(log, "after-stop"))]

    loop.schedule(3.0, Priority.WAKE, Stopper())
    loop.run()
    assert loop.now == 3.0 and log == []
    assert loop.peek() == 3.0  # scheduled "at 0" lands at the current time, not before


def _workload(n=120, seed=5):
    return Workload.from_distributions(LengthDist(kind="uniform", low=200, high=2500),
                                       LengthDist(kind="uniform", low=2, high=200), n, seed=seed)


@pytest.mark.parametrize("strategy", ["1m", "1p1d"])
def test_one_client_sends_each_request_when_the_previous_finishes(testbed, strategy):
    """Concurrency 1: every request runs alone, so its TTFT and TPOT are the lone-request ones
    (an open-loop run so sparse that requests never meet gives them too)."""
    wl = _workload()
    cfg = SimulationConfig(**testbed, fleet=Fleet.build(strategy, tp=4), workload=wl, rate=1e-4)
    closed = simulate(cfg, clients=1)
    alone = simulate(cfg)
    rec = closed.requests
    assert closed.num_completed == wl.num_requests
    np.testing.assert_array_equal(rec.arrival[1:], rec.finish[:-1])  # think time 0
    # the same step times, subtracted from absolute times of another size: equal to rounding
    np.testing.assert_allclose(rec.ttft, alone.requests.ttft, rtol=0, atol=1e-9)
    np.testing.assert_allclose(rec.tpot, alone.requests.tpot, rtol=0, atol=1e-9)


def test_think_time_delays_the_next_request(testbed):
    wl = _workload(40)
    cfg = SimulationConfig(**testbed, fleet=Fleet.build("1m", tp=4), workload=wl, rate=1.0)
    rec = simulate(cfg, clients=1, think_s=0.25).requests
    np.testing.assert_allclose(rec.arrival[1:], rec.finish[:-1] + 0.25, rtol=0, atol=1e-12)
    # one think time per request (by id: the wait before that request is sent); the first
    # request of a client is sent at t = 0 whatever its own value
    each = np.random.default_rng(5).uniform(0.0, 0.5, size=40)
    rec = simulate(cfg, clients=1, think_s=each).requests
    assert rec.arrival[0] == 0.0
    np.testing.assert_allclose(rec.arrival[1:], rec.finish[:-1] + each[1:], rtol=0, atol=1e-12)
    with pytest.raises(SpecError, match="think_s: expected 40 non-negative"):
        simulate(cfg, clients=1, think_s=each[:39])
    with pytest.raises(SpecError, match="think_s: expected 40 non-negative"):
        simulate(cfg, clients=1, think_s=-each)
    with pytest.raises(SpecError, match="must be a non-negative number of seconds"):
        simulate(cfg, clients=1, think_s="soon")
    # sessions wait their workload's own think time: simulate's is refused, not ignored
    from serveplan.sim.sessions import session_workload

    chat = SimulationConfig(**testbed, fleet=Fleet.build("1m", tp=4), workload=session_workload(3, 2, seed=1),
                            rate=1.0)
    with pytest.raises(SpecError, match="workload's own think time"):
        simulate(chat, clients=2, think_s=0.5)


@pytest.mark.parametrize("strategy, clients", [("2m", 8), ("1p2d", 6)])
def test_closed_loop_keeps_the_clients_busy_littles_law(testbed, strategy, clients):
    """With no think time exactly ``clients`` requests are in the system until the stream runs
    out, so throughput x mean latency = clients over the full part of the run (Little's law)."""
    wl = _workload(400, seed=9)
    res = simulate(SimulationConfig(**testbed, fleet=Fleet.build(strategy, tp=4), workload=wl, rate=1.0),
                   clients=clients)
    rec = res.requests
    assert res.num_completed == 400 and np.all(np.isfinite(rec.finish))
    # the last client request is sent when the stream runs out: measure up to that arrival
    t_full = float(rec.arrival.max())
    grid = np.linspace(0.0, t_full, 2001)[:-1]
    in_system = ((rec.arrival[None, :] <= grid[:, None]) & (rec.finish[None, :] > grid[:, None])).sum(axis=1)
    assert np.all(in_system == clients)
    assert np.all(rec.arrival[:clients] == 0.0)
