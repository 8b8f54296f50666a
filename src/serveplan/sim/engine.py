"""``simulate(config) -> SimulationResult``: a request stream through a fleet of instances.

Two fidelities:

* ``iteration`` (default): every step of every instance is one batch of known composition,
  timed by the estimator; continuous batching with KV blocks and preemption
  (:mod:`serveplan.sim.instance`, :mod:`serveplan.sim.cluster`).
* ``bestserve``: BestServe's Algorithms 2-7 with the pseudo batch size
  (:mod:`serveplan.sim.bestserve`).

Runs are pure in ``(config)``: arrivals come from ``np.random.default_rng(seed)`` (common random
numbers across rates, :func:`serveplan.sim.workload.arrival_times`) and lengths from the
workload. Estimators and their step-time tables are memoised across calls with the same specs.
"""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from serveplan.errors import SpecError
from serveplan.estimator.batch import StepBatch
from serveplan.estimator.static import decode_times, fom_flops
from serveplan.estimator.step import Estimator
from serveplan.sim import bestserve as bs
from serveplan.sim.cluster import ClosedLoop, EarlyStop, OpenLoop, Stage, kv_transfer_time, run_fleet
from serveplan.sim.fleet import Fleet, Role, Strategy
from serveplan.sim.instance import Instance, StepClock
from serveplan.sim.metrics import SLO, LatencyStats
from serveplan.sim.request import RequestRecords, RequestState
from serveplan.sim.router import check_router, get_router
from serveplan.sim.schedulers import get_scheduler
from serveplan.sim.workload import Workload, arrival_times
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.model import ModelSpec
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.profile import EfficiencyProfile
from serveplan.units import DType, ceil_div

#: vLLM's KV block size (tokens per PagedAttention block, vLLM default ``block_size=16``).
BLOCK_SIZE = 16


class Fidelity(str, Enum):
    """How a simulation times its requests."""

    ITERATION = "iteration"    # every step of every instance (continuous batching, KV blocks)
    BESTSERVE = "bestserve"    # BestServe's Algorithms 2-7 with the pseudo batch size

    @classmethod
    def parse(cls, value: str | Fidelity) -> Fidelity:
        try:
            return cls(value)
        except ValueError:
            raise SpecError(f"fidelity={value!r}; expected one of: {', '.join(f.value for f in cls)}") from None


#: Flat fleet settings :class:`SimulationConfig` accepts as a shorthand for ``fleet=Fleet.build(...)``.
FLEET_KEYWORDS = ("strategy", "tp", "prefill_tp", "decode_tp", "pp", "dp", "ep", "max_batch", "prefill_max_batch",
                  "scheduler", "chunk_size", "token_budget")


def _default_workload() -> Workload:
    return Workload.scenario("op2", num_requests=10000)


def _default_fleet() -> Fleet:
    return Fleet.build("1p1d")


@dataclass(frozen=True, slots=True, kw_only=True, init=False)
class SimulationConfig:
    """Everything a simulation depends on.

    Parameters
    ----------
    model, hardware, profile:
        Specs (see :mod:`serveplan.specs`).
    fleet:
        The serving fleet (:class:`~serveplan.sim.fleet.Fleet`: strategy, and per role the
        parallel layout and batching). Instead of ``fleet``, the flat settings of
        :meth:`Fleet.build` (``strategy="2m"``, ``tp=4``, ``max_batch=16``, ...) may be given as
        keywords; they build the fleet and are not kept.
    router:
        A registered router (:mod:`serveplan.sim.router`): ``round_robin`` or ``least_outstanding``.
    fidelity:
        :class:`Fidelity` (or its value).
    rate:
        Arrival rate (requests/s); unused for trace arrivals.
    workload, slo, seed, dtype:
        Request stream, latency targets, arrival seed and weight dtype (default: the model's).
    early_stop:
        Stop as soon as the SLO at ``slo.percentile`` is certain to be missed (iteration
        fidelity; the ``bestserve`` fidelity always runs to the end, it is cheap).
    max_time_s:
        Simulated-time cap of the iteration fidelity (default: ``4 x`` the arrival span plus
        ``20 x`` the zero-load latency of the longest request); requests unfinished by then are
        reported as such and the run as overloaded.
    tau:
        Balancing scalar of the pseudo batch size (``bestserve`` fidelity, eq. 9).
    """

    model: ModelSpec
    hardware: DeviceSpec
    profile: EfficiencyProfile
    fleet: Fleet = field(default_factory=_default_fleet)
    router: str = "round_robin"
    fidelity: Fidelity = Fidelity.ITERATION
    rate: float | None = 3.5
    workload: Workload = field(default_factory=_default_workload)
    slo: SLO = field(default_factory=SLO)
    seed: int = 0
    dtype: DType | None = None
    early_stop: bool = False
    max_time_s: float | None = None
    tau: float = bs.TAU

    def __init__(self, *, model: ModelSpec, hardware: DeviceSpec, profile: EfficiencyProfile,
                 fleet: Fleet | None = None, router: str = "round_robin", fidelity: Fidelity | str = Fidelity.ITERATION,
                 rate: float | None = 3.5, workload: Workload | None = None, slo: SLO | None = None, seed: int = 0,
                 dtype: DType | str | None = None, early_stop: bool = False, max_time_s: float | None = None,
                 tau: float = bs.TAU, **fleet_settings: Any) -> None:
        unknown = sorted(set(fleet_settings) - set(FLEET_KEYWORDS))
        if unknown:
            raise TypeError(f"SimulationConfig got unexpected keyword arguments: {', '.join(unknown)}")
        if fleet is not None and fleet_settings:
            raise SpecError(f"give fleet= or the flat fleet settings ({', '.join(sorted(fleet_settings))}), not both")
        if fleet is None:
            fleet = Fleet.build(**fleet_settings)
        values = dict(model=model, hardware=hardware, profile=profile, fleet=fleet, router=router,
                      fidelity=Fidelity.parse(fidelity), rate=rate,
                      workload=workload if workload is not None else _default_workload(),
                      slo=slo if slo is not None else SLO(), seed=seed,
                      dtype=None if dtype is None else DType.parse(dtype), early_stop=early_stop,
                      max_time_s=max_time_s, tau=tau)
        for k, v in values.items():
            object.__setattr__(self, k, v)
        self.__post_init__()

    def __post_init__(self) -> None:
        if not isinstance(self.fleet, Fleet):
            raise SpecError(f"fleet must be a Fleet (Fleet.build('2m', tp=4)), got {type(self.fleet).__name__}")
        check_router(self.router)
        if not isinstance(self.workload, Workload):
            raise SpecError(f"workload must be a Workload, got {type(self.workload).__name__}")
        if self.workload.arrival != "trace":
            r = self.rate
            if r is None or isinstance(r, bool) or not isinstance(r, (int, float)) or not (math.isfinite(r) and r > 0):
                raise SpecError(f"rate={r!r} must be a positive number of requests per second")
        if not isinstance(self.slo, SLO):
            raise SpecError(f"slo must be an SLO, got {type(self.slo).__name__}")
        if self.max_time_s is not None and not self.max_time_s > 0:
            raise SpecError(f"max_time_s={self.max_time_s!r} must be positive seconds")
        if not self.tau > 0:
            raise SpecError(f"tau={self.tau!r} must be positive (BestServe eq. 9 default 2.5)")
        if self.fidelity is Fidelity.BESTSERVE and self.fleet.first.parallel.pp > 1:
            raise SpecError(f"pp={self.fleet.first.parallel.pp}: the bestserve fidelity models tensor parallelism "
                            "only; use fidelity='iteration'")

    @property
    def strategy(self) -> Strategy:
        return self.fleet.strategy

    @property
    def num_devices(self) -> int:
        return self.fleet.num_devices

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.name, "hardware": self.hardware.name, "profile": self.profile.name,
            **self.fleet.to_dict(), "router": self.router, "fidelity": self.fidelity.value, "rate": self.rate,
            "workload": self.workload.describe(), "num_requests": self.workload.num_requests,
            "slo": self.slo.to_dict(), "seed": self.seed,
            "dtype": None if self.dtype is None else self.dtype.value, "early_stop": self.early_stop,
        }


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class SimulationResult:
    """Latencies, throughput and SLO attainment of one simulation.

    Latency statistics are over completed requests; rates are per second of simulated time from
    the first arrival to the last completion. ``fom`` is the FOM of the modeling notes (B.5
    Option 2): the useful FLOPs of the completed requests (prefill plus every decode step, closed
    form) per second of that span. ``bubble_s`` is the pipeline-bubble time of each request
    (zeros when ``pp == 1``).
    """

    config: SimulationConfig
    num_requests: int
    num_completed: int
    ttft_s: LatencyStats
    tpot_s: LatencyStats
    e2e_s: LatencyStats
    queue_s: LatencyStats
    throughput_rps: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    slo_attainment: float
    ttft_attainment: float
    tpot_attainment: float
    overloaded: bool
    stopped_early: bool
    makespan_s: float
    fom: float
    num_preemptions: int
    kv_limited: bool
    kv_capacity_tokens: dict[str, int]
    num_steps: int
    requests: RequestRecords

    @property
    def bubble_s(self) -> np.ndarray:
        return self.requests.bubble

    @property
    def goodput_rps(self) -> float:
        """Completed requests meeting both targets, per second."""
        return self.slo_attainment * self.num_requests / self.makespan_s if self.makespan_s > 0 else 0.0

    def to_dict(self, *, include_requests: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "config": self.config.to_dict(),
            "num_requests": self.num_requests, "num_completed": self.num_completed,
            "ttft_s": self.ttft_s.to_dict(), "tpot_s": self.tpot_s.to_dict(), "e2e_s": self.e2e_s.to_dict(),
            "queue_s": self.queue_s.to_dict(),
            "throughput_rps": self.throughput_rps, "output_tokens_per_s": self.output_tokens_per_s,
            "total_tokens_per_s": self.total_tokens_per_s, "goodput_rps": self.goodput_rps,
            "slo_attainment": self.slo_attainment, "ttft_attainment": self.ttft_attainment,
            "tpot_attainment": self.tpot_attainment, "overloaded": self.overloaded,
            "stopped_early": self.stopped_early, "makespan_s": self.makespan_s, "fom_flops_per_s": self.fom,
            "num_preemptions": self.num_preemptions, "kv_limited": self.kv_limited,
            "kv_capacity_tokens": dict(self.kv_capacity_tokens), "num_steps": self.num_steps,
            "bubble_s": LatencyStats.of(self.requests.bubble).to_dict(),
        }
        if include_requests:
            d["requests"] = self.requests.to_dict()
        return d


# ---------------------------------------------------------------------- estimator memo
#: step clocks of recent estimators, by the value of their specs (LRU, at most _MAX_CLOCKS)
_CLOCKS: OrderedDict[tuple[Any, ...], StepClock] = OrderedDict()
_MAX_CLOCKS = 32


def _spec_key(spec: Any) -> Any:
    """A hashable value standing for a spec: the spec itself when hashable, else its repr (a
    frozen dataclass holding dicts); equal specs give equal keys."""
    try:
        hash(spec)
        return spec
    except TypeError:
        return (type(spec).__name__, repr(spec))


def step_clock(model: ModelSpec, hardware: DeviceSpec, profile: EfficiencyProfile, parallel: ParallelConfig,
               dtype: DType | str | None) -> StepClock:
    """The memoised :class:`StepClock` of one estimator, keyed by the specs' values (an equal spec
    built again shares the clock; the memo keeps the ``_MAX_CLOCKS`` most recently used)."""
    key = (_spec_key(model), _spec_key(hardware), _spec_key(profile), parallel,
           None if dtype is None else DType.parse(dtype))
    clock = _CLOCKS.get(key)
    if clock is not None:
        _CLOCKS.move_to_end(key)
        return clock
    est = Estimator(model, hardware, profile, parallel, dtype=dtype)
    est.check_fits()
    clock = _CLOCKS[key] = StepClock(est)
    if len(_CLOCKS) > _MAX_CLOCKS:
        _CLOCKS.popitem(last=False)
    return clock


# ---------------------------------------------------------------------- simulate
def simulate(config: SimulationConfig, *, clients: int | None = None, think_s: float = 0.0) -> SimulationResult:
    """Simulate ``config.workload`` through ``config.fleet`` and summarise what users see.

    With ``clients`` the stream is a closed loop instead of ``config.rate``: that many users,
    each sending its next request (the workload's requests in order) ``think_s`` seconds after
    its previous one finished, all starting at t=0; the run goes until every request finished or
    ``config.max_time_s`` (no default cap). Iteration fidelity only, without early stop.

    Raises
    ------
    SpecError
        A layout that does not divide the model, or an instance whose KV cache cannot hold one
        request (``max_batch`` / ``tp`` too small for the workload's longest request).
    InfeasibleError
        The weights do not fit in device memory.

    Examples
    --------
    >>> from serveplan import get_model, get_hardware, get_profile
    >>> from serveplan.sim import Fleet, SimulationConfig, Workload, simulate
    >>> cfg = SimulationConfig(model=get_model("codellama-34b"), hardware=get_hardware("ascend-910b3"),
    ...                        profile=get_profile("bestserve-910b3"), fleet=Fleet.build("2m", tp=4), rate=1.0,
    ...                        workload=Workload.scenario("op3", num_requests=200))
    >>> simulate(cfg).num_completed
    200
    """
    cfg = config
    wl = cfg.workload
    closed = None
    if clients is not None:
        if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
            raise SpecError(f"clients={clients!r} must be a positive integer")
        if not (math.isfinite(think_s) and think_s >= 0):
            raise SpecError(f"think_s={think_s!r} must be a non-negative number of seconds")
        if cfg.fidelity is not Fidelity.ITERATION or cfg.early_stop:
            raise SpecError("a closed loop (clients=...) needs fidelity='iteration' and early_stop=False")
        n = len(wl.input_lengths)
        closed = ClosedLoop(range(n), clients, think_s)
        arrival = np.zeros(n)  # set as the clients send
    else:
        arrival = arrival_times(wl, cfg.rate, cfg.seed)
    clocks = {role: step_clock(cfg.model, cfg.hardware, cfg.profile, cfg.fleet.instance(role).parallel, cfg.dtype)
              for role in cfg.fleet.roles}
    _check_kv(cfg, clocks, wl)
    if cfg.max_time_s is not None:
        cap = cfg.max_time_s
    else:
        cap = math.inf if closed is not None else _default_cap(cfg, clocks, arrival, wl)
    req = RequestState(arrival, wl.input_lengths, wl.output_lengths)
    if cfg.fidelity is Fidelity.BESTSERVE:
        insts: list[Instance] = []
        stopped = _run_bestserve(cfg, clocks, req)
    else:
        insts, stopped = _run_iteration(cfg, clocks, req, cap, closed)
    return _result(cfg, req, insts, clocks, stopped)


def _check_kv(cfg: SimulationConfig, clocks: dict[Role, StepClock], wl: Workload) -> None:
    if cfg.fidelity is Fidelity.BESTSERVE:
        return  # the paper's simulator is memory-insensitive (§12)
    longest = int(np.max(wl.input_lengths + wl.output_lengths - 1))
    for role, clock in clocks.items():
        cap = clock.est.memory.kv_capacity_tokens // BLOCK_SIZE * BLOCK_SIZE
        need = ceil_div(int(wl.input_lengths.max()) if role is Role.PREFILL else longest, BLOCK_SIZE) * BLOCK_SIZE
        if cap < need:
            inst = cfg.fleet.instance(role)
            field_name = "prefill_max_batch" if role is Role.PREFILL else "max_batch"
            raise SpecError(
                f"{field_name}={inst.batching.max_batch}: a {role.value} instance ({inst.parallel.label()}) holds "
                f"{clock.est.memory.kv_capacity_tokens} KV tokens, fewer than one request needs ({need} tokens); "
                "use a larger tp/pp or shorter requests")


def _default_cap(cfg: SimulationConfig, clocks: dict[Role, StepClock], arrival: np.ndarray, wl: Workload) -> float:
    """4x the arrival span plus 20x the zero-load latency of the longest request."""
    s_in = int(wl.input_lengths.max())
    s_out = int(wl.output_lengths.max())
    roles = cfg.fleet.roles
    est_p = clocks[roles[0]].est
    clock_d = clocks[roles[-1]]
    lone = est_p.time(StepBatch.prefill(1, s_in)) * cfg.fleet.first.parallel.pp
    if s_out > 1:
        memo = clock_d.lone_decode
        d = memo.get((s_in, s_out))
        if d is None:
            if len(memo) >= 1024:  # bound: one entry per distinct longest (input, output) of a workload
                memo.clear()
            d = memo[(s_in, s_out)] = float(decode_times(clock_d.est, 1, s_in + 1, s_out - 1).sum())
        lone += d
    span = float(arrival[-1] - arrival[0]) if len(arrival) else 0.0
    return float(arrival[0]) + 4.0 * span + 20.0 * lone


def _run_iteration(cfg: SimulationConfig, clocks: dict[Role, StepClock], req: RequestState, cap: float,
                   closed: ClosedLoop | None = None) -> tuple[list[Instance], bool]:
    fleet = cfg.fleet
    strat = fleet.strategy
    stop = EarlyStop(req, cfg.slo) if cfg.early_stop else None
    handed: list[tuple[float, int]] = []
    transfer = None
    if strat.is_disaggregated:
        est_p, est_d = clocks[Role.PREFILL].est, clocks[Role.DECODE].est
        inp = req.inp
        by_len: dict[int, float] = {}  # transfer time by prompt length

        def transfer(q: int) -> float:
            t = by_len.get(inp[q])
            if t is None:
                t = by_len[inp[q]] = kv_transfer_time(est_p, est_d, inp[q])
            return t

    def handoff(q: int, t: float) -> float:
        assert transfer is not None
        t_arrive = t + transfer(q)
        handed.append((t_arrive, q))
        return t_arrive

    stages = []
    first_index = 0
    for role in fleet.roles:
        cfg_r = fleet.instance(role)
        insts = [Instance(first_index + i, role, clocks[role], get_scheduler(cfg_r.batching.scheduler)(), req,
                          batching=cfg_r.batching, block_size=BLOCK_SIZE,
                          handoff=handoff if role is Role.PREFILL else None)
                 for i in range(strat.count(role))]
        stages.append(Stage(insts, get_router(cfg.router)(), cap, stop, _assigner(req, role, first_index)))
        first_index += len(insts)
    source = closed if closed is not None else OpenLoop(req.arrival, range(req.n))
    run = run_fleet(stages, req, source=source, handed=handed)
    return run.instances, run.stopped_early


def _assigner(req: RequestState, role: Role, offset: int) -> Any:
    """Records the instance a request was routed to (fleet-wide index)."""
    if role is Role.COLLOCATED:
        def assign(q: int, i: int) -> None:
            req.p_inst[q] = i
            req.d_inst[q] = i
    elif role is Role.PREFILL:
        def assign(q: int, i: int) -> None:
            req.p_inst[q] = i
    else:
        def assign(q: int, i: int) -> None:
            req.d_inst[q] = offset + i
    return assign


def _run_bestserve(cfg: SimulationConfig, clocks: dict[Role, StepClock], req: RequestState) -> bool:
    fleet = cfg.fleet
    strat = fleet.strategy
    A = np.asarray(req.arrival)
    inp = np.asarray(req.inp)
    out = np.asarray(req.out)
    oracle_p = bs.Oracle(clocks[fleet.roles[0]].est)
    oracle_d = bs.Oracle(clocks[fleet.roles[-1]].est)
    res = bs.run_bestserve(
        A, inp, out, disaggregated=strat.is_disaggregated, n_prefill=strat.num_prefill,
        n_decode=strat.num_decode, n_collocated=strat.num_collocated,
        prefill_b_max=fleet.max_prompts, decode_b_max=fleet.max_batch,
        oracle_p=oracle_p, oracle_d=oracle_d, tau=cfg.tau)
    req.first_token = res["first_token"].tolist()
    req.finish = res["finish"].tolist()
    req.p_inst = res["prefill_instance"].tolist()
    req.d_inst = res["decode_instance"].tolist()
    req.start = res["start"].tolist()
    req.decode_arrival = res["decode_arrival"].tolist()
    req.decode_start = res["decode_start"].tolist()
    return False


def _result(cfg: SimulationConfig, req: RequestState, insts: list[Instance], clocks: dict[Role, StepClock],
            stopped: bool) -> SimulationResult:
    rec = req.records()
    done = np.isfinite(rec.finish)
    n = req.n
    n_done = int(done.sum())
    t0 = float(rec.arrival.min()) if n else 0.0
    t_end = float(np.max(rec.finish[done])) if n_done else t0
    span = max(t_end - t0, 1e-12)
    out_tok = float(rec.output_len[done].sum())
    all_tok = out_tok + float(rec.input_len[done].sum())
    slo = cfg.slo
    with np.errstate(invalid="ignore"):
        ok_ttft = np.isfinite(rec.ttft) & (rec.ttft <= slo.ttft_s) & done
        ok_tpot = np.isfinite(rec.tpot) & (rec.tpot <= slo.tpot_s) & done
    m = cfg.model
    fom = 0.0
    if n_done:
        # distinct (input, output) pairs in lexicographic order, as one int64 key each (token
        # counts are far below 2^32)
        keys, counts = np.unique((rec.input_len[done] << 32) | rec.output_len[done], return_counts=True)
        for key, c in zip(keys.tolist(), counts.tolist(), strict=True):
            fom += c * fom_flops(1, key >> 32, key & 0xFFFFFFFF, m.num_hidden_layers, m.hidden_size,
                                 m.num_attention_heads)
        fom /= span
    # overload: the backlog when the last request arrives is a large share of the stream, or
    # requests were still unfinished at the simulated-time cap
    t_last = float(rec.arrival.max()) if n else 0.0
    with np.errstate(invalid="ignore"):
        backlog = int(np.count_nonzero(~(rec.finish <= t_last)))
    fleet = cfg.fleet
    slots = fleet.max_batch * fleet.strategy.num_instances * fleet.first.parallel.pp
    overloaded = (not stopped and n_done < n) or backlog > max(0.1 * n, 2 * slots)
    return SimulationResult(
        config=cfg, num_requests=n, num_completed=n_done,
        ttft_s=LatencyStats.of(rec.ttft[done]), tpot_s=LatencyStats.of(rec.tpot[done]),
        e2e_s=LatencyStats.of(rec.e2e[done]), queue_s=LatencyStats.of(rec.queue[done]),
        throughput_rps=n_done / span if n_done else 0.0,
        output_tokens_per_s=out_tok / span if n_done else 0.0,
        total_tokens_per_s=all_tok / span if n_done else 0.0,
        slo_attainment=float(np.count_nonzero(ok_ttft & ok_tpot)) / n if n else 0.0,
        ttft_attainment=float(np.count_nonzero(ok_ttft)) / n if n else 0.0,
        tpot_attainment=float(np.count_nonzero(ok_tpot)) / n if n else 0.0,
        overloaded=bool(overloaded), stopped_early=bool(stopped), makespan_s=span, fom=fom,
        num_preemptions=int(sum(i.num_preemptions for i in insts)),
        kv_limited=bool(sum(i.num_preemptions for i in insts)) or any(
            i.kv.peak >= i.kv.total - i.max_batch for i in insts),
        kv_capacity_tokens={role.value: int(c.est.memory.kv_capacity_tokens) for role, c in clocks.items()},
        num_steps=int(sum(i.num_steps for i in insts)), requests=rec,
    )


def replace(config: SimulationConfig, **changes: Any) -> SimulationConfig:
    """``dataclasses.replace`` for configs (e.g. another rate)."""
    return dataclasses.replace(config, **changes)
