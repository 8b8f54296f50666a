"""A day of traffic: the fleet per interval, and the autoscaled day simulated end to end.

The unit of scaling is a *replica*: one copy of the best strategy's fleet (``2m-tp4``, ``1p1d``)
with its goodput ``G`` (req/s within the SLO, :mod:`serveplan.optimize.goodput`).

**Replicas per interval.** For rate ``r_i`` of interval ``i``: ``n_i = max(min_replicas,
ceil(r_i / (u G)))`` (capped at ``max_replicas`` when given), the fewest replicas that each stay at
or below the share ``u`` (``utilization``, default 1) of their goodput.

**Policy** (:class:`ScalingPolicy`), with ``D = ceil(scale_down_delay / interval)``:

* ``scheduled`` (the rates are known ahead, a forecast): a replica needed from interval ``i`` is
  started ``scale_up_s`` before the interval, so it serves from its start;
* ``reactive`` (an autoscaler that reads the last interval's rate): the count for interval ``i``
  follows ``n_{i-1}`` (``n_0`` for the first), and a replica added at the interval's start serves
  ``scale_up_s`` later.

Either way the count kept is the highest recommendation over the last ``D + 1`` intervals (the
scale-down stabilization window of Kubernetes' HorizontalPodAutoscaler,
``behavior.scaleDown.stabilizationWindowSeconds``, default 300 s: kubernetes.io, "Horizontal Pod
Autoscaling"); a replica removed is the newest (last in, first out) and drains: it takes no new
request and finishes those it holds. Under ``scheduled``, a replica that would be started again
within ``scale_up_s`` is kept instead of removed.

**Scale-up latency** (:func:`scale_up_time`): ``weights per device / storage read bandwidth`` (every
device of the replica reads its own shard in parallel from the host's local drive) plus the
engine's start-up without the weights (process start, memory profiling, KV-cache allocation,
``torch.compile`` and CUDA-graph capture). Both figures and their sources are in the result.

**The day, simulated end to end** (:func:`simulate_day`): requests reach a replica chosen at
random among those serving (a random split). A random split of a Poisson stream of rate
``r(t)`` over ``A(t)`` replicas gives each replica an independent Poisson stream of rate
``r(t) / A(t)`` while it serves (the thinning property of Poisson processes, which holds for a
time-varying rate and a time-varying ``A``), so the fleet is simulated exactly by simulating each
replica *slot* on its own: slot ``j`` serves while the ``j``-th replica of the last-in-first-out
stack is up, and takes ``r(t) / A(t)`` req/s then; it runs through the whole day in one
simulation (:func:`serveplan.sim.engine.simulate`), so queues carry over from interval to
interval and a replica removed drains. Slots that serve over the same windows are exchangeable
(one is simulated, weighted by their number); above ``sim_replicas`` distinct slots, contiguous
groups of slots are represented by their middle one, weighted by the group's expected requests.

Above ``sim_requests`` expected requests the day is *sampled in time*: as many intervals as the
budget allows are simulated over ``[t_i - warmup, t_i + 60 s)``, the requests arriving in ``[t_i,
t_i + 60 s)`` counted: intervals whose window holds a change of the fleet (a replica starting to
serve, or removed; up to half the budget while steady intervals remain), each standing for the
changing intervals nearest to it, and intervals spread evenly over the steady ones, each standing
for the steady intervals nearest to it; weighted by their requests. A
window opens at its interval's start, where the rate steps, so the transient the policy causes is
inside it; a backlog older than the warm-up is not carried (the replica drains between windows).
Simulating every request of a busy day costs minutes (about 2 us per output token at large
batches), so the budget decides; the result says which mode ran.

**Attainment**: the share of requests (weighted as above) whose TTFT and TPOT both meet the
targets, each within the SLO tolerance the goodput was found with (``target * (1 +
relaxation)``); a request unfinished at the end of the run misses. The SLO at percentile ``P`` is
met over a stretch when this share is at least ``P``%.

**Cost and energy**: GPU-hours count every replica from its start (boot) to its removal within the
day, times its devices; dollars are GPU-hours times the price per GPU-hour. Power per replica at
per-replica rate ``x`` comes from the power model (:func:`serveplan.optimize.economics.economics`)
on a grid of rates up to ``G``, linearly interpolated; a replica starting up draws its devices'
idle and host power. Joules per day integrate over the pieces where rate and counts are constant.
Provisioning for the peak keeps ``max_i n_i`` replicas all day and is simulated the same way.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from serveplan.errors import SpecError, check_int, check_number
from serveplan.estimator.power import host_power_w, idle_power_w
from serveplan.optimize.economics import economics
from serveplan.optimize.goodput import GoodputResult, GoodputSettings
from serveplan.sim.clock import Clocks
from serveplan.sim.engine import simulate
from serveplan.sim.traffic import RateSeries, poisson_arrivals
from serveplan.sim.workload import LENGTH_STREAM, Workload
from serveplan.specs.prices import Price

#: Engine start-up without loading the weights, seconds: vLLM serving Llama-3.2 on Kubernetes with
#: its torch.compile cache reused, from the process start to the first answer 59 s, of which loading
#: the weights 0.9 s ("init engine (profile, create kv cache, warmup model) took 34.11 seconds",
#: graph capture 17 s, ~25 s before it not logged): vllm-project/vllm issue #20264 (2025-06-30).
ENGINE_STARTUP_S = 58.0
ENGINE_STARTUP_SOURCE = ("vLLM start-up without weights: 59 s to the first answer less 0.9 s of weight "
                         "loading (init engine 34 s incl. CUDA-graph capture 17 s; torch.compile cache reused), "
                         "vllm-project/vllm#20264")
#: the host whose local-drive read rate loads the weights by default (specs/data/hosts)
LOAD_HOST = "dgx-h100"
#: seconds counted per sampled interval when the day is sampled in time
SAMPLE_S = 60.0
#: power-model grid points per replica between 0 and the goodput
POWER_POINTS = 9


class Policy(str, Enum):
    """How the replica count follows the traffic (module doc)."""

    SCHEDULED = "scheduled"
    REACTIVE = "reactive"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleUpTime:
    """Seconds from starting a replica to its first request, and where each figure came from."""

    weights_bytes_per_device: float
    load_bandwidth: float
    load_s: float
    startup_s: float
    total_s: float
    load_source: str
    startup_source: str
    given: bool = False          # total given by the user (--scale-up), not computed

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__slots__}


def scale_up_time(weights_bytes_per_device: float, load_bandwidth: float, startup_s: float = ENGINE_STARTUP_S, *,
                  load_source: str = "", startup_source: str = ENGINE_STARTUP_SOURCE,
                  total_s: float | None = None) -> ScaleUpTime:
    """``weights / bandwidth + startup`` (module doc); ``total_s`` replaces the sum when given."""
    check_number("load-bandwidth", load_bandwidth, low=0, low_open=True, unit="bytes per second")
    check_number("startup", startup_s, low=0, unit="seconds")
    load = weights_bytes_per_device / load_bandwidth
    if total_s is not None:
        check_number("scale-up", total_s, low=0, unit="seconds")
    return ScaleUpTime(weights_bytes_per_device=weights_bytes_per_device, load_bandwidth=load_bandwidth, load_s=load,
                       startup_s=startup_s, total_s=load + startup_s if total_s is None else float(total_s),
                       load_source=load_source, startup_source=startup_source, given=total_s is not None)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalingPolicy:
    """The autoscaler: policy, replica bounds, scale-up latency and scale-down delay (module doc)."""

    policy: Policy | str = Policy.SCHEDULED
    min_replicas: int = 1
    max_replicas: int | None = None
    scale_up_s: float = 0.0
    scale_down_delay_s: float = 300.0
    #: share of its goodput each replica is planned at (1: up to the goodput)
    utilization: float = 1.0

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "policy", Policy(self.policy))
        except ValueError:
            raise SpecError(f"policy={self.policy!r}; expected one of: "
                            f"{', '.join(p.value for p in Policy)}") from None
        check_int("min-replicas", self.min_replicas, low=1, why="a replica serves the first request of the day")
        if self.max_replicas is not None:
            check_int("max-replicas", self.max_replicas, low=self.min_replicas,
                      why="at least min-replicas")
        check_number("scale-up", self.scale_up_s, low=0, unit="seconds")
        check_number("scale-down-delay", self.scale_down_delay_s, low=0, unit="seconds")
        check_number("utilization", self.utilization, low=0, high=1, low_open=True,
                     why="share of a replica's goodput it is planned at")


@dataclass(frozen=True, slots=True)
class Replica:
    """One replica's life in the day: started (``boot_s``), serving from ``ready_s`` until
    ``stop_s`` (``inf``: to the end), at stack position ``slot``."""

    slot: int
    boot_s: float
    ready_s: float
    stop_s: float


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Schedule:
    """Replicas over the day: per interval the replicas needed, and every replica's life."""

    traffic: RateSeries
    needed: np.ndarray            # n_i (module doc)
    replicas: tuple[Replica, ...]

    @property
    def num_slots(self) -> int:
        return 1 + max(r.slot for r in self.replicas)

    def pieces(self, extra: np.ndarray | None = None) -> np.ndarray:
        """Breakpoints (s) within the day where rate or counts change (plus ``extra``)."""
        t_end = self.traffic.duration_s
        pts = [self.traffic.edges]
        pts.append(np.array([x for r in self.replicas for x in (r.boot_s, r.ready_s, r.stop_s)
                             if 0.0 < x < t_end]))
        if extra is not None:
            pts.append(extra[(extra > 0) & (extra < t_end)])
        return np.unique(np.concatenate(pts))

    def counts_at(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(serving, starting)`` replicas at times ``t``."""
        serving = np.zeros(len(t), dtype=np.int64)
        starting = np.zeros(len(t), dtype=np.int64)
        for r in self.replicas:
            serving += (t >= r.ready_s) & (t < r.stop_s)
            starting += (t >= r.boot_s) & (t < r.ready_s) & (t < r.stop_s)
        return serving, starting

    def serving_slot(self, slot: int, t: np.ndarray) -> np.ndarray:
        """Whether slot ``slot`` serves at times ``t``."""
        on = np.zeros(len(t), dtype=bool)
        for r in self.replicas:
            if r.slot == slot:
                on |= (t >= r.ready_s) & (t < r.stop_s)
        return on

    def windows(self, slot: int) -> tuple[tuple[float, float], ...]:
        """The slot's serving windows within the day."""
        t_end = self.traffic.duration_s
        return tuple(sorted((max(0.0, r.ready_s), min(t_end, r.stop_s)) for r in self.replicas
                            if r.slot == slot and r.ready_s < min(t_end, r.stop_s)))

    def interval_means(self) -> tuple[np.ndarray, np.ndarray]:
        """Time-averaged ``(serving, provisioned)`` replicas per interval (provisioned: serving or starting)."""
        b = self.pieces()
        mid = (b[:-1] + b[1:]) / 2
        s, st = self.counts_at(mid)
        w = np.diff(b)
        idx = np.minimum((mid // self.traffic.interval_s).astype(np.int64), self.traffic.num_intervals - 1)
        n = self.traffic.num_intervals
        serving = np.bincount(idx, weights=s * w, minlength=n) / self.traffic.interval_s
        prov = np.bincount(idx, weights=(s + st) * w, minlength=n) / self.traffic.interval_s
        return serving, prov

    def replica_seconds(self) -> float:
        """Replica-seconds paid within the day (start to removal)."""
        t_end = self.traffic.duration_s
        return float(sum(max(0.0, min(t_end, r.stop_s) - max(0.0, r.boot_s)) for r in self.replicas))


def replicas_needed(rates: np.ndarray, goodput_rps: float, policy: ScalingPolicy) -> np.ndarray:
    """``n_i = max(min_replicas, ceil(r_i / (u G)))``, capped at ``max_replicas`` (module doc)."""
    check_number("goodput", goodput_rps, low=0, low_open=True, unit="requests per second")
    per = goodput_rps * policy.utilization
    n = np.maximum(policy.min_replicas, np.ceil(np.asarray(rates) / per - 1e-9)).astype(np.int64)
    if policy.max_replicas is not None:
        n = np.minimum(n, policy.max_replicas)
    return n


def plan_schedule(traffic: RateSeries, goodput_rps: float, policy: ScalingPolicy) -> Schedule:
    """Replicas over the day under ``policy`` (module doc)."""
    needed = replicas_needed(traffic.rates, goodput_rps, policy)
    n, step = len(needed), traffic.interval_s
    rec = needed.copy() if policy.policy is Policy.SCHEDULED else np.concatenate([needed[:1], needed[:-1]])
    hold = int(math.ceil(policy.scale_down_delay_s / step - 1e-9))
    kept = np.array([rec[max(0, i - hold): i + 1].max() for i in range(n)])
    lead = policy.scale_up_s
    if policy.policy is Policy.SCHEDULED and lead > 0:
        ahead = max(0, int(math.ceil(lead / step - 1e-9)) - 1)   # restarts within the lead: keep instead
        kept = np.array([max(kept[i], kept[i + 1: i + 1 + ahead].max(initial=0)) for i in range(n)])
    stack: list[list[float]] = []      # [slot, boot, ready] of live replicas, oldest first
    done: list[Replica] = []
    for _ in range(int(kept[0])):
        stack.append([len(stack), -lead, 0.0])
    for i in range(1, n):
        t = i * step
        while len(stack) > kept[i]:
            slot, boot, ready = stack.pop()
            done.append(Replica(int(slot), boot, ready, t))
        while len(stack) < kept[i]:
            if policy.policy is Policy.SCHEDULED:
                stack.append([len(stack), t - lead, t])
            else:
                stack.append([len(stack), t, t + lead])
    done += [Replica(int(s), b, r, math.inf) for s, b, r in stack]
    return Schedule(traffic=traffic, needed=needed, replicas=tuple(sorted(done, key=lambda r: (r.slot, r.boot_s))))


def peak_schedule(traffic: RateSeries, goodput_rps: float, policy: ScalingPolicy) -> Schedule:
    """``max_i n_i`` replicas serving all day (provisioning for the peak)."""
    needed = replicas_needed(traffic.rates, goodput_rps, policy)
    peak = int(needed.max())
    return Schedule(traffic=traffic, needed=np.full(len(needed), peak),
                    replicas=tuple(Replica(j, -policy.scale_up_s, 0.0, math.inf) for j in range(peak)))


# ------------------------------------------------------------------------------------------ simulation
@dataclass(frozen=True, slots=True, kw_only=True)
class DayRun:
    """One day simulated (module doc): attainment overall and per interval, and how it was run."""

    attainment: float                 # share of requests meeting both targets (weighted)
    attainment_by_interval: np.ndarray  # per interval (NaN: no request counted)
    requests_simulated: int
    requests_represented: float       # expected requests of the day the sample stands for
    slots_simulated: int
    num_slots: int
    mode: str                         # "whole day" or "sampled: ..."
    measured_s: float                 # seconds counted per interval
    warmup_s: float
    elapsed_s: float

    def to_dict(self) -> dict[str, Any]:
        d = {f: getattr(self, f) for f in self.__slots__}
        d["attainment_by_interval"] = [None if not math.isfinite(v) else float(v)
                                       for v in self.attainment_by_interval]
        return d


def _slot_groups(sched: Schedule, limit: int, expected: np.ndarray) -> list[tuple[int, float]]:
    """``(slot simulated, weight)``: one slot per set of exchangeable slots, or per contiguous group
    of them when there are more than ``limit`` sets (module doc)."""
    groups: dict[tuple[tuple[float, float], ...], list[int]] = {}
    for j in range(sched.num_slots):
        groups.setdefault(sched.windows(j), []).append(j)
    sets = sorted(groups.values(), key=lambda g: g[0])
    sets = [g for g in sets if expected[g[0]] > 0]
    if len(sets) <= limit:
        return [(g[0], float(len(g))) for g in sets]
    out = []
    for chunk in np.array_split(np.arange(len(sets)), limit):
        if not len(chunk):
            continue
        members = [sets[k] for k in chunk]
        pick = members[len(members) // 2][0]
        total = sum(expected[j] for g in members for j in g)
        out.append((pick, float(total / expected[pick])))
    return out


def _spread(pool: np.ndarray, k: int) -> np.ndarray:
    """``k`` members of ``pool`` spread evenly over it (all when ``k >= len(pool)``)."""
    if k <= 0 or not len(pool):
        return pool[:0]
    return pool[np.unique(np.round(np.linspace(0, len(pool) - 1, min(k, len(pool)))).astype(np.int64))]


def simulate_day(sched: Schedule, result: GoodputResult, settings: GoodputSettings, *, sim_requests: int = 20_000,
                 sim_replicas: int = 4, warmup_s: float = 60.0, seed: int = 0,
                 clocks: Clocks | None = None) -> DayRun:
    """Simulate the day under ``sched`` end to end (module doc).

    Parameters
    ----------
    sim_requests:
        Budget of simulated requests; above it the day is sampled in time.
    sim_replicas:
        Most replica slots simulated (exchangeable ones count once).
    warmup_s:
        Seconds simulated before each sampled window and not counted.
    """
    check_int("sim-requests", sim_requests, low=1000)
    check_int("sim-replicas", sim_replicas, low=1)
    check_number("sim-warmup", warmup_s, low=0, unit="seconds")
    t0 = time.perf_counter()
    clocks = clocks if clocks is not None else Clocks()
    tr = sched.traffic
    step, t_end, n_int = tr.interval_s, tr.duration_s, tr.num_intervals
    # expected requests per slot over the whole day (to weight groups and size the budget)
    b = sched.pieces()
    mid = (b[:-1] + b[1:]) / 2
    serving, _ = sched.counts_at(mid)
    lam = tr.rates[np.minimum((mid // step).astype(np.int64), n_int - 1)]
    per = np.where(serving > 0, lam / np.maximum(serving, 1), 0.0) * np.diff(b)
    expected = np.array([float(np.sum(per[sched.serving_slot(j, mid)])) for j in range(sched.num_slots)])
    picks = _slot_groups(sched, sim_replicas, expected)
    total = float(sum(expected[j] for j, _ in picks))
    starts = tr.edges[:-1]
    measured, warm = step, 0.0
    sampled = np.arange(n_int)
    transitions = sampled[:0]
    hit = np.zeros(n_int, dtype=bool)
    mode = "whole day"
    if total > sim_requests:
        # sample intervals, each simulated over [t_i - warm, t_i + measured): first those whose window
        # holds a change of the fleet (a replica starting to serve or removed), then evenly spread
        measured, warm = min(step, SAMPLE_S), min(warmup_s, step)
        per_interval = total / tr.duration_s * (warm + measured) if tr.duration_s > 0 else 0.0
        k = int(max(1, min(n_int, sim_requests // max(per_interval, 1.0))))
        changes = np.array([x for r in sched.replicas for x in (r.ready_s, r.stop_s) if 0.0 < x < t_end])
        hit = np.zeros(n_int, dtype=bool)
        for x in changes:
            hit[int(min(n_int - 1, max(0.0, x // step)))] = True        # t_i <= x < t_i + step
            nxt = int(x // step) + 1
            if nxt < n_int and starts[nxt] - x <= warm:
                hit[nxt] = True                                          # in the next window's warm-up
        pool_tr, pool_st = np.flatnonzero(hit), np.flatnonzero(~hit)
        # at most half the budget to the changes while there are steady intervals to stand for
        k_tr = min(len(pool_tr), k if not len(pool_st) else max(1, k // 2))
        transitions = _spread(pool_tr, k_tr)
        steady = _spread(pool_st, k - len(transitions))
        sampled = np.unique(np.concatenate([transitions, steady])).astype(np.int64)
        mode = (f"sampled: {len(sampled)} of {n_int} intervals ({len(transitions)} where the fleet changes), each its "
                f"first {measured:g} s after {warm:g} s of warm-up (budget {sim_requests:,} requests; --sim-requests)")
    extra = None
    if mode != "whole day":
        extra = np.concatenate([starts[sampled] - warm, starts[sampled] + measured])
    b = sched.pieces(extra)
    mid = (b[:-1] + b[1:]) / 2
    serving, _ = sched.counts_at(mid)
    idx = np.minimum((mid // step).astype(np.int64), n_int - 1)
    lam = tr.rates[idx]
    if mode == "whole day":
        sim_on = np.ones(len(mid), dtype=bool)
        counted = sim_on
    else:
        chosen = np.zeros(n_int + 1, dtype=bool)
        chosen[sampled] = True
        pos = mid - idx * step                          # time into the interval
        nxt = (idx + 1) * step - mid                    # time to the next interval's start
        counted = chosen[idx] & (pos < measured)
        sim_on = counted | (chosen[idx + 1] & (nxt < warm))
    slo = settings.slo
    tol = 1.0 + settings.relaxation
    wl = settings.workload
    met_w = np.zeros(n_int)
    all_w = np.zeros(n_int)
    simulated = 0
    represented = 0.0
    for j, weight in picks:
        on = sched.serving_slot(j, mid) & sim_on & (serving > 0)
        rate = np.where(on, lam / np.maximum(serving, 1), 0.0)
        rng = np.random.default_rng([int(seed), 0xDA7, j])
        arrival = poisson_arrivals(b, rate, rng)
        if not len(arrival):
            continue
        pick = np.random.default_rng([int(seed), LENGTH_STREAM, j]).integers(0, wl.num_requests, len(arrival))
        day_wl = Workload(input_lengths=wl.input_lengths[pick], output_lengths=wl.output_lengths[pick],
                          arrival="trace", trace_times=arrival, name=f"slot {j}")
        res = simulate(settings.simulation_config(result.candidate, workload=day_wl, seed=seed), clocks=clocks)
        rec = res.requests
        at = np.minimum((rec.arrival // step).astype(np.int64), n_int - 1)
        keep = counted[np.clip(np.searchsorted(b, rec.arrival, side="right") - 1, 0, len(mid) - 1)]
        ok = (rec.ttft <= slo.ttft_s * tol) & ((rec.output_len <= 1) | (rec.tpot <= slo.tpot_s * tol))
        ok &= np.isfinite(rec.ttft)
        met_w += np.bincount(at[keep], weights=ok[keep].astype(float), minlength=n_int) * weight
        all_w += np.bincount(at[keep], minlength=n_int) * weight
        simulated += len(arrival)
        represented += expected[j] * weight
    with np.errstate(invalid="ignore", divide="ignore"):
        by = np.where(all_w > 0, met_w / np.maximum(all_w, 1e-300), np.nan)
    if mode == "whole day":
        att = float(met_w.sum() / all_w.sum()) if all_w.sum() > 0 else math.nan
    else:
        # a sampled interval where the fleet changes stands for the changing intervals nearest to it,
        # a steady one for the steady intervals nearest to it; each weighted by those requests
        req = tr.rates * step
        wts = np.zeros(len(sampled))
        for pool in (np.flatnonzero(hit), np.flatnonzero(~hit)):
            mine = np.isin(sampled, pool)
            chosen = sampled[mine]
            if len(chosen) and len(pool):
                near = np.abs(pool[:, None] - chosen[None, :]).argmin(axis=1)
                wts[mine] = np.bincount(near, weights=req[pool], minlength=len(chosen))
        ok = np.isfinite(by[sampled]) & (wts > 0)
        att = float(np.sum(wts[ok] * by[sampled][ok]) / np.sum(wts[ok])) if ok.any() else math.nan
    del t_end
    return DayRun(attainment=att, attainment_by_interval=by, requests_simulated=simulated,
                  requests_represented=represented, slots_simulated=len(picks), num_slots=sched.num_slots,
                  mode=mode, measured_s=measured, warmup_s=warm, elapsed_s=time.perf_counter() - t0)


# ------------------------------------------------------------------------------------------ economics
@dataclass(frozen=True, slots=True, kw_only=True)
class PowerCurve:
    """Power of one replica (W, devices and their host share) against its request rate."""

    rates_rps: np.ndarray
    power_w: np.ndarray
    starting_w: float        # a replica starting up: idle devices and host

    def at(self, rate: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.asarray(np.interp(np.asarray(rate, dtype=float), self.rates_rps, self.power_w))
        return out


def power_curve(result: GoodputResult, settings: GoodputSettings, clocks: Clocks | None = None) -> PowerCurve | None:
    """The power model on :data:`POWER_POINTS` rates up to the goodput (None: no board power)."""
    dev = settings.hardware
    if not dev.board_power_w:
        return None
    nd = result.candidate.num_devices
    idle = nd * (idle_power_w(dev) + host_power_w(dev))
    g = result.goodput_rps
    rates = [0.0]
    power = [idle]
    for x in np.linspace(g / POWER_POINTS, g, POWER_POINTS):
        e = economics(result, settings, target_rate=float(x), clocks=clocks)
        if e.fleet_power_w is None:
            return None
        rates.append(float(x))
        power.append(float(e.fleet_power_w))
    return PowerCurve(rates_rps=np.array(rates), power_w=np.array(power), starting_w=idle)


@dataclass(frozen=True, slots=True, kw_only=True)
class DayCost:
    """GPU-hours, dollars and joules of one schedule over the day (module doc)."""

    gpu_hours: float
    usd: float | None
    joules: float | None
    replica_hours: float
    peak_replicas: int
    mean_serving: float

    @property
    def kwh(self) -> float | None:
        return None if self.joules is None else self.joules / 3.6e6

    def to_dict(self) -> dict[str, Any]:
        d = {f: getattr(self, f) for f in self.__slots__}
        d["kwh"] = self.kwh
        return d


def day_cost(sched: Schedule, devices_per_replica: int, price: Price | None, power: PowerCurve | None) -> DayCost:
    """Cost and energy of ``sched`` (module doc)."""
    rs = sched.replica_seconds()
    gpu_h = rs * devices_per_replica / 3600.0
    b = sched.pieces()
    mid = (b[:-1] + b[1:]) / 2
    serving, starting = sched.counts_at(mid)
    tr = sched.traffic
    lam = tr.rates[np.minimum((mid // tr.interval_s).astype(np.int64), tr.num_intervals - 1)]
    joules = None
    if power is not None:
        per = np.where(serving > 0, lam / np.maximum(serving, 1), 0.0)
        joules = float(np.sum((serving * power.at(per) + starting * power.starting_w) * np.diff(b)))
    mean_serving = float(np.sum(serving * np.diff(b)) / tr.duration_s)
    return DayCost(gpu_hours=gpu_h, usd=None if price is None else gpu_h * price.usd_per_gpu_hour, joules=joules,
                   replica_hours=rs / 3600.0, peak_replicas=int(serving.max()), mean_serving=mean_serving)


@dataclass(frozen=True, slots=True, kw_only=True)
class DayPlan:
    """The plan for a day of traffic: the schedule, its cost and simulation, against the peak's."""

    traffic: RateSeries
    unit: GoodputResult
    policy: ScalingPolicy
    scale_up: ScaleUpTime
    schedule: Schedule
    peak: Schedule
    cost: DayCost
    peak_cost: DayCost
    run: DayRun | None
    peak_run: DayRun | None
    price: Price | None = None
    percentile: float = 90.0          # the SLO percentile attainment is compared with
    notes: tuple[str, ...] = field(default_factory=tuple)

    def intervals(self) -> list[dict[str, Any]]:
        """One row per interval: start, rate, replicas needed, serving and provisioned (time
        averages), devices, the simulated attainment."""
        serving, prov = self.schedule.interval_means()
        nd = self.unit.candidate.num_devices
        att = self.run.attainment_by_interval if self.run is not None else np.full(len(serving), np.nan)
        patt = self.peak_run.attainment_by_interval if self.peak_run is not None else np.full(len(serving), np.nan)
        rows = []
        for i, t in enumerate(self.traffic.edges[:-1]):
            rows.append({"start_s": float(t), "rate_rps": float(self.traffic.rates[i]),
                         "replicas_needed": int(self.schedule.needed[i]), "replicas_serving": float(serving[i]),
                         "replicas_provisioned": float(prov[i]), "devices_provisioned": float(prov[i] * nd),
                         "attainment": None if not math.isfinite(att[i]) else float(att[i]),
                         "peak_attainment": None if not math.isfinite(patt[i]) else float(patt[i])})
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {"traffic": self.traffic.to_dict(), "unit": self.unit.to_dict(),
                "policy": {"policy": str(self.policy.policy), "min_replicas": self.policy.min_replicas,
                           "max_replicas": self.policy.max_replicas, "scale_up_s": self.policy.scale_up_s,
                           "scale_down_delay_s": self.policy.scale_down_delay_s,
                           "utilization": self.policy.utilization},
                "scale_up": self.scale_up.to_dict(), "price": None if self.price is None else self.price.to_dict(),
                "autoscaled": {**self.cost.to_dict(),
                               "simulation": None if self.run is None else self.run.to_dict()},
                "peak": {**self.peak_cost.to_dict(),
                         "simulation": None if self.peak_run is None else self.peak_run.to_dict()},
                "slo_percentile": self.percentile, "intervals": self.intervals(), "notes": list(self.notes)}


__all__ = ["ENGINE_STARTUP_S", "ENGINE_STARTUP_SOURCE", "LOAD_HOST", "DayCost", "DayPlan", "DayRun", "Policy",
           "PowerCurve", "Replica", "ScaleUpTime", "ScalingPolicy", "Schedule", "day_cost", "peak_schedule",
           "plan_schedule", "power_curve", "replicas_needed", "scale_up_time", "simulate_day"]
