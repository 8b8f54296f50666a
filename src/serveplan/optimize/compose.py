"""Fast search: pool capacities measured once, fleets composed by arithmetic, the best confirmed.

The exhaustive search (:func:`serveplan.optimize.search.search` with ``method="exhaustive"``)
simulates every fleet's goodput. This one uses three facts about a fleet behind round-robin
routers with an open-loop stream (docs/optimizer.md, "Fast search"):

* **Disaggregated pools meet only through the KV transfer.** A ``PpDd`` fleet meets TTFT iff its
  prefill pool does (the first token leaves the prefill instance), and TPOT iff its decode pool
  does, fed by the prefill completions plus the transfer. So its goodput is
  ``min(G_ttft(prefill pool of P), G_tpot(decode pool of D))``: the prefill pool of ``P``
  instances is simulated alone (one output token per request, TTFT checked) once per prefill
  configuration and ``P``, and is shared by every ``D``; one decode instance is measured once per
  configuration and ``D`` (TPOT checked) behind a prefill pool large enough not to saturate, fed
  every ``D``-th request (next point), and shared by every ``P``.
* **Round-robin copies.** ``N`` collocated instances behind a round-robin router at rate ``r`` are
  ``N`` copies of one instance that receives every ``N``-th arrival. Every ``N``-th arrival of a
  Poisson stream is not Poisson: its gaps are sums of ``N`` exponentials, a Gamma renewal
  process of coefficient of variation ``1 / sqrt(N)`` (``cv / sqrt(N)`` for Gamma arrivals of
  ``cv``). One instance fed that stream at ``r / N`` is simulated, with
  ``max(n / N, min(n, 1000))`` requests (what one instance of the fleet sees, not fewer than a
  thousand), and the fleet's goodput is ``N`` times its goodput.
* **Bounds prune.** Every candidate gets an analytic upper bound (:mod:`serveplan.optimize.screen`),
  tightened by the measured largest pool of its configuration; candidates are composed best bound
  first, and those whose bound cannot beat the best composed goodput per device are pruned with
  that reason.

The few best composed fleets are then simulated whole (the bracket starts at the composed
goodput, so a right estimate costs two runs) and ranked on that; a confirmation that differs from
its composition by more than the bisection tolerance is reported.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from serveplan.optimize.goodput import (
    GoodputMethod,
    GoodputResult,
    GoodputSettings,
    GoodputStatus,
    SloCheck,
    _zero_load,
    max_goodput,
    worker_clocks,
)
from serveplan.optimize.lifecycle import worker_pool
from serveplan.optimize.screen import Screen
from serveplan.optimize.space import Pruned
from serveplan.sim.clock import Clocks
from serveplan.sim.engine import LoneRequest
from serveplan.sim.fleet import Fleet, InstanceConfig, Strategy
from serveplan.sim.workload import Workload

#: fewest requests a single-instance stream is simulated with
MIN_UNIT_REQUESTS = 1000
#: whole-fleet confirmations: at least this many of the best composed fleets
CONFIRM = 3
#: ... and at most this many, while an unconfirmed composition still beats the best confirmed one
MAX_CONFIRM = 8
#: fleets simulated whole at a time once the first are (in parallel when there are workers): a fixed
#: number, so the fleets confirmed, and the ranking, do not depend on how many workers ran them
CONFIRM_BATCH = 2


def decomposable(settings: GoodputSettings) -> bool:
    """Whether the fast search applies: open-loop Poisson or Gamma arrivals (a trace's N-th
    arrivals are not a renewal process; those searches run exhaustively)."""
    return settings.workload.arrival in ("poisson", "gamma")


def instance_stream(wl: Workload, n_copies: int) -> Workload:
    """The stream one of ``n_copies`` round-robin instances receives, in distribution: Gamma gaps
    of coefficient of variation ``cv / sqrt(N)`` (module doc), ``max(n / N, min(n, 1000))``
    requests, its rate ``1 / N`` of the fleet's."""
    n = len(wl.input_lengths)
    if n_copies == 1:
        return wl
    m = max(n // n_copies, min(n, MIN_UNIT_REQUESTS))
    cv0 = 1.0 if wl.arrival == "poisson" else wl.cv
    return Workload(input_lengths=wl.input_lengths[:m], output_lengths=wl.output_lengths[:m], arrival="gamma",
                    cv=cv0 / math.sqrt(n_copies), name=f"{wl.name}/every-{n_copies}th")


def first_token_only(wl: Workload) -> Workload:
    """The same stream with one output token per request: the prefill pool alone."""
    return Workload(input_lengths=wl.input_lengths, output_lengths=np.ones_like(wl.input_lengths),
                    arrival=wl.arrival, cv=wl.cv, trace_times=wl.trace_times, name=f"{wl.name}/prefill")


@dataclass
class Composition:
    """The composed goodput of one fleet, and the unit results behind it."""

    cand: Fleet
    goodput_rps: float
    parts: tuple[GoodputResult, ...]
    binding: str


@dataclass
class Measurer:
    """Measures units (memoised, optionally checkpointed) and composes fleets from them."""

    settings: GoodputSettings
    on_unit: Callable[[str, GoodputResult], None] | None = None
    done: dict[str, GoodputResult] = field(default_factory=dict)
    clocks: Clocks = field(default_factory=Clocks)
    num_simulations: int = 0
    num_units: int = 0
    num_resumed: int = 0

    def __post_init__(self) -> None:
        self._preloaded = set(self.done)
        s = self.settings
        self._prefill_settings = replace(s, workload=first_token_only(s.workload))
        self._streams: dict[int, GoodputSettings] = {1: s}

    def _stream(self, n: int) -> GoodputSettings:
        got = self._streams.get(n)
        if got is None:
            got = self._streams[n] = replace(self.settings, workload=instance_stream(self.settings.workload, n))
        return got

    def _measure(self, key: str, fleet: Fleet, settings: GoodputSettings, check: SloCheck,
                 guess: float | None = None) -> GoodputResult:
        got = self.done.get(key)
        if got is not None and key in self._preloaded:
            self._preloaded.discard(key)
            self.num_resumed += 1
        if got is None:
            got = max_goodput(fleet, settings, check=check, guess=guess, clocks=self.clocks)
            self.done[key] = got
            self.num_simulations += got.num_simulations
            self.num_units += 1
            if self.on_unit is not None:
                self.on_unit(key, got)
        return got

    def prefill_pool(self, prefill: InstanceConfig, p: int) -> GoodputResult:
        """TTFT goodput of ``p`` prefill instances (the whole pool, one output token per request;
        the decode side then does no work, so any decode configuration stands for it)."""
        dummy = InstanceConfig(parallel=prefill.parallel, batching=replace(prefill.batching, scheduler="decode-only"),
                               device=prefill.device)
        fleet = Fleet(strategy=Strategy(num_prefill=p, num_decode=1), prefill=prefill, decode=dummy)
        return self._measure(f"unit/prefill/{fleet.name}", fleet, self._prefill_settings, SloCheck.TTFT)

    def decode_instance(self, prefill: InstanceConfig, decode: InstanceConfig, d: int, feeders: int,
                        guess: float | None = None) -> GoodputResult:
        """TPOT goodput of one of ``d`` round-robin decode instances, fed by ``feeders`` prefill
        instances (the KV transfer included) with every ``d``-th request of the stream
        (:func:`instance_stream`: as many requests as one decode instance of the fleet receives,
        the whole stream for ``d = 1``; a shorter prefix would weigh the lightly loaded start of
        the run too much); the bracket starts at ``guess`` (the analytic decode rate, a few
        percent above the measured one)."""
        fleet = Fleet(strategy=Strategy(num_prefill=feeders, num_decode=1), prefill=prefill, decode=decode)
        st = self._stream(d)
        return self._measure(f"unit/decode/{d}/{fleet.name}", fleet, st, SloCheck.TPOT, guess)

    def collocated_instance(self, inst: InstanceConfig, n: int) -> GoodputResult:
        """Goodput of one of ``n`` round-robin collocated instances."""
        fleet = Fleet(strategy=Strategy(num_collocated=1), collocated=inst)
        return self._measure(f"unit/collocated/{n}/{fleet.name}", fleet, self._stream(n), SloCheck.BOTH)

    def feeders(self, prefill: InstanceConfig, decode: InstanceConfig, screen: Screen) -> int:
        """Prefill instances feeding a decode measurement: enough that their TTFT goodput (one
        instance's, times the count) covers the decode instance's analytic capacity, so the
        prefill side never saturates; at most 64."""
        need = screen.instance(decode, Fleet(strategy=Strategy(num_prefill=1, num_decode=1), prefill=prefill,
                                             decode=decode)).decode_rps
        one = self.prefill_pool(prefill, 1).goodput_rps
        if one <= 0 or not math.isfinite(need):
            return 1
        return max(1, min(64, math.ceil(need / one)))

    def compose(self, cand: Fleet, screen: Screen) -> Composition:
        s = cand.strategy
        if not cand.is_disaggregated:
            assert cand.collocated is not None
            u = self.collocated_instance(cand.collocated, s.num_collocated)
            return Composition(cand, s.num_collocated * u.goodput_rps, (u,), u.binding)
        assert cand.prefill is not None and cand.decode is not None
        pre = self.prefill_pool(cand.prefill, s.num_prefill)
        if pre.goodput_rps <= 0:
            return Composition(cand, 0.0, (pre,), "ttft")
        feeders = self.feeders(cand.prefill, cand.decode, screen)
        guess = 0.95 * min(screen.instance(cand.decode, cand).decode_rps,
                           feeders * self.prefill_pool(cand.prefill, 1).goodput_rps)
        dec = self.decode_instance(cand.prefill, cand.decode, s.num_decode, feeders,
                                   guess if math.isfinite(guess) else None)
        g_p, g_d = pre.goodput_rps, s.num_decode * dec.goodput_rps
        return Composition(cand, min(g_p, g_d), (pre, dec), "ttft" if g_p <= g_d else "tpot")


def composed_result(comp: Composition, settings: GoodputSettings) -> GoodputResult:
    """A :class:`GoodputResult` for a composed fleet (``method="composed"``); latencies are the
    units' at their own goodput."""
    cand = comp.cand
    g = comp.goodput_rps
    parts = comp.parts
    ttft = parts[0].ttft_p
    tpot = parts[-1].tpot_p
    mean_out = float(np.mean(settings.workload.output_lengths))
    if g <= 0:
        reason = "; ".join(p.reason for p in parts if p.reason) or "SLO missed even at 0.1 req/s"
        return GoodputResult(candidate=cand, goodput_rps=0.0, goodput_per_device=0.0,
                             status=GoodputStatus.REJECTED, reason=reason, num_simulations=0,
                             method=GoodputMethod.COMPOSED)
    if cand.is_disaggregated:
        bottleneck = "prefill instances" if comp.binding == "ttft" else "decode instances"
    else:
        bottleneck = parts[0].bottleneck
    return GoodputResult(
        candidate=cand, goodput_rps=g, goodput_per_device=g / cand.num_devices, status=GoodputStatus.OK,
        ttft_p=ttft, tpot_p=tpot, e2e_mean_s=parts[-1].e2e_mean_s, throughput_rps=g, output_tokens_per_s=g * mean_out,
        binding=comp.binding, bottleneck=bottleneck, capacity_bound_rps=parts[-1].capacity_bound_rps,
        num_simulations=0, method=GoodputMethod.COMPOSED,
        nonstationary_rps=tuple(sorted({x for p in parts for x in p.nonstationary_rps})),
    )


@dataclass
class FastOutcome:
    results: dict[str, GoodputResult]
    pruned: list[Pruned]
    num_simulations: int
    num_units: int
    disagreements: list[str]
    num_resumed: int = 0


def fast_search(candidates: list[Fleet], settings: GoodputSettings, *, jobs: int,
                done: dict[str, GoodputResult], on_record: Callable[[str, GoodputResult], None],
                on_candidate: Callable[[str], None], confirm: int = CONFIRM,
                target_rate: float | None = None, frontier: bool = False, strict: bool = False) -> FastOutcome:
    """Bound, compose and confirm (module doc). ``done`` holds checkpointed units and whole-fleet
    results by key; ``on_record`` stores new ones; ``on_candidate`` ticks the progress per
    candidate settled. With ``target_rate`` the objective is the fewest devices reaching it.
    ``frontier`` keeps every candidate that may lie on the throughput frontier: one is pruned only
    when a composed fleet beats both its bound on output tokens/s per device and its bound on
    tokens/s per user (a lone request's decode speed). ``strict`` stops the confirmations at the
    first batch with a disagreement (``method="auto"`` then ranks the space another way)."""
    run = _FastSearch(settings, jobs=jobs, done=done, on_record=on_record, on_candidate=on_candidate,
                      target_rate=target_rate)
    run.frontier = frontier
    run.seed(candidates)
    run.branch_and_bound(candidates)
    run.confirm_best(confirm, strict=strict)
    return FastOutcome(results=run.results, pruned=run.pruned, num_simulations=run.meas.num_simulations + run.n_sims,
                       num_units=run.meas.num_units, disagreements=run.disagreements,
                       num_resumed=run.meas.num_resumed + run.n_resumed)


class _FastSearch:
    """State of one fast search (:func:`fast_search`)."""

    def __init__(self, settings: GoodputSettings, *, jobs: int, done: dict[str, GoodputResult],
                 on_record: Callable[[str, GoodputResult], None], on_candidate: Callable[[str], None],
                 target_rate: float | None) -> None:
        s = self.settings = settings
        self.clocks = Clocks()   # this search's step clocks: its screens and its pool measurements share them
        self.screen = Screen(s, self.clocks)
        self.meas = Measurer(s, on_unit=on_record, done={k: v for k, v in done.items() if k.startswith("unit/")},
                             clocks=self.clocks)
        self.jobs, self.done, self.on_record, self.on_candidate = jobs, done, on_record, on_candidate
        self.target_rate = target_rate
        self.results: dict[str, GoodputResult] = {}
        self.composed: dict[str, GoodputResult] = {}
        self.pruned: list[Pruned] = []
        self.bounds: dict[str, float] = {}
        self.heap: list[tuple[tuple[float, float], int, Fleet]] = []
        self.disagreements: list[str] = []
        self.n_sims = self.n_resumed = 0
        self.frontier = False
        self._mean_out = float(np.mean(s.workload.output_lengths))
        self._points: list[tuple[float, float]] = []   # (tokens/s per user, per device) composed
        #: lone requests under these settings by instance configurations (goodput.lone_key): the
        #: candidates share a few dozen configurations
        self._lone: dict[tuple[bool, tuple[InstanceConfig, ...]], LoneRequest] = {}

    def _dominated(self, c: Fleet, bound_pd: float) -> bool:
        """Frontier mode: a composed fleet is faster per user and per device than ``c`` can be."""
        user = self.screen.speed_per_user(c)
        dev = bound_pd * self._mean_out
        return any(u >= user and d >= dev for u, d in self._points)

    def _prune(self, c: Fleet, reason: str) -> None:
        self.pruned.append(Pruned(name=c.name, num_devices=c.num_devices, kind="bound", reason=reason,
                                  bound_rps=self.bounds.get(c.name)))
        self.on_candidate(c.name)

    def _push(self, i: int, c: Fleet) -> None:
        b = self.bounds[c.name]
        # per device, best bound first; or (target rate) fewest devices, best bound first
        # (ties: the larger fleet first, whose measurement bounds the smaller ones of its configuration)
        key = (-b / c.num_devices, -c.num_devices) if self.target_rate is None else (float(c.num_devices), -b)
        heapq.heappush(self.heap, (key, i, c))

    def seed(self, candidates: list[Fleet]) -> None:
        """Reject on the lone-request floor, bound the rest and queue them."""
        for i, c in enumerate(candidates):
            reason, _ = _zero_load(c, self.settings, clocks=self.clocks, memo=self._lone)
            if reason:
                self.results[c.name] = GoodputResult(candidate=c, goodput_rps=0.0, goodput_per_device=0.0,
                                                     status=GoodputStatus.REJECTED, reason=reason,
                                                     method=GoodputMethod.BOUND)
                self.on_candidate(c.name)
                continue
            b = self.bounds[c.name] = self.screen.fleet(c)
            if self.target_rate is not None and b < self.target_rate:
                self._prune(c, f"goodput bound {b:.3g} req/s is below the target rate {self.target_rate:g}")
                continue
            self._push(i, c)

    def branch_and_bound(self, candidates: list[Fleet]) -> None:
        """Compose candidates best bound first; prune those that cannot beat the best composed of
        their own architecture (collocated or disaggregated: the best of each is always found, so the
        ranking answers "collocated or disaggregated here")."""
        s, target = self.settings, self.target_rate
        best_pd = {False: 0.0, True: 0.0}   # best composed goodput per device, by is_disaggregated
        best_devices: int | None = None
        # a prefill pool serves more per instance the more instances share the stream (smoother
        # arrivals each), so the largest pool of a configuration bounds every smaller one per instance
        # (the same holds for round-robin collocated copies)
        n_max: dict[InstanceConfig, int] = {}
        for c in candidates:
            st = c.strategy
            cfg, n = (c.prefill, st.num_prefill) if c.prefill is not None else (c.collocated, st.num_collocated)
            assert cfg is not None
            n_max[cfg] = max(n_max.get(cfg, 0), n)
        refined: set[str] = set()
        while self.heap:
            key, i, c = heapq.heappop(self.heap)
            arch = c.is_disaggregated
            beaten = -key[0] <= best_pd[arch] and (not self.frontier or self._dominated(c, -key[0]))
            if c.name not in refined and not (target is None and beaten):
                refined.add(c.name)
                b = min(self.bounds[c.name], self._measured_bound(c, n_max))
                if b < self.bounds[c.name] * (1 - 1e-9):
                    self.bounds[c.name] = b
                    self._push(i, c)
                    continue
            if target is None and -key[0] <= best_pd[arch] and (not self.frontier or self._dominated(c, -key[0])):
                kind = "disaggregated" if arch else "collocated"
                self._prune(c, f"goodput bound {-key[0]:.3g} req/s per device is below the best {kind} found, "
                               f"{best_pd[arch]:.3g}" + (", and a faster fleet per user beats it" if self.frontier
                                                         else ""))
                continue
            if target is not None and self.bounds[c.name] < target:
                self._prune(c, f"goodput bound {self.bounds[c.name]:.3g} req/s (its largest pool measured) is below "
                               f"the target rate {target:g}")
                continue
            if target is not None and best_devices is not None and c.num_devices > best_devices:
                self._prune(c, f"{c.num_devices} devices; {best_devices} already reach {target:g} req/s")
                continue
            r = composed_result(self.meas.compose(c, self.screen), s)
            self.composed[c.name] = self.results[c.name] = r
            self.on_candidate(c.name)
            if r.status == GoodputStatus.OK:
                best_pd[arch] = max(best_pd[arch], r.goodput_per_device)
                if r.tpot_p > 0 and math.isfinite(r.tpot_p):
                    self._points.append((1.0 / r.tpot_p, r.output_tokens_per_s / c.num_devices))
                if target is not None and r.goodput_rps >= target * (1 - 1.1 * s.rel_tol):
                    best_devices = c.num_devices if best_devices is None else min(best_devices, c.num_devices)

    def _measured_bound(self, c: Fleet, n_max: dict[InstanceConfig, int]) -> float:
        """Bound from the largest pool of ``c``'s prefill (or collocated) configuration, measured:
        a smaller pool's per-instance goodput is no higher in truth (burstier arrivals each); the
        measurement's own tolerance is not added, so a smaller pool of the best configuration
        ties with it and is pruned (it cannot beat it beyond the bisection tolerance)."""
        tol = 1.0
        if c.prefill is not None:
            big = self.meas.prefill_pool(c.prefill, n_max[c.prefill])
            return c.strategy.num_prefill * big.goodput_rps / n_max[c.prefill] * tol
        assert c.collocated is not None
        one = self.meas.collocated_instance(c.collocated, n_max[c.collocated])
        return c.strategy.num_collocated * one.goodput_rps * tol

    def _best_confirmed(self, confirmed: dict[str, GoodputResult]) -> GoodputResult | None:
        good = [r for r in confirmed.values() if r.status == GoodputStatus.OK and r.goodput_rps > 0]
        if self.target_rate is not None:
            good = [r for r in good if r.goodput_rps >= self.target_rate]
            return min(good, key=lambda r: (r.candidate.num_devices, -r.goodput_rps), default=None)
        return max(good, key=lambda r: r.goodput_per_device, default=None)

    def confirm_best(self, confirm: int, strict: bool = False) -> None:
        """Simulate the best compositions whole: the best of each architecture (collocated and
        disaggregated), more of an architecture (up to :data:`MAX_CONFIRM` in all) while an
        unconfirmed composition of it still beats its best confirmed, and at least ``confirm`` in
        all; ``strict``: none after a batch with a disagreement. With a target rate: the fewest
        devices near the target first, until one reaches it."""
        s, target = self.settings, self.target_rate
        ok = sorted((r for r in self.composed.values() if r.status == GoodputStatus.OK),
                    key=lambda r: (-r.goodput_per_device, r.candidate.num_devices, r.name))
        confirmed: dict[str, GoodputResult] = {}
        if target is not None:  # near the target within the tolerance: the whole fleet decides
            ok = sorted((r for r in ok if r.goodput_rps >= target * (1 - 1.1 * s.rel_tol)),
                        key=lambda r: (r.candidate.num_devices, -r.goodput_rps, r.name))
            queue = list(ok)
            while queue and len(confirmed) < MAX_CONFIRM and not (strict and self.disagreements):
                top = self._best_confirmed(confirmed)
                if len(confirmed) >= confirm and top is not None and \
                        queue[0].candidate.num_devices >= top.candidate.num_devices:
                    break
                batch = queue[:confirm if not confirmed else CONFIRM_BATCH]
                queue = queue[len(batch):]
                self._confirm_batch(batch, confirmed)
            self.results.update(confirmed)
            return
        for arch in (False, True):  # the best of each architecture, simulated whole
            mine = [r for r in ok if r.candidate.is_disaggregated == arch]
            while mine and len(confirmed) < MAX_CONFIRM and not (strict and self.disagreements):
                best_pd = max((r.goodput_per_device for r in confirmed.values()
                               if r.candidate.is_disaggregated == arch and r.status == GoodputStatus.OK), default=None)
                if best_pd is not None and mine[0].goodput_per_device <= best_pd:
                    break
                batch = mine[:CONFIRM_BATCH]
                mine = mine[len(batch):]
                self._confirm_batch(batch, confirmed)
        queue = [r for r in ok if r.name not in confirmed]
        while queue and len(confirmed) < confirm and not (strict and self.disagreements):
            batch = queue[:confirm - len(confirmed)]
            queue = queue[len(batch):]
            self._confirm_batch(batch, confirmed)
        self.results.update(confirmed)

    def _confirm_batch(self, batch: list[GoodputResult], confirmed: dict[str, GoodputResult]) -> None:
        """Simulate ``batch`` whole (bracket at each composition), recording disagreements."""
        s = self.settings
        for r, resumed in _confirm(batch, s, self.jobs, self.done, self.clocks):
            self.n_resumed += resumed
            comp = self.composed[r.name]
            self.n_sims += r.num_simulations
            tol = 1.1 * max(s.abs_tol, s.rel_tol * comp.goodput_rps)
            r = replace(r, method=GoodputMethod.CONFIRMED, composed_rps=comp.goodput_rps)
            if abs(r.goodput_rps - comp.goodput_rps) > tol:
                self.disagreements.append(f"{r.name}: composed {comp.goodput_rps:.3g} req/s, whole fleet "
                                          f"{r.goodput_rps:.3g} req/s")
            confirmed[r.name] = r
            if not resumed:
                self.on_record(r.name, r)


def _confirm(batch: list[GoodputResult], settings: GoodputSettings, jobs: int,
             done: dict[str, GoodputResult], clocks: Clocks) -> list[tuple[GoodputResult, bool]]:
    """Whole-fleet goodput of each composed result, the bracket starting at its composition, and
    whether it came from the checkpoint."""
    out: list[tuple[GoodputResult, bool]] = []
    todo = []
    for r in batch:
        prev = done.get(r.name)
        if prev is not None and prev.method is GoodputMethod.CONFIRMED:
            out.append((replace(prev, num_simulations=0), True))
        else:
            todo.append(r)
    if jobs <= 1 or len(todo) <= 1:
        out += [(max_goodput(r.candidate, settings, guess=r.goodput_rps, clocks=clocks), False) for r in todo]
        return out
    with worker_pool(min(jobs, len(todo))) as pool:  # workers end with this process, even on SIGKILL
        futs = [pool.submit(_whole, r.candidate, settings, r.goodput_rps) for r in todo]
        out += [(f.result(), False) for f in futs]
    return out


def _whole(cand: Fleet, settings: GoodputSettings, guess: float) -> GoodputResult:
    return max_goodput(cand, settings, guess=guess, clocks=worker_clocks())
