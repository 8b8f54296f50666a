"""Goodput of one strategy: the highest arrival rate at which the SLO holds (BestServe §11).

Algorithm 8 (bisection on the rate) with Algorithm 9's check, made cheaper and sounder:

* **Bracket.** Lower bound 0.1 req/s as in the paper (a strategy that misses the SLO there is
  rejected). The paper's upper bound ``1.2 / T_min`` is read as 1.2 times an analytic capacity of
  the fleet: each role's instances at full batch, from the estimator (the "optimistic serving rate"
  of §11.3); if that rate still meets the SLO the bracket is widened.
* **Common random numbers.** Every rate uses the same seeded base arrival sequence rescaled by
  the rate (the simulator's workload contract), so P90 against rate is smooth and the bisection
  stable.
* **Early stop.** A run at a rate that is clearly infeasible stops as soon as the SLO is certain
  to be missed (``SimulationConfig.early_stop``).
* **Check.** ``P(pct) TTFT <= (1 + tau) * target`` and the same for TPOT, with the paper's
  relaxation ``tau = 0.1`` by default; or ``tau = 0`` with several seeds and a confidence interval
  over the goodputs (``seeds > 1``), which is the statistical alternative to relaxing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

import numpy as np

from serveplan.errors import SpecError
from serveplan.estimator.batch import StepBatch
from serveplan.estimator.static import decode_times
from serveplan.sim import SLO, Fidelity, Fleet, SimulationConfig, SimulationResult, Workload, simulate
from serveplan.sim.clock import Clocks
from serveplan.sim.deployment import Deployment, resolve
from serveplan.sim.engine import LoneRequest, lone_request
from serveplan.sim.fleet import InstanceConfig
from serveplan.specs.catalog import get_engine
from serveplan.specs.engine import EngineSpec
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.model import ModelSpec
from serveplan.specs.profile import EfficiencyProfile
from serveplan.units import DType

#: BestServe Algorithm 8, L4: pessimistic lower bound of the bisection (req/s).
LOWER_RATE = 0.1
#: The stationarity check (``_Runner._holds``): a run whose middle or last third's SLO margin is at
#: least this share of the limit, and above its first third's by more than ``RISE``, is simulated
#: again on a stream ``LONG_FACTOR`` times longer. Chosen, not fitted: 0.75 and 10% leave a steady
#: tail's sampling noise (a P90 over a third of 2,000 requests moves a few percent between seeds)
#: outside the check, and catch the slow drift of a fleet near saturation (a KV-bound Llama-3.1-70B
#: instance whose thirds read 0.50, 0.89, 0.59 of the limit on 1,200 requests misses it on 3,600);
#: 3x is the longer stream the acceptance criterion names.
CLOSE_MARGIN = 0.75
RISE = 0.10
LONG_FACTOR = 3


class GoodputStatus(str, Enum):
    """Outcome of a goodput search."""

    OK = "ok"                # a positive rate meets the SLO
    REJECTED = "rejected"    # even a lone request, or the 0.1 req/s floor, misses it


class GoodputMethod(str, Enum):
    """How a :class:`GoodputResult`'s goodput was found (its ``method``; a ``str`` enum, so
    ``r.method == "composed"`` holds and records keep the plain string)."""

    WHOLE = ""                # this fleet simulated whole (Algorithm 8)
    COMPOSED = "composed"     # from pool measurements (:mod:`serveplan.optimize.compose`)
    CONFIRMED = "confirmed"   # composed, then simulated whole (``composed_rps`` keeps the composition)
    BOUND = "bound"           # rejected analytically
    CUT = "cut"               # search ended below the rate to beat (``max_goodput(beat=...)``)

    def __str__(self) -> str:
        return self.value


class SloCheck(str, Enum):
    """Which targets a goodput search checks: both, or only TTFT (a prefill pool measured alone)
    or only TPOT (a decode pool measured alone, :mod:`serveplan.optimize.compose`)."""

    BOTH = "both"
    TTFT = "ttft"
    TPOT = "tpot"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: str | SloCheck) -> SloCheck:
        try:
            return cls(value)
        except ValueError:
            raise SpecError(f"check={value!r}; expected one of: {', '.join(c.value for c in cls)}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class GoodputSettings:
    """Everything but the strategy: specs, workload, SLO and search tolerances."""

    model: ModelSpec
    hardware: DeviceSpec
    profile: EfficiencyProfile
    workload: Workload
    slo: SLO
    dtype: DType | None = None
    relaxation: float = 0.1       # BestServe Algorithm 9 tau
    rel_tol: float = 0.05         # stop when (hi - lo) <= 1.1 * rel_tol * lo (Algorithm 8 epsilon, relative)
    abs_tol: float = 0.001        # ... or hi - lo <= abs_tol req/s (Algorithm 8 epsilon)
    seeds: int = 1                # > 1: repeat with seeds seed..seed+seeds-1 and report a CI
    seed: int = 0
    fidelity: Fidelity = Fidelity.ITERATION
    #: serving engine (its memory rule, KV format and block, kernels, host work and scheduler options;
    #: the fleets carry its limits): today's vLLM by default; ``"bestserve"`` the paper's testbed;
    #: ``None``: the fleet's settings alone, no engine
    engine: str | EngineSpec | None = "vllm"
    kv_dtype: DType | None = None
    #: reject a rate whose SLO holds over the stream but not in its steady state (``_Runner._holds``);
    #: None: on, except for BestServe's testbed, whose reproduction keeps the paper's Algorithm 9 check
    steady_state: bool | None = None

    @property
    def checks_steady_state(self) -> bool:
        if self.steady_state is not None:
            return self.steady_state
        if self.engine is None:
            return True
        return (get_engine(self.engine) if isinstance(self.engine, str) else self.engine).steady_state_check

    def __post_init__(self) -> None:
        object.__setattr__(self, "fidelity", Fidelity.parse(self.fidelity))
        if self.relaxation < 0:
            raise SpecError(f"relaxation={self.relaxation} must be >= 0")
        if not 0 < self.rel_tol < 1:
            raise SpecError(f"tolerance (rel_tol)={self.rel_tol} must be in (0, 1), e.g. 0.05")
        if self.seeds < 1:
            raise SpecError(f"seeds={self.seeds} must be a positive integer")

    def simulation_config(self, cand: Fleet, *, rate: float = 1.0, workload: Workload | None = None,
                          slo: SLO | None = None, seed: int | None = None,
                          early_stop: bool = False) -> SimulationConfig:
        """The simulation of ``cand`` under these settings at ``rate`` (the workload, SLO and seed
        default to the settings'). Raises what the config raises (a layout the engine's memory rule
        does not fit: :class:`~serveplan.errors.InfeasibleError`)."""
        return SimulationConfig(
            model=self.model, hardware=self.hardware, profile=self.profile, fleet=cand, fidelity=self.fidelity,
            rate=rate, workload=workload if workload is not None else self.workload,
            slo=slo if slo is not None else self.slo, seed=self.seed if seed is None else seed, dtype=self.dtype,
            early_stop=early_stop, engine=self.engine, kv_dtype=self.kv_dtype)

    def deployment(self, cand: Fleet, clocks: Clocks | None = None) -> Deployment:
        """``cand`` resolved under these settings (:func:`~serveplan.sim.deployment.resolve`): the
        estimators, limits and KV capacities the simulator runs it with."""
        return resolve(self.simulation_config(cand), clocks)


@dataclass(frozen=True, slots=True, kw_only=True)
class GoodputResult:
    """Goodput of one candidate fleet and what the fleet delivers at that rate."""

    candidate: Fleet
    goodput_rps: float
    goodput_per_device: float
    status: GoodputStatus
    reason: str = ""
    ttft_p: float = math.nan            # SLO percentile of TTFT at the goodput rate (s)
    tpot_p: float = math.nan
    e2e_mean_s: float = math.nan
    throughput_rps: float = 0.0
    output_tokens_per_s: float = 0.0
    binding: str = ""                   # which SLO fails first above the goodput: ttft, tpot
    bottleneck: str = ""                # prefill, decode, kv-memory
    capacity_bound_rps: float = 0.0
    miss_rps: float = math.nan          # lowest simulated rate above the goodput that missed the SLO
    num_simulations: int = 0
    goodput_ci: tuple[float, float] | None = None
    goodput_samples: tuple[float, ...] = ()
    #: how the goodput was found (:class:`GoodputMethod`; a plain string is converted)
    method: GoodputMethod = GoodputMethod.WHOLE
    composed_rps: float = math.nan
    #: rates at which the SLO held over the whole stream but not in its steady state (the stream's
    #: last third missed it, or a stream three times longer did): rejected as not sustainable
    nonstationary_rps: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.method, GoodputMethod):
            object.__setattr__(self, "method", GoodputMethod(self.method))

    @property
    def name(self) -> str:
        return self.candidate.name

    def to_dict(self) -> dict[str, Any]:
        """The fleet's record, then every other field under its key (:data:`_KEYS`); NaN as None."""
        d = self.candidate.to_dict()
        for f in fields(self):
            if f.name == "candidate":
                continue
            v = getattr(self, f.name)
            if isinstance(v, float):
                v = _num(v)
            elif isinstance(v, tuple):
                v = list(v)
            elif isinstance(v, Enum):
                v = v.value
            d[_KEYS.get(f.name, f.name)] = v
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> GoodputResult:
        """Inverse of :meth:`to_dict`; a knob under a former name (:data:`_FORMER_KEYS`) is read as
        its current one, so records written before a rename still load."""
        d = {**{new: d[old] for old, new in _FORMER_KEYS.items() if old in d and new not in d}, **d}
        kw: dict[str, Any] = {"candidate": Fleet.from_dict(d)}
        for f in fields(GoodputResult):
            key = _KEYS.get(f.name, f.name)
            if f.name == "candidate" or key not in d:
                continue
            v = d[key]
            if f.name == "status":
                v = GoodputStatus(v)
            elif f.name == "method":
                v = GoodputMethod(v or "")
            elif f.name == "goodput_ci":
                v = tuple(v) if v else None
            elif f.name == "goodput_samples":
                v = tuple(v)
            elif isinstance(f.default, float):
                v = _nan(v)
            kw[f.name] = v
        return GoodputResult(**kw)


#: keys of the record whose names differ from the fields (units, or a clearer name)
_KEYS = {"ttft_p": "ttft_p_s", "tpot_p": "tpot_p_s", "binding": "binding_slo"}
#: former names of knobs in records (checkpoints, results files) -> their names now (docs/glossary.md)
_FORMER_KEYS = {"max_num_seqs": "max_batch", "max_prompts": "prefill_max_batch", "prefill_b_max": "prefill_max_batch",
                "decode_b_max": "max_batch", "step_token_budget": "token_budget"}


def _num(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)


@dataclass(kw_only=True)
class _Probe:
    rate: float
    feasible: bool
    ttft: float = math.nan
    tpot: float = math.nan
    e2e: float = math.nan
    throughput: float = 0.0
    out_tps: float = 0.0
    kv_limited: bool = False
    margin: float | None = None   # max(P TTFT / target, P TPOT / target) / (1 + tau); <= 1 meets the SLO


@dataclass(kw_only=True)
class _Runner:
    cand: Fleet
    settings: GoodputSettings
    seed: int
    clocks: Clocks
    #: which targets the check applies (:class:`SloCheck`)
    check: SloCheck = SloCheck.BOTH
    #: branch and bound (``search(method="bounded")``): a full-stream probe missing the SLO at or
    #: below this rate ends the search (:class:`_Beaten`): the goodput is below it
    beat: float | None = None
    runs: int = 0
    probes: list[_Probe] = field(default_factory=list)
    #: rates whose SLO held over the whole stream but not in its steady state (:meth:`_holds`)
    nonstationary: list[float] = field(default_factory=list)

    @property
    def relaxed_slo(self) -> SLO:
        """The targets the check really applies (Algorithm 9: (1 + tau) x goal), so the
        simulator's early stop fires only when this check is certain to fail."""
        s = self.settings
        lim = 1.0 + s.relaxation
        ttft, tpot = self.targets
        return SLO(ttft_s=lim * ttft, tpot_s=lim * tpot, percentile=s.slo.percentile)

    @property
    def targets(self) -> tuple[float, float]:
        """The (TTFT, TPOT) targets this check applies (``inf``: not checked)."""
        s = self.settings.slo
        return (s.ttft_s if self.check is not SloCheck.TPOT else math.inf,
                s.tpot_s if self.check is not SloCheck.TTFT else math.inf)

    def config(self, rate: float, workload: Workload | None = None) -> SimulationConfig:
        return self.settings.simulation_config(self.cand, rate=rate, workload=workload, slo=self.relaxed_slo,
                                               seed=self.seed, early_stop=True)

    def probe(self, rate: float, workload: Workload | None = None) -> _Probe:
        s = self.settings
        res = simulate(self.config(rate, workload), clocks=self.clocks)
        self.runs += 1
        pct = s.slo.percentile
        ttft, tpot = _percentile(res, "ttft", pct), _percentile(res, "tpot", pct)
        lim = 1.0 + s.relaxation
        t_ttft, t_tpot = self.targets
        if self.check is SloCheck.TTFT:
            tpot = 0.0  # the decode side is not part of this measurement
        ok = (not res.stopped_early and not res.overloaded
              and ttft <= lim * t_ttft and tpot <= lim * t_tpot)
        margin = None
        if not res.stopped_early and not res.overloaded and math.isfinite(ttft) and math.isfinite(tpot):
            margin = max(ttft / t_ttft, tpot / t_tpot) / lim
        if ok and s.checks_steady_state and s.workload.arrival != "trace" \
                and not (workload is not None and workload.arrival == "trace"):
            ok = self._holds(res, rate, workload)
        p = _Probe(rate=rate, feasible=ok, ttft=ttft, tpot=tpot, e2e=res.e2e_s.mean, throughput=res.throughput_rps,
                   out_tps=res.output_tokens_per_s, kv_limited=bool(res.num_preemptions) or bool(res.kv_limited),
                   margin=margin)
        self.probes.append(p)
        if self.beat is not None and workload is None and not p.feasible and rate <= self.beat:
            raise _Beaten(p)
        return p

    def _segment_margin(self, res: SimulationResult, lo: float, hi: float) -> float:
        """The SLO margin (as :attr:`_Probe.margin`) of the requests sent in the ``[lo, hi)`` share
        of the stream (arrival order); ``inf`` when one of them did not finish."""
        s = self.settings
        rec = res.requests
        n = len(rec)
        part = slice(int(lo * n), max(int(hi * n), int(lo * n) + 1))
        lim = 1.0 + s.relaxation
        t_ttft, t_tpot = self.targets
        out = 0.0
        for metric, target in (("ttft", t_ttft), ("tpot", t_tpot)):
            if not math.isfinite(target):
                continue
            v = np.asarray(getattr(rec, metric)[part], dtype=float)
            if metric == "tpot":
                v = v[np.asarray(rec.output_len[part]) > 1]
            if v.size == 0:
                continue
            if not np.all(np.isfinite(v)):
                return math.inf
            out = max(out, float(np.percentile(v, s.slo.percentile)) / (lim * target))
        return out

    def _holds(self, res: SimulationResult, rate: float, workload: Workload | None) -> bool:
        """Whether a run that meets the SLO over its whole stream is in a steady state there: the
        SLO percentile over the stream's last third meets it too (a queue that grows through the
        run passes on average while its tail misses); and when a later third comes within
        :data:`CLOSE_MARGIN` of the limit, above the first third by more than :data:`RISE` (latency
        still climbing: a queue near saturation, or a KV cache that preempts more as the run goes
        on), the rate is simulated again on a stream :data:`LONG_FACTOR` times longer, which
        decides. A full-stream rate rejected here is recorded in :attr:`nonstationary`; a prefix
        probe (``workload``) is only checked on its own thirds, as it only guides the search."""
        first, mid, last = (self._segment_margin(res, a, b) for a, b in ((0.0, 1 / 3), (1 / 3, 2 / 3), (2 / 3, 1.0)))
        if last > 1.0:
            if workload is None:
                self.nonstationary.append(rate)
            return False
        later = max(mid, last)
        if workload is not None or later < CLOSE_MARGIN or later <= first * (1 + RISE):
            return True   # a prefix probe only guides; a steady or clearly met tail holds
        longer = self.settings.workload.tiled(LONG_FACTOR)
        long_res = simulate(self.config(rate, longer), clocks=self.clocks)
        self.runs += 1
        ok = (not long_res.stopped_early and not long_res.overloaded
              and self._segment_margin(long_res, 0.0, 1.0) <= 1.0
              and self._segment_margin(long_res, 2 / 3, 1.0) <= 1.0)
        if not ok:
            self.nonstationary.append(rate)
        return ok


class _Beaten(Exception):
    """A full-stream probe missed the SLO at a rate no higher than the one to beat: with the SLO met
    below the goodput and missed above it (the premise of the bisection), the goodput is below
    that rate, so the search ends there (``max_goodput(beat=...)``)."""

    def __init__(self, probe: _Probe) -> None:
        super().__init__(probe.rate)
        self.probe = probe


def _percentile(res: SimulationResult, metric: str, pct: float) -> float:
    stats = getattr(res, f"{metric}_s")
    key = {50: "p50", 90: "p90", 99: "p99"}.get(int(pct)) if float(pct).is_integer() else None
    if key is not None:
        return float(getattr(stats, key))
    values = np.asarray(res.requests[metric], dtype=float)
    values = values[np.isfinite(values)]
    return float(np.percentile(values, pct)) if len(values) else math.inf


def capacity_bound(cand: Fleet, settings: GoodputSettings, clocks: Clocks | None = None) -> float:
    """Optimistic serving rate (req/s) of the fleet, from the estimator (Algorithm 8 L5's 1/T_min).

    Prefill instances: ``b / T_prefill(b)`` at the prefill batch limit; decode instances:
    ``B / (sum of the decode steps of one request at batch B)`` with contexts growing; a
    collocated instance does both in turn. Mean request lengths of the workload are used.
    """
    s = settings
    s_in = max(1, int(round(float(np.mean(s.workload.input_lengths)))))
    s_out = max(1, int(round(float(np.mean(s.workload.output_lengths)))))
    dep = settings.deployment(cand, clocks)
    est_p, est_d = dep.first.estimator, dep.last.estimator
    bp = cand.max_prompts
    per_req_prefill = est_p.time(StepBatch.prefill(bp, s_in)) / bp
    B = cand.max_batch
    kv_cap = est_d.memory.kv_capacity_tokens
    B = max(1, min(B, kv_cap // (s_in + s_out)))
    per_req_decode = float(decode_times(est_d, B, s_in + 1, s_out - 1).sum()) / B if s_out > 1 else 0.0
    if cand.is_disaggregated:
        rp = cand.strategy.num_prefill / per_req_prefill
        rd = cand.strategy.num_decode / per_req_decode if per_req_decode > 0 else math.inf
        return min(rp, rd)
    return cand.strategy.num_collocated / (per_req_prefill + per_req_decode)


#: this process's own step clocks when it is a pool worker (made in the worker, never in the parent:
#: see :func:`worker_clocks`)
_WORKER: dict[str, Clocks] = {}


def worker_clocks() -> Clocks:
    """The step clocks of this pool worker, shared by every evaluation it runs: a worker owns its
    cache as a search owns its own (a search in process passes its own :class:`Clocks`)."""
    got = _WORKER.get("clocks")
    if got is None:
        got = _WORKER["clocks"] = Clocks()
    return got


def zero_load_lengths(workload: Workload, percentile: float) -> tuple[int, int]:
    """The input and output lengths of the request the zero-load check times: each the SLO
    percentile of the workload's lengths (a lone request's TTFT grows with its prompt and its TPOT
    with its context, so at any load the SLO percentile of either is at least that request's)."""
    return (int(np.percentile(workload.input_lengths, percentile, method="higher")),
            int(np.percentile(workload.output_lengths, percentile, method="higher")))


def zero_load(cand: Fleet, settings: GoodputSettings, clocks: Clocks | None = None) -> LoneRequest:
    """What a lone request of the SLO-percentile lengths (:func:`zero_load_lengths`) sees on the
    candidate's deployment: the simulator's own lone request
    (:func:`~serveplan.sim.engine.lone_request`), so the optimizer's zero-load TTFT and TPOT are the
    simulator's by construction."""
    s_in, s_out = zero_load_lengths(settings.workload, settings.slo.percentile)
    return lone_request(settings.deployment(cand, clocks), s_in, s_out)


def lone_key(cand: Fleet) -> tuple[bool, tuple[InstanceConfig, ...]]:
    """What a lone request on ``cand`` depends on besides the settings: the configuration of each of
    its roles, not how many instances each has. One request meets one instance of each role (the
    routers send the first request to the first instance), and nothing a role's instance runs with
    depends on the counts: its estimator, limits and scheduler come from its own configuration
    (:func:`~serveplan.sim.deployment.resolve`; the engine's setup from the decoding role's), and the
    KV transfer from the two layouts (:func:`~serveplan.sim.cluster.kv_transfer_time`).
    ``tests/optimize/test_compose.py`` checks it on every candidate of a 16-device search."""
    return cand.is_disaggregated, tuple(cand.instance(r) for r in cand.roles)


def _zero_load(cand: Fleet, settings: GoodputSettings, check: SloCheck = SloCheck.BOTH,
               clocks: Clocks | None = None,
               memo: dict[tuple[bool, tuple[InstanceConfig, ...]], LoneRequest] | None = None) -> tuple[str, float]:
    """Reject without simulating a load when even a lone request misses the SLO; else return its
    margin (largest share of a relaxed target a lone request uses). The lone request is the
    simulator's own (:func:`~serveplan.sim.engine.lone_request`) on the candidate's deployment, of
    the SLO-percentile lengths (:func:`zero_load_lengths`). ``check`` as :class:`_Runner`.
    ``memo``: the caller's lone requests under these settings by :func:`lone_key` (a search asks
    for a thousand fleets made of a few dozen instance configurations)."""
    s = settings
    if memo is None:
        lone = zero_load(cand, settings, clocks)
    else:
        key = lone_key(cand)
        got = memo.get(key)
        if got is None:
            got = memo[key] = zero_load(cand, settings, clocks)
        lone = got
    lim = 1.0 + s.relaxation
    ttft0, tpot0 = lone.ttft_s, lone.tpot_s
    if ttft0 > lim * s.slo.ttft_s and check is not SloCheck.TPOT:
        return f"TTFT of a lone request {ttft0:.3f} s exceeds the target {s.slo.ttft_s:g} s", math.inf
    if tpot0 > lim * s.slo.tpot_s and check is not SloCheck.TTFT:
        return f"TPOT of a lone request {tpot0 * 1e3:.1f} ms exceeds the target {s.slo.tpot_s * 1e3:g} ms", math.inf
    shares = {SloCheck.TTFT: ttft0 / (lim * s.slo.ttft_s), SloCheck.TPOT: tpot0 / (lim * s.slo.tpot_s)}
    return "", max(v for k, v in shares.items() if check in (SloCheck.BOTH, k))


def _next_rate(lo: _Probe, hi: _Probe, tol: float, bisect: bool) -> float:
    """Next probe inside (lo, hi): where the SLO margin crosses 1 by linear interpolation when both
    ends have a margin (regula falsi), else (or when ``bisect``) the midpoint. Kept at least ``tol``
    from both ends, so each probe shrinks the bracket by ``tol`` or more and an accurate
    interpolation finishes in one or two probes."""
    a, b = lo.rate, hi.rate
    x = 0.5 * (a + b)
    if not bisect and lo.margin is not None and hi.margin is not None and hi.margin > lo.margin:
        x = a + (1.0 - lo.margin) * (b - a) / (hi.margin - lo.margin)
    if b - a <= 2 * tol:
        # one probe ends it either way when it sits tol above lo (or, failing that, mid-way)
        return a + tol if b - (a + tol) <= tol else 0.5 * (a + b)
    return min(max(x, a + tol), b - tol)


def _narrow(runner: _Runner, lo: _Probe, hi: _Probe, tol_of: Callable[[float], float],
            workload: Workload | None) -> tuple[_Probe, _Probe]:
    """Shrink a (feasible lo, infeasible hi) bracket until ``hi - lo <= 1.1 tol_of(lo)``; bisect when
    two probes in a row land on the same side (Illinois-style safeguard). Every probe is at least
    ``0.99 tol_of(lo)`` from both ends, so the loop ends."""
    last_side, same = "", 0
    while hi.rate - lo.rate > 1.1 * tol_of(lo.rate):  # 10% slack: no probe a hair below hi
        p = runner.probe(_next_rate(lo, hi, 0.99 * tol_of(lo.rate), same >= 1), workload)
        side = "lo" if p.feasible else "hi"
        same = same + 1 if side == last_side else 0
        last_side = side
        if p.feasible:
            lo = p
        else:
            hi = p
    return lo, hi


def _bracket(runner: _Runner, guess: float, step: float, workload: Workload | None,
             known: tuple[_Probe | None, _Probe | None] = (None, None)) -> tuple[_Probe | None, _Probe | None]:
    """Feasible ``lo`` and infeasible ``hi`` probes around ``guess``, stepping by factor ``step``.
    Rates never go below the 0.1 req/s floor (Algorithm 8 L4): if 0.1 fails, ``lo`` is None."""
    lo, hi = known
    p = runner.probe(max(guess, LOWER_RATE), workload)
    if p.feasible:
        lo = p
        widen = 0
        while hi is None or hi.rate <= lo.rate:
            if widen >= 8:  # still meeting the SLO far above the analytic capacity: stop widening
                return lo, None
            q = runner.probe(lo.rate * step, workload)
            widen += 1
            step = 1 + 2 * (step - 1)  # accelerate: the first step is the finest
            if q.feasible:
                lo = q
            else:
                hi = q
    else:
        hi = p
        while lo is None or lo.rate >= hi.rate:
            if hi.rate <= LOWER_RATE:
                return None, hi
            q = runner.probe(max(hi.rate / step, LOWER_RATE), workload)
            step = 1 + 2 * (step - 1)
            if q.feasible:
                lo = q
            else:
                hi = q
    return lo, hi


def _search_rate(runner: _Runner, bound: float, risky: bool = False,
                 guess: float | None = None) -> tuple[float, _Probe | None, _Probe | None]:
    """Largest rate meeting the SLO on the full workload (Algorithm 8), with its probe and the
    first infeasible probe above it.

    Phase 1 brackets the crossing to the tolerance on a prefix of the request stream (the same
    common random numbers, a fifth of the requests, at least 1,000), which is cheap; phase 2 confirms
    both ends with full-stream runs (two runs when the prefix was right) and otherwise steps and narrows
    it on the full stream until ``hi - lo <= 1.1 max(abs_tol, rel_tol * lo)`` with ``lo`` feasible and
    ``hi`` infeasible, both simulated on the full workload — the guarantee of plain bisection.
    ``risky`` (a lone request already uses most of a target) checks the 0.1 req/s floor first.
    ``guess`` (a goodput already estimated, e.g. composed from pool measurements) skips phase 1:
    the full-stream bracket starts there with steps of ``1 + 2 rel_tol``, so a right estimate is
    confirmed by two runs.
    """
    s = runner.settings
    if runner.beat is not None and runner.beat > 0:
        # one full-stream run at the rate to beat decides whether the search is worth it: missing the
        # SLO there ends it (_Beaten); meeting it, the search below runs as without a rate to beat
        # (this run is not reused, so the goodput found is the one the plain search finds)
        runner.probe(runner.beat)
    if guess is not None and guess > 0:
        step0 = 1 + 2 * s.rel_tol
        lo0, hi0 = _bracket(runner, guess, step0, None)
        if lo0 is None:
            return 0.0, None, hi0
        if hi0 is None:
            return lo0.rate, lo0, None
        lo0, hi0 = _narrow(runner, lo0, hi0, lambda r: max(s.abs_tol, s.rel_tol * r), None)
        return lo0.rate, lo0, hi0
    wl = s.workload
    n = len(wl.input_lengths)
    guess = max(LOWER_RATE, 0.8 * bound)  # goodput sits a little below the optimistic capacity
    n_small = max(1000, n // 5)
    step = 1.5
    known: tuple[_Probe | None, _Probe | None] = (None, None)

    def tol(r: float) -> float:
        return max(s.abs_tol, s.rel_tol * r)

    if n_small < n and wl.arrival != "trace":
        small = Workload(input_lengths=wl.input_lengths[:n_small], output_lengths=wl.output_lengths[:n_small],
                         arrival=wl.arrival, cv=wl.cv, name=wl.name)
        floor = runner.probe(LOWER_RATE, small) if risky else None
        if floor is not None and not floor.feasible:
            guess = LOWER_RATE  # decide the floor on the full stream
        else:
            lo_s, hi_s = _bracket(runner, guess, step, small, (floor, None))
            if lo_s is not None and hi_s is not None:
                lo_s, hi_s = _narrow(runner, lo_s, hi_s, tol, small)
                # confirm the prefix bracket with two full-stream runs; step out if either disagrees
                p_lo = runner.probe(lo_s.rate)
                step = 1 + 2 * s.rel_tol
                if not p_lo.feasible:
                    guess, known = lo_s.rate / step, (None, p_lo)
                else:
                    p_hi = runner.probe(hi_s.rate)
                    if p_hi.feasible:
                        guess, known = hi_s.rate * step, (p_hi, None)
                    else:
                        ok, bad = _narrow(runner, p_lo, p_hi, tol, None)
                        return ok.rate, ok, bad
            else:
                guess = LOWER_RATE if lo_s is None else lo_s.rate  # prefix probes only guide the full ones
    lo, hi = _bracket(runner, guess, step, None, known)
    if lo is None:
        return 0.0, None, hi
    if hi is None:
        return lo.rate, lo, None
    lo, hi = _narrow(runner, lo, hi, tol, None)
    return lo.rate, lo, hi


def max_goodput(cand: Fleet, settings: GoodputSettings, *, check: str | SloCheck = SloCheck.BOTH,
                guess: float | None = None, beat: float | None = None, clocks: Clocks | None = None) -> GoodputResult:
    """Goodput of ``cand``: the largest rate meeting the SLO, with what binds at that point.

    With ``settings.seeds > 1`` the search is repeated with consecutive seeds; the reported
    goodput is their mean and ``goodput_ci`` a 95% Student-t interval. ``check`` (``"ttft"`` or
    ``"tpot"``) applies one target only (a pool measured alone); ``guess`` starts the bracket at a
    rate already estimated (:func:`_search_rate`). ``beat`` (req/s; one seed only) ends the search
    as soon as a full-stream run misses the SLO at or below that rate: the result then has
    ``method="cut"``, no goodput, and ``miss_rps`` that run's rate, above the goodput (the branch
    and bound of ``search(method="bounded")``: such a fleet cannot reach the rate it had to beat).
    The first run is at that rate: one run rules out a fleet that cannot beat it, and one more run
    than without ``beat`` finds the goodput of one that can. ``clocks``: the step-time cache the
    simulations share (default: one of this search's own).
    """
    check = SloCheck.parse(check)
    clocks = clocks if clocks is not None else Clocks()
    reason, margin0 = _zero_load(cand, settings, check, clocks)
    bound = capacity_bound(cand, settings, clocks)
    if reason:
        return GoodputResult(candidate=cand, goodput_rps=0.0, goodput_per_device=0.0, status=GoodputStatus.REJECTED,
                             reason=reason, capacity_bound_rps=bound)
    rates, runs = [], 0
    held: list[float] = []   # rates rejected as not sustainable (_Runner._holds)
    found: list[tuple[float, _Probe | None, _Probe | None]] = []
    if beat is not None and settings.seeds > 1:
        beat = None  # one seed missing the SLO says nothing of the mean over seeds
    for k in range(settings.seeds):
        runner = _Runner(cand=cand, settings=settings, seed=settings.seed + k, check=check, beat=beat, clocks=clocks)
        try:
            got = _search_rate(runner, bound, risky=margin0 > 0.85, guess=guess)
        except _Beaten as cut:
            p = cut.probe
            return GoodputResult(
                candidate=cand, goodput_rps=0.0, goodput_per_device=0.0, status=GoodputStatus.REJECTED,
                reason=(f"SLO missed at {p.rate:.3g} req/s ({p.rate / cand.num_devices:.3g} per device), "
                        + ("the rate it had to beat" if math.isclose(p.rate, beat or 0.0)
                           else f"below the {beat:.3g} req/s it had to beat")),
                ttft_p=p.ttft, tpot_p=p.tpot, capacity_bound_rps=bound, miss_rps=p.rate,
                num_simulations=runner.runs, method=GoodputMethod.CUT)
        runs += runner.runs
        held += runner.nonstationary
        rates.append(got[0])
        found.append(got)
    goodput = float(np.mean(rates))
    # report the operating point of the seed whose goodput is closest to the mean
    best = min((g for g in found if g[1] is not None), key=lambda g: abs(g[0] - goodput), default=found[0])
    ci = None
    if settings.seeds > 1:
        from scipy import stats

        sem = float(np.std(rates, ddof=1) / math.sqrt(len(rates)))
        half = float(stats.t.ppf(0.975, len(rates) - 1) * sem)
        ci = (goodput - half, goodput + half)
    rate, at, above = best
    if goodput <= 0 or at is None:
        why = "SLO missed even at 0.1 req/s"
        if above is not None:
            why += f" (P{settings.slo.percentile:g} TTFT {above.ttft:.3f} s, TPOT {above.tpot * 1e3:.1f} ms"
            why += ")"
        kv_note = _kv_note(cand, settings, clocks)
        if kv_note:
            why += f"; {kv_note}"
        return GoodputResult(candidate=cand, goodput_rps=0.0, goodput_per_device=0.0, status=GoodputStatus.REJECTED,
                             reason=why, capacity_bound_rps=bound, num_simulations=runs, goodput_samples=tuple(rates),
                             nonstationary_rps=tuple(sorted(set(held))))
    binding, bottleneck = _diagnose(cand, settings, above, clocks)
    note = ""
    if above is None and bound > 0 and goodput > bound:
        # the bracket stopped widening with the SLO still met, above the analytic capacity: the
        # stream is too short to load this fleet (it arrives as one burst that the fleet absorbs),
        # so no rate is sustainable-and-measured here; the capacity bound is the honest answer
        n = len(settings.workload.input_lengths)
        note = (f"SLO still met at {goodput:.3g} req/s, {goodput / bound:.0f}x the analytic capacity: "
                f"{n} requests are too few to load this fleet, so the goodput is capped at the capacity "
                f"bound {bound:.3g} req/s (simulate more requests)")
        goodput = bound
    return GoodputResult(
        candidate=cand, goodput_rps=goodput, goodput_per_device=goodput / cand.num_devices, status=GoodputStatus.OK,
        reason=note,
        ttft_p=at.ttft, tpot_p=at.tpot, e2e_mean_s=at.e2e, throughput_rps=at.throughput,
        output_tokens_per_s=at.out_tps, binding=binding, bottleneck=bottleneck, capacity_bound_rps=bound,
        miss_rps=above.rate if above is not None else math.nan, num_simulations=runs, goodput_ci=ci,
        goodput_samples=tuple(rates), nonstationary_rps=tuple(sorted(set(held))),
    )


def _kv_slots(cand: Fleet, settings: GoodputSettings, clocks: Clocks) -> tuple[int, int]:
    """Requests of the largest size whose KV cache fits one (decode) instance, and that size."""
    s = settings
    tokens = int(np.max(s.workload.input_lengths + s.workload.output_lengths))
    return settings.deployment(cand, clocks).last.kv_capacity_tokens // max(tokens, 1), tokens


def _kv_note(cand: Fleet, settings: GoodputSettings, clocks: Clocks) -> str:
    slots, tokens = _kv_slots(cand, settings, clocks)
    if slots < cand.max_batch:
        return (f"KV cache memory holds only {slots} requests of {tokens} tokens per instance "
                f"(max batch {cand.max_batch})")
    return ""


def _diagnose(cand: Fleet, settings: GoodputSettings, above: _Probe | None, clocks: Clocks) -> tuple[str, str]:
    """Which SLO fails first just above the goodput, and the resource behind it."""
    if above is None:
        return "none", "none (SLO met up to the largest rate tried)"
    if _kv_note(cand, settings, clocks):
        s = settings.slo
        r_ttft = above.ttft / s.ttft_s if math.isfinite(above.ttft) else math.inf
        r_tpot = above.tpot / s.tpot_s if math.isfinite(above.tpot) else math.inf
        return ("ttft" if r_ttft >= r_tpot else "tpot"), "kv-memory"
    s = settings.slo
    r_ttft = above.ttft / s.ttft_s if math.isfinite(above.ttft) else math.inf
    r_tpot = above.tpot / s.tpot_s if math.isfinite(above.tpot) else math.inf
    binding = "ttft" if r_ttft >= r_tpot else "tpot"
    if above.kv_limited:
        return binding, "kv-memory"
    if cand.is_disaggregated:
        return binding, "prefill instances" if binding == "ttft" else "decode instances"
    return binding, "prefill (queueing before first token)" if binding == "ttft" else "decode (batch interference)"
