"""Fleets of instances on the event loop: collocated ``Nm`` and disaggregated ``PpDd``, KV transfer.

* Collocated: every instance prefills and decodes its own requests (scheduler
  ``prefill-first`` or ``chunked-prefill``).
* Disaggregated: prefill instances (``prefill-only``) emit the first token; the request's KV
  cache then moves to a decode instance over the link between them and joins that instance's
  queue; the decode instance (``decode-only``) admits it when its KV fits.

KV transfer time (BestServe mentions the cost, §1, but does not model it
[gap]): every prefill device sends its shard of the cache to its peer in parallel,
``latency + tokens * kv_bytes_per_token_per_device / (e_+ * link bandwidth)``, on the intra-node
link when both instances fit in one node, else the inter-node link, with the prefill phase's
communication efficiency ``e_+``. Pools on two device types (a mixed fleet) sit in different
servers: the inter-node link with the slower end's NIC bandwidth and latency
(:func:`~serveplan.specs.hardware.kv_link`). Links are not shared between transfers (no contention). The
prefill instance frees the cache when the transfer ends. A transferred cache that waits for room
at its decode instance sits in a staging buffer there, not in device KV (the decode instance's
blocks are reserved only at admission).

Stages and passes
-----------------
A :class:`Stage` is the instances of one role, their router and what feeds them (a *source*:
the request stream, or the KV transfers of an upstream stage). Stages run on the
:class:`~serveplan.sim.events.EventLoop`; an instance advances lazily, only as far as nothing
can still reach it:

* open loop, a router that does not read load: the whole stream is routed in one event
  (:class:`RouteAll`; each instance's inbox keeps the arrival times) and every instance runs to
  the stage's horizon in one :class:`Drain` event;
* a router that reads load: one :class:`Arrive` event per request advances the stage's instances
  to the arrival time, then routes;
* closed loop (:class:`ClosedLoop`: each client sends its next request a think time after its
  previous one finishes): arrivals depend on completions, so instances run in lockstep, each
  step or stretch bounded by the next event (:class:`Wake`), and a completion hands the loop the
  client's next arrival;
* sessions (:class:`SessionLoop`, a closed loop per session): a session's next turn is sent a
  think time after its previous answer ends, to the instance that served its earlier turns
  (:class:`SessionTurn`);
* early stop: :class:`Checkpoint` events advance the stage to their time and count certain SLO
  misses (:class:`EarlyStop`).

When nothing downstream feeds back upstream (open loop), a disaggregated fleet runs in two
passes: the prefill stage, then the decode stage fed by its KV transfers (:class:`Transfer`
events in time order, ties by request id). With a closed loop both stages share one pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from serveplan.estimator.step import Estimator
from serveplan.sim.events import EventLoop, Priority, Scheduled
from serveplan.sim.fleet import Strategy
from serveplan.sim.instance import Instance
from serveplan.sim.metrics import SLO, certain_misses
from serveplan.sim.request import RequestState
from serveplan.sim.router import Router
from serveplan.sim.workload import Workload
from serveplan.specs.hardware import kv_link

__all__ = ["ClosedLoop", "EarlyStop", "FleetRun", "Frontend", "OpenLoop", "SessionLoop", "Stage", "Strategy",
           "kv_transfer_time", "run_fleet", "session_loop"]

INF = math.inf
#: early-stop checks per stage (spread evenly over the arrival span)
CHECKPOINTS = 50


def kv_transfer_time(est_prefill: Estimator, est_decode: Estimator, tokens: int) -> float:
    """Seconds to move ``tokens`` of KV cache from a prefill to a decode instance (module doc)."""
    hw = est_prefill.hardware
    if hw.name == est_decode.hardware.name:
        link = hw.link_for(est_prefill.parallel.num_devices + est_decode.parallel.num_devices)
    else:   # pools on two device types: the network between their servers, the slower NIC binds
        link = kv_link(hw, est_decode.hardware)
    per_device = tokens * est_prefill.memory.kv_bytes_per_token
    return link.latency_s + per_device / (est_prefill.profile.prefill.comm * link.bandwidth)


class EarlyStop:
    """Decides when the SLO at its percentile can no longer be met (``SimulationConfig.early_stop``).

    A request certainly misses TTFT when its first token came late, or it still waits and has
    waited longer than the target; it certainly misses TPOT when, with its tokens so far,
    ``(t - first token) / (output - 1)`` already exceeds the target, ``t`` being its finish or the
    time every instance has reached. When either count reaches :func:`certain_misses`, the
    percentile is above the target whatever happens next.
    """

    def __init__(self, req: RequestState, slo: SLO) -> None:
        self.req = req
        self.slo = slo
        self.limit = certain_misses(req.n, slo.percentile)
        # requests in arrival order; the counts of the settled prefix (first token, resp. finish,
        # known: their TTFT, resp. TPOT, no longer changes) are kept between checks
        self.order: list[int] = np.argsort(np.asarray(req.arrival), kind="stable").tolist()
        self._i_first = self._late_first = 0
        self._i_fin = self._late_fin = 0
        self._d_min = max(min(req.out, default=1) - 1, 1)  # smallest TPOT divisor
        # off while a disaggregated fleet runs only its prefill stage: decodes have not started,
        # so the TPOT of a request waiting for its decode instance is not yet known
        self.check_tpot = True

    def missed(self, t: float) -> bool:
        """Whether either count of certain misses at time ``t`` reaches the limit.

        The same float arithmetic per request as the definitions above. Requests are visited in
        arrival order: the prefix whose first token (for TTFT) or finish (for TPOT) is known is
        counted once and remembered. Beyond it the scan stops at the first request that arrived
        too late to miss: with ``h`` the latest of ``t`` and every first token (finish) so far, a
        request arriving at ``a`` has TTFT at most ``h - a`` and TPOT at most
        ``(h - a) / (min output - 1)``, and so have the later ones (float subtraction and division
        are monotone). A check thus costs the requests in flight, not the whole stream."""
        if self._ttft_misses(t) >= self.limit:
            return True
        return self.check_tpot and self._tpot_misses(t) >= self.limit

    def _ttft_misses(self, t: float) -> int:
        """Certain TTFT misses at ``t`` (counting stops at the limit)."""
        R, limit, order, n = self.req, self.limit, self.order, self.req.n
        first, arrival = R.first_token, R.arrival
        target = self.slo.ttft_s
        i, late = self._i_first, self._late_first
        while i < n:
            q = order[i]
            f = first[q]
            if f != f:
                break
            if f - arrival[q] > target:
                late += 1
            i += 1
        self._i_first, self._late_first = i, late
        count = late
        h = t if t > R.last_first else R.last_first
        for j in range(i, n):
            if count >= limit:
                break
            q = order[j]
            a = arrival[q]
            if not h - a > target:
                break
            f = first[q]
            if f == f:
                if f - a > target:
                    count += 1
            elif a <= t and t - a > target:
                count += 1
        return count

    def _tpot_misses(self, t: float) -> int:
        """Certain TPOT misses at ``t`` (counting stops at the limit)."""
        R, limit, order, n = self.req, self.limit, self.order, self.req.n
        first, arrival, fin, out = R.first_token, R.arrival, R.finish, R.out
        target = self.slo.tpot_s
        i, late = self._i_fin, self._late_fin
        while i < n:
            q = order[i]
            e = fin[q]
            if e != e:
                break
            o = out[q]
            if o > 1 and (e - first[q]) / max(o - 1, 1) > target:
                late += 1
            i += 1
        self._i_fin, self._late_fin = i, late
        count = late
        h = t if t > R.last_finish else R.last_finish
        d_min = self._d_min
        for j in range(i, n):
            if count >= limit:
                break
            q = order[j]
            if not (h - arrival[q]) / d_min > target:
                break
            f = first[q]
            o = out[q]
            if f == f and o > 1:
                e = fin[q]
                if ((e if e == e else t) - f) / max(o - 1, 1) > target:
                    count += 1
        return count


# ---------------------------------------------------------------------- stages
class Stage:
    """The instances of one role, their router and the early stop watching them.

    ``assign(request, index)`` records which instance got a request; ``cap`` is the simulated
    time limit of the run.
    """

    def __init__(self, instances: Sequence[Instance], router: Router, cap: float, stop: EarlyStop | None,
                 assign: Callable[[int, int], None], frontend_s: float = 0.0) -> None:
        self.instances = list(instances)
        #: each instance's API server (:class:`Frontend`, ``frontend_s`` of serial work per request;
        #: None: requests reach the instances when they are sent)
        self.frontends = [Frontend(frontend_s) for _ in self.instances] if frontend_s > 0 else None
        self.router = router
        self.cap = cap
        self.stop = stop
        self.assign = assign
        self.stopped = False
        #: lockstep: time of each instance's pending Wake (inf: none)
        self.wake_at = [INF] * len(self.instances)
        #: called after a drain runs an instance to the horizon (progress reports; None: nothing)
        self.on_progress: Callable[[], None] | None = None

    def advance(self, t: float) -> None:
        """Run every instance's steps that start before ``t``."""
        for inst in self.instances:
            inst.run_until(t)

    def settle(self) -> None:
        """Write every request's lengths (:meth:`Instance.settle`)."""
        for inst in self.instances:
            inst.settle()

    def route(self, t: float, q: int) -> int:
        """Request ``q`` reaches the stage at ``t``: the router picks its instance (index)."""
        if self.router.reads_load:
            self.advance(t)
        i = self.router.pick(self.instances)
        self.deliver(i, t, q)
        self.assign(q, i)
        return i

    def deliver(self, i: int, t: float, q: int) -> float:
        """Request ``q``, sent to instance ``i`` at ``t``, reaches its scheduler through the
        instance's frontend (at once without one); returns the hand-off time. Sends to one
        instance come in time order, as :meth:`Frontend.admit` needs."""
        t_eng = t if self.frontends is None else self.frontends[i].admit(t)
        self.instances[i].deliver(t_eng, q)
        return t_eng

    def wake(self, i: int, t: float) -> Iterable[Scheduled]:
        """Lockstep: make sure instance ``i`` runs at ``t`` (or at its own clock, if later)."""
        t = max(t, self.instances[i].now)
        if t < self.wake_at[i]:
            self.wake_at[i] = t
            return ((t, Priority.WAKE, Wake(self, i)),)
        return ()

    @property
    def clock(self) -> float:
        """The time every instance has reached."""
        return min(inst.now for inst in self.instances)

    @property
    def is_idle(self) -> bool:
        return all(inst.is_idle for inst in self.instances)

    def missed(self, loop: EventLoop, t: float) -> bool:
        """Early stop: the SLO is certainly missed at ``t``; stops the loop."""
        if self.stop is not None and self.stop.missed(t):
            self.stopped = True
            loop.stop()
            return True
        return False


@dataclass(frozen=True, slots=True)
class Drain:
    """Run the stage to its horizon (the run's time cap)."""

    stage: Stage

    def handle(self, loop: EventLoop) -> Iterable[Scheduled]:
        st = self.stage
        if st.on_progress is None:
            st.advance(st.cap)
            return ()
        for inst in st.instances:
            inst.run_until(st.cap)
            st.on_progress()
        return ()


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Advance the stage to ``t`` and check the early stop; the next check follows ``step``
    later until the stage is idle after ``t_last`` or the cap."""

    stage: Stage
    t: float
    step: float
    t_last: float

    def handle(self, loop: EventLoop) -> Iterable[Scheduled]:
        st, t = self.stage, self.t
        st.advance(t)
        if st.missed(loop, st.clock):
            return ()
        if t >= st.cap or (t >= self.t_last and st.is_idle):
            return ((t, Priority.DRAIN, Drain(st)),)
        # past the last arrival the interval doubles: a backlog that drains for far longer than the
        # stream lasted (an overloaded probe) is checked O(log(drain / step)) times, not once per
        # t_last/50. Misses are certain ones (EarlyStop.missed), so a later check gives the same
        # verdict; only the moment an overloaded run stops moves.
        step = self.step * 2 if t >= self.t_last else self.step
        nxt = min(t + step, st.cap)
        return ((nxt, Priority.CHECK, Checkpoint(st, nxt, step, self.t_last)),)


def _checks_from(stage: Stage, t0: float, t_last: float, *, at_least_one: bool) -> Scheduled:
    """The first early-stop checkpoint after ``t0`` (or the drain when none is due)."""
    step = max(t_last, 1e-9) / CHECKPOINTS
    if stage.stop is None or not (at_least_one or t0 < stage.cap):
        return (t0, Priority.DRAIN, Drain(stage))
    t = min(t0 + step, stage.cap)
    return (t, Priority.CHECK, Checkpoint(stage, t, step, t_last))


# ---------------------------------------------------------------------- sources
@dataclass(frozen=True, slots=True)
class OpenLoop:
    """Requests ``ids`` reaching a stage at ``times`` (non-decreasing), whatever the fleet does."""

    times: Sequence[float]
    ids: Sequence[int]

    def start(self, stage: Stage) -> Scheduled:
        if stage.router.reads_load:
            if not self.ids:
                return _checks_from(stage, 0.0, 0.0, at_least_one=False)
            return (self.times[0], Priority.ARRIVAL, Arrive(stage, self, 0))
        return (0.0, Priority.ARRIVAL, RouteAll(stage, self))


@dataclass(frozen=True, slots=True)
class RouteAll:
    """Route a whole open-loop stream with a router that does not read load."""

    stage: Stage
    source: OpenLoop

    def handle(self, loop: EventLoop) -> Iterable[Scheduled]:
        st, src = self.stage, self.source
        insts, assign = st.instances, st.assign
        for i, t, q in zip(st.router.picks(insts, len(src.ids)), src.times, src.ids, strict=True):
            st.deliver(i, t, q)
            assign(q, i)
        t_last = src.times[-1] if len(src.times) else 0.0
        return (_checks_from(st, 0.0, t_last, at_least_one=True),)


@dataclass(frozen=True, slots=True)
class Arrive:
    """Request ``source.ids[j]`` arrives; with early stop, a check every 1/50 of the stream."""

    stage: Stage
    source: OpenLoop
    j: int

    def handle(self, loop: EventLoop) -> Iterable[Scheduled]:
        st, src, j = self.stage, self.source, self.j
        times, n = src.times, len(src.ids)
        t_last = times[-1]
        t = times[j]
        if t >= st.cap:
            return (_checks_from(st, t_last, t_last, at_least_one=False),)
        st.route(t, src.ids[j])
        if st.stop is not None and (j + 1) % max(1, n // CHECKPOINTS) == 0 and st.missed(loop, t):
            return ()
        if j + 1 < n:
            return ((times[j + 1], Priority.ARRIVAL, Arrive(st, src, j + 1)),)
        return (_checks_from(st, t_last, t_last, at_least_one=False),)


@dataclass(slots=True)
class ClosedLoop:
    """``clients`` users, each sending its next request ``think_s`` after its previous one
    finished (the first ones at ``t0``); requests are taken in id order. Instances run in lockstep
    (:class:`Wake`), so every arrival reaches its instance before any step that starts later."""

    ids: Sequence[int]
    clients: int
    think_s: float = 0.0
    t0: float = 0.0
    #: first sends spread evenly over ``[t0, t0 + ramp_s)`` (client ``k`` at ``t0 + k ramp_s / C``)
    ramp_s: float = 0.0
    #: earliest send time of each request (by id; None: none): an open-loop stream capped at
    #: ``clients`` requests in flight, as ``vllm bench serve --request-rate R --max-concurrency C``
    #: sends (a request waits for its arrival and then for a free slot, first come first served)
    not_before: Sequence[float] | None = None
    #: think time of each request (by id; None: ``think_s`` for all): the wait between its
    #: client's previous completion and its send
    think_each: Sequence[float] | None = None
    _next: int = field(default=0, init=False)
    _loop: EventLoop | None = field(default=None, init=False)
    _stage: Stage | None = field(default=None, init=False)

    def start(self, stage: Stage, loop: EventLoop) -> list[Scheduled]:
        """The first request of every client, at ``t0`` (spread over ``ramp_s``)."""
        self._loop, self._stage = loop, stage
        first: list[Scheduled] = []
        nb = self.not_before
        for k in range(min(self.clients, len(self.ids))):
            q = self._take()
            t = self.t0 + k * self.ramp_s / self.clients
            first.append(self._send(q, t if nb is None else max(t, nb[q])))
        return first

    def _take(self) -> int:
        q = self.ids[self._next]
        self._next += 1
        return q

    def _send(self, q: int, t_send: float) -> Scheduled:
        """Request ``q`` sent at ``t_send`` (it reaches its instance's scheduler through the
        stage's frontend, :meth:`Stage.deliver`)."""
        assert self._stage is not None
        return (t_send, Priority.ARRIVAL, ClientArrival(self._stage, q))

    def on_finish(self, q: int, t: float) -> None:
        """A client's request finished: its next one arrives after the think time."""
        if self._next < len(self.ids):
            assert self._loop is not None
            nxt = self._take()
            t_send = t + (self.think_s if self.think_each is None else self.think_each[nxt])
            if self.not_before is not None and self.not_before[nxt] > t_send:
                t_send = self.not_before[nxt]
            self._loop.schedule(*self._send(nxt, t_send))


@dataclass(slots=True)
class Frontend:
    """The serving frontend's one request at a time: an API server (HTTP parsing, chat template,
    tokenisation, hand-off to the engine process) that works on one request after another. A
    request sent at ``t`` reaches the engine at ``max(t, previous hand-off + per_request_s)``:
    requests sent together reach the scheduler ``per_request_s`` apart, so an idle engine starts
    its first step with the first of them alone. The work of a lone request is not added (its
    latency is part of the measured lone TTFT the estimator is checked against); only the wait
    behind other requests' frontend work is. Engine files give ``per_request_s``
    (``frontend.per_request_us``) with the source of the serial path. Each instance of the
    fleet's first stage has its own (:meth:`Stage.deliver`: every replica runs its own API server),
    whatever sends the requests (open loop, closed loop, sessions)."""

    per_request_s: float
    free_at: float = -INF

    def admit(self, t: float) -> float:
        """Hand-off time of a request sent at ``t`` (requests are admitted in send order)."""
        t_eng = t if t > self.free_at else self.free_at
        self.free_at = t_eng + self.per_request_s
        return t_eng


@dataclass(frozen=True, slots=True)
class ClientArrival:
    """A client sends a request now: its arrival time (what latencies count from) is now; the
    stage routes it (through its instance's frontend) and wakes the instance."""

    stage: Stage
    q: int

    def handle(self, loop: EventLoop) -> Iterable[Scheduled]:
        t = loop.now
        self.stage.instances[0].req.arrival[self.q] = t
        return self.stage.wake(self.stage.route(t, self.q), t)


@dataclass(slots=True)
class SessionLoop(ClosedLoop):
    """Sessions in a closed loop per session: each turn is sent ``think_s`` after the previous
    turn's answer ends. Sessions start at ``starts`` (open), or back to back on ``clients``
    clients when ``starts`` is None."""

    first: Sequence[int] = ()
    next_turn: Sequence[int] = ()
    starts: Sequence[float] | None = None
    _session_next: int = field(default=0, init=False)

    def start(self, stage: Stage, loop: EventLoop) -> list[Scheduled]:
        self._loop, self._stage = loop, stage
        if self.starts is not None:
            self._session_next = len(self.first)
            return [(float(t), Priority.ARRIVAL, ClientArrival(stage, q))
                    for t, q in zip(self.starts, self.first, strict=True)]
        k = min(self.clients, len(self.first))
        self._session_next = k
        return [(self.t0 + i * self.ramp_s / self.clients, Priority.ARRIVAL, ClientArrival(stage, self.first[i]))
                for i in range(k)]

    def on_finish(self, q: int, t: float) -> None:
        nxt = self.next_turn[q]
        assert self._loop is not None and self._stage is not None
        if nxt >= 0:  # the session stays on its instance (session affinity)
            home = self._stage.instances[0].req.p_inst[q]
            self._loop.schedule(t + self.think_s, Priority.ARRIVAL, SessionTurn(self._stage, nxt, home))
        elif self.starts is None and self._session_next < len(self.first):
            q0 = self.first[self._session_next]
            self._session_next += 1
            self._loop.schedule(t + self.think_s, Priority.ARRIVAL, ClientArrival(self._stage, q0))


@dataclass(frozen=True, slots=True)
class SessionTurn:
    """A session's next turn arrives (its arrival time is set now) at the instance that served
    the session's earlier turns, and wakes it."""

    stage: Stage
    q: int
    i: int

    def handle(self, loop: EventLoop) -> list[Scheduled]:
        t = loop.now
        st, q, i = self.stage, self.q, self.i
        st.instances[i].req.arrival[q] = t
        st.deliver(i, t, q)
        st.assign(q, i)
        return list(st.wake(i, t))


def session_loop(wl: Workload, *, starts: Sequence[float] | None, clients: int | None) -> SessionLoop:
    """The :class:`SessionLoop` of a session workload."""
    session = np.asarray(wl.session)
    turn = np.asarray(wl.turn)
    n = len(session)
    order = np.lexsort((turn, session))  # by session, then turn
    nxt = np.full(n, -1, dtype=np.int64)
    same = session[order][1:] == session[order][:-1]
    nxt[order[:-1][same]] = order[1:][same]
    first = order[np.r_[True, ~same]]
    return SessionLoop(ids=range(n), clients=clients or len(first), think_s=wl.think_s, first=first.tolist(),
                       next_turn=nxt.tolist(), starts=None if starts is None else list(starts))


@dataclass(frozen=True, slots=True)
class Wake:
    """Lockstep: instance ``i`` runs the steps that start before the next event (at least the
    one starting now: a completion ends after its step starts, so nothing it causes can reach
    an instance before that), then waits for its next boundary or delivery."""

    stage: Stage
    i: int

    def handle(self, loop: EventLoop) -> Iterable[Scheduled]:
        st, i = self.stage, self.i
        if st.wake_at[i] != loop.now:
            return ()  # superseded by an earlier wake
        st.wake_at[i] = INF
        inst = st.instances[i]
        if inst.now > loop.now:  # moved on meanwhile (a router advanced it): resume at its clock
            return st.wake(i, inst.now)
        horizon = loop.peek()
        if not horizon > inst.now:
            horizon = math.nextafter(inst.now, INF)
        inst.run_until(min(horizon, st.cap))
        if inst.now >= st.cap or inst.is_idle:
            return ()
        busy = inst.running or inst.waiting
        return st.wake(i, inst.now if busy else inst.next_arrival)


@dataclass(frozen=True, slots=True)
class Transfer:
    """A request's KV cache lands at the decode stage (disaggregation)."""

    stage: Stage
    q: int

    def handle(self, loop: EventLoop) -> Iterable[Scheduled]:
        return self.stage.wake(self.stage.route(loop.now, self.q), loop.now)


# ---------------------------------------------------------------------- fleets
@dataclass
class FleetRun:
    """What a fleet run leaves besides the per-request state."""

    instances: list[Instance]
    stopped_early: bool = False


def _pass(stage: Stage, source: OpenLoop) -> bool:
    """One open-loop pass of ``stage``; True when the early stop fired."""
    loop = EventLoop()
    loop.schedule(*source.start(stage))
    loop.run()
    return stage.stopped


def run_fleet(stages: Sequence[Stage], req: RequestState, *, source: OpenLoop | ClosedLoop,
              handed: list[tuple[float, int]] | None = None) -> FleetRun:
    """Run a fleet (:func:`_fleet_passes`), every request's lengths written at the end (the decode
    cohorts' lags, :meth:`Instance.settle`)."""
    run = _fleet_passes(stages, req, source=source, handed=handed)
    for inst in run.instances:
        inst.settle()
    return run


def _fleet_passes(stages: Sequence[Stage], req: RequestState, *, source: OpenLoop | ClosedLoop,
                  handed: list[tuple[float, int]] | None = None) -> FleetRun:
    """Run a fleet: one stage (collocated) or a prefill and a decode stage (disaggregated).

    ``handed`` collects ``(time the KV lands, request)`` from the prefill instances' ``handoff``
    hook and feeds the decode stage.
    """
    instances = [inst for st in stages for inst in st.instances]
    if isinstance(source, ClosedLoop):
        return _run_closed(stages, req, source, handed)
    first = stages[0]
    stop = first.stop
    if len(stages) == 1:
        return FleetRun(instances, _pass(first, source))
    # disaggregated, open loop: the prefill stage never waits on the decode stage
    assert handed is not None
    if stop is not None:
        stop.check_tpot = False  # decodes have not run yet: TPOTs are unknown
    stopped = _pass(first, source)
    if stop is not None:
        stop.check_tpot = True
    if stopped:
        return FleetRun(instances, True)
    handed.sort()
    for t, q in handed:  # the KV cache is in place: the request continues with its first token
        req.kv_ready[q] = True
        req.kv_len[q] = req.prompt_len[q]
        req.decode_arrival[q] = t
    return FleetRun(instances, _pass(stages[1], OpenLoop([t for t, _ in handed], [q for _, q in handed])))


def _run_closed(stages: Sequence[Stage], req: RequestState, source: ClosedLoop,
                handed: list[tuple[float, int]] | None) -> FleetRun:
    """Closed loop: every stage in one lockstep pass (completions feed arrivals)."""
    loop = EventLoop()
    for st in stages:
        for inst in st.instances:
            if inst.handoff is None:
                inst.set_hooks(on_finish=source.on_finish)
    if len(stages) > 1:
        assert handed is not None
        decode = stages[1]

        def land(q: int, t: float) -> None:
            req.kv_ready[q] = True
            req.kv_len[q] = req.prompt_len[q]
            req.decode_arrival[q] = t
            loop.schedule(t, Priority.TRANSFER, Transfer(decode, q))

        for inst in stages[0].instances:
            prev = inst.handoff
            assert prev is not None

            def handoff(q: int, t: float, prev: Callable[[int, float], float] = prev) -> float:
                t_land = prev(q, t)
                land(q, t_land)
                return t_land

            inst.set_hooks(handoff=handoff)
    for ev in source.start(stages[0], loop):
        loop.schedule(*ev)
    loop.run(stages[0].cap)
    return FleetRun([inst for st in stages for inst in st.instances], False)
