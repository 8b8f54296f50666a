"""``simulate(config) -> SimulationResult``: a request stream through a fleet of instances.

Two fidelities:

* ``iteration`` (default): every step of every instance is one batch of known composition,
  timed by the estimator; continuous batching with KV blocks and preemption
  (:mod:`serveplan.sim.instance`, :mod:`serveplan.sim.cluster`).
* ``bestserve``: BestServe's Algorithms 2-7 with the pseudo batch size
  (:mod:`serveplan.sim.bestserve`).

Runs are pure in ``(config)``: arrivals come from ``np.random.default_rng(seed)`` (common random
numbers across rates, :func:`serveplan.sim.workload.arrival_times`) and lengths from the
workload. The config is resolved once per run (:func:`serveplan.sim.deployment.resolve`); its step
clocks come from the caller's :class:`~serveplan.sim.clock.Clocks` when one is given (a goodput
search shares one across its simulations), else from a fresh one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from serveplan.errors import InfeasibleError, SpecError
from serveplan.estimator.batch import StepBatch
from serveplan.estimator.static import decode_times, fom_flops
from serveplan.sim import bestserve as bs
from serveplan.sim.clock import Clocks
from serveplan.sim.cluster import ClosedLoop, EarlyStop, OpenLoop, Stage, kv_transfer_time, run_fleet, session_loop
from serveplan.sim.config import Fidelity, SimulationConfig
from serveplan.sim.deployment import Deployment, resolve
from serveplan.sim.fleet import Role
from serveplan.sim.instance import Instance
from serveplan.sim.metrics import GapLog, LatencyStats, QueueGrowth
from serveplan.sim.prefix_cache import (
    PrefixCacheReport,
    PrefixStats,
    attach_prefix_caches,
    block_chains,
    prefix_report,
)
from serveplan.sim.request import RequestRecords, RequestState
from serveplan.sim.router import get_router
from serveplan.sim.schedulers import get_scheduler
from serveplan.sim.serving import steady_window
from serveplan.sim.stream import check_size, run_windowed, windowed
from serveplan.sim.workload import Workload, arrival_times
from serveplan.units import ceil_div


@dataclass(frozen=True, slots=True, kw_only=True)
class ClosedLoopStats:
    """What a closed loop at ``concurrency`` clients measures over its steady window.

    ``window_s`` is ``(start, end)``: from the first client's second send to the last send (see
    :func:`~serveplan.sim.serving.steady_window`); latencies are over the ``num_measured``
    requests sent and finished inside it; rates count the completions inside it per second.
    ``tokens_per_s_per_user`` is ``1 / mean TPOT``; ``output_tokens_per_s_per_device`` divides the
    output rate by the fleet's devices. ``littles_law`` is ``throughput x mean E2E`` of the requests
    completing in the window, which must equal the concurrency in a closed loop (zero think time).
    """

    concurrency: int
    window_s: tuple[float, float]
    num_measured: int
    ttft_s: LatencyStats
    tpot_s: LatencyStats
    e2e_s: LatencyStats
    throughput_rps: float
    output_tokens_per_s: float
    output_tokens_per_s_per_device: float
    tokens_per_s_per_user: float
    littles_law: float

    def to_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "window_s": list(self.window_s), "num_measured": self.num_measured,
                "ttft_s": self.ttft_s.to_dict(), "tpot_s": self.tpot_s.to_dict(), "e2e_s": self.e2e_s.to_dict(),
                "throughput_rps": self.throughput_rps, "output_tokens_per_s": self.output_tokens_per_s,
                "output_tokens_per_s_per_device": self.output_tokens_per_s_per_device,
                "tokens_per_s_per_user": self.tokens_per_s_per_user, "littles_law": self.littles_law}


def closed_loop_stats(rec: RequestRecords, concurrency: int, num_devices: int) -> ClosedLoopStats:
    """:class:`ClosedLoopStats` of a closed-loop run's records."""
    w = steady_window(rec.arrival, rec.finish, concurrency)
    m = w.measured
    span = w.end_s - w.start_s
    in_window = w.completed
    if span > 0 and w.completions:
        rps = w.completions / span
        out_rate = float(rec.output_len[in_window].sum()) / span
    else:  # too short for a steady part: the whole run
        done = np.isfinite(rec.finish)
        whole = float(np.nanmax(rec.finish) - np.min(rec.arrival)) if done.any() else 0.0
        rps = float(done.sum()) / whole if whole > 0 else 0.0
        out_rate = float(rec.output_len[done].sum()) / whole if whole > 0 else 0.0
    tpot = LatencyStats.of(rec.tpot[m])
    e2e = LatencyStats.of(rec.e2e[m])
    return ClosedLoopStats(
        concurrency=concurrency, window_s=(w.start_s, w.end_s), num_measured=int(m.sum()),
        ttft_s=LatencyStats.of(rec.ttft[m]), tpot_s=tpot, e2e_s=e2e, throughput_rps=rps,
        output_tokens_per_s=out_rate, output_tokens_per_s_per_device=out_rate / max(num_devices, 1),
        tokens_per_s_per_user=1.0 / tpot.mean if tpot.mean and tpot.mean > 0 else math.nan,
        # Little's law over the window: its completions per second times their mean time in the system
        littles_law=rps * float(np.mean(rec.e2e[in_window])) if in_window.any() else math.nan,
    )


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
    closed_loop: ClosedLoopStats | None = None
    prefill_tokens_saved: int = 0
    prefix_cache: PrefixCacheReport | None = None
    #: inter-token latency over tokens (``simulate(itl=True)``; None: not recorded)
    itl_s: LatencyStats | None = None

    @property
    def bubble_s(self) -> np.ndarray:
        return self.requests.bubble

    @property
    def slo_met_throughput_rps(self) -> float:
        """Completed requests meeting both targets, per second of this run (at this rate). Not the
        goodput, which is the highest rate at which the SLO holds at its percentile (``serveplan
        optimize``, :func:`serveplan.optimize.goodput.max_goodput`)."""
        return self.slo_attainment * self.num_requests / self.makespan_s if self.makespan_s > 0 else 0.0

    def to_dict(self, *, include_requests: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "config": self.config.to_dict(),
            "num_requests": self.num_requests, "num_completed": self.num_completed,
            "ttft_s": self.ttft_s.to_dict(), "tpot_s": self.tpot_s.to_dict(), "e2e_s": self.e2e_s.to_dict(),
            "queue_s": self.queue_s.to_dict(),
            "throughput_rps": self.throughput_rps, "output_tokens_per_s": self.output_tokens_per_s,
            "total_tokens_per_s": self.total_tokens_per_s, "slo_met_throughput_rps": self.slo_met_throughput_rps,
            "slo_attainment": self.slo_attainment, "ttft_attainment": self.ttft_attainment,
            "tpot_attainment": self.tpot_attainment, "overloaded": self.overloaded,
            "stopped_early": self.stopped_early, "makespan_s": self.makespan_s, "fom_flops_per_s": self.fom,
            "num_preemptions": self.num_preemptions, "kv_limited": self.kv_limited,
            "kv_capacity_tokens": dict(self.kv_capacity_tokens), "num_steps": self.num_steps,
            "bubble_s": LatencyStats.of(self.requests.bubble).to_dict(),
            "closed_loop": None if self.closed_loop is None else self.closed_loop.to_dict(),
            "prefill_tokens_saved": self.prefill_tokens_saved,
        }
        if self.prefix_cache is not None:
            d["prefix_cache"] = self.prefix_cache.to_dict()
        if self.itl_s is not None:
            d["itl_s"] = self.itl_s.to_dict()
        if include_requests:
            d["requests"] = self.requests.to_dict()
        return d


# ---------------------------------------------------------------------- simulate

def simulate(config: SimulationConfig | Deployment, *, clients: int | None = None,
             think_s: float | np.ndarray = 0.0, ramp_s: float | None = None, not_before: np.ndarray | None = None,
             progress: Callable[[int], None] | None = None, clocks: Clocks | None = None,
             itl: bool = False) -> SimulationResult:
    """Simulate ``config.workload`` through ``config.fleet`` and summarise what users see.

    With ``clients`` the stream is a closed loop instead of ``config.rate``: that many users,
    each sending its next request (the workload's requests in order) ``think_s`` seconds after
    its previous one finished (one value, or one per request in order: the wait before that
    request is sent), all starting at t=0; the run goes until every request finished or
    ``config.max_time_s`` (no default cap). Iteration fidelity only, without early stop.
    ``config.concurrency`` sets ``clients`` too. ``ramp_s`` spreads the clients' first sends
    evenly over that many seconds (default: all at t=0, as ``vllm bench serve
    --max-concurrency`` and aiconfigurator's measurements start). ``not_before`` (with
    ``clients``) gives each request (in order) the earliest time it may be sent: an open-loop
    stream with at most ``clients`` requests in flight, as ``vllm bench serve --request-rate R
    --max-concurrency C`` sends it; latencies count from the send. ``progress`` is called now and
    then (iteration fidelity) with the number of requests finished so far (of
    ``workload.num_requests``; for a disaggregated fleet, prefills and decodes each count half).
    ``itl`` records every decoding step's gap and gives :attr:`SimulationResult.itl_s`, the
    inter-token latency over tokens (:class:`~serveplan.sim.metrics.GapLog`; iteration fidelity; it
    costs a copy of each stretch's step times, so searches leave it off).

    Memory: an open-loop stream of more than :data:`~serveplan.sim.stream.WINDOW_MIN_REQUESTS`
    requests through a collocated fleet runs windowed (:mod:`serveplan.sim.stream`), its running
    state bounded by the requests in flight; at most :data:`~serveplan.sim.stream.MAX_REQUESTS`
    requests per simulation.

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
    dep = config if isinstance(config, Deployment) else resolve(config, clocks)
    cfg = dep.config
    wl = cfg.workload
    check_size(len(wl.input_lengths))
    closed = None
    if clients is None and cfg.concurrency is not None:
        clients = cfg.concurrency
    if not_before is not None and clients is None:
        raise SpecError("not_before needs clients= (the cap on requests in flight)")
    if clients is not None:
        closed = _closed_loop(cfg, clients, think_s, ramp_s, not_before)
        arrival = np.zeros(len(wl.input_lengths))  # set as the clients send
    elif wl.session is not None:
        closed = _session_starts(cfg)
        arrival = np.zeros(len(wl.input_lengths))
    elif cfg.offline:
        if cfg.fidelity is not Fidelity.ITERATION or cfg.early_stop:
            raise SpecError("an offline run needs fidelity='iteration' and early_stop=False")
        arrival = np.zeros(len(wl.input_lengths))  # everything queued at t=0
    else:
        arrival = arrival_times(wl, cfg.rate, cfg.seed)
    _check_kv(dep, wl)
    if cfg.max_time_s is not None:
        cap = cfg.max_time_s
    else:
        cap = math.inf if (closed is not None or cfg.offline) else _default_cap(dep, arrival, wl)
    if cfg.fidelity is Fidelity.BESTSERVE and cfg.prefix_hit:
        raise SpecError("prefix_hit needs fidelity='iteration' (BestServe's algorithms have no prefix cache)")
    pstats = PrefixStats(len(arrival)) if wl.prefix_cached else None
    if pstats is None and windowed(len(arrival), offline=cfg.offline, closed=closed is not None,
                                   disaggregated=cfg.fleet.strategy.is_disaggregated, early_stop=cfg.early_stop,
                                   iteration=cfg.fidelity is Fidelity.ITERATION):
        req = RequestState(arrival[:0], wl.input_lengths[:0], wl.output_lengths[:0])
        stage = _stages(dep, req, cap, None, itl=itl)[0]
        store, saved = run_windowed(stage, req, arrival, wl.input_lengths, wl.output_lengths,
                                    prefix_hit=cfg.prefix_hit, on_progress=progress)
        insts, stopped, rec = stage.instances, False, store.records()
    else:
        req = RequestState(arrival, wl.input_lengths, wl.output_lengths)
        saved = _apply_prefix_hit(req, cfg.prefix_hit)
        if cfg.fidelity is Fidelity.BESTSERVE:
            insts = []
            stopped = _run_bestserve(dep, req)
        else:
            insts, stopped = _run_iteration(dep, req, cap, closed, pstats, progress, itl)
        rec = req.records()
    res = _result(dep, rec, insts, stopped, closed_loop=clients is not None)
    if clients is not None or saved or pstats is not None:
        cl = closed_loop_stats(res.requests, clients, cfg.num_devices) if clients is not None else None
        res = dataclasses.replace(res, closed_loop=cl, prefill_tokens_saved=saved, prefix_cache=None if pstats is None
                                  else prefix_report(pstats, res.requests, cfg.kv_tiers))
    return res


@dataclass(frozen=True, slots=True)
class LoneRequest:
    """What one request alone on an idle deployment sees (:func:`lone_request`), seconds."""

    ttft_s: float
    tpot_s: float
    e2e_s: float


def lone_request(deployment: Deployment, input_len: int, output_len: int) -> LoneRequest:
    """TTFT, TPOT and end-to-end latency of one request of ``input_len`` prompt and ``output_len``
    output tokens alone on ``deployment`` (open loop, nothing else in flight): the simulator itself
    run on that one request with the deployment's own role setups and step clocks, so the
    optimizer's zero-load figures are the simulator's by construction."""
    cfg = deployment.config
    one = dataclasses.replace(cfg, workload=Workload.fixed(int(input_len), int(output_len), num_requests=1),
                              rate=1.0, offline=False, concurrency=None, early_stop=False, max_time_s=None,
                              prefix_hit=0.0, kv_tiers=None)
    res = simulate(dataclasses.replace(deployment, config=one))
    rec = res.requests
    tpot = float(rec.tpot[0]) if output_len > 1 else 0.0
    return LoneRequest(ttft_s=float(rec.ttft[0]), tpot_s=tpot, e2e_s=float(rec.e2e[0]))


def _session_starts(cfg: SimulationConfig) -> ClosedLoop:
    """Sessions starting open-loop (``rate``: sessions/s, the workload's arrival process) or all
    at once offline; each later turn follows its previous answer."""
    wl = cfg.workload
    assert wl.session is not None  # a session workload (the caller's test)
    n_s = int(np.max(wl.session)) + 1
    starts = (np.zeros(n_s) if cfg.offline else
              arrival_times(Workload(input_lengths=1, output_lengths=1, num_requests=n_s, arrival=wl.arrival,
                                     cv=wl.cv), cfg.rate, cfg.seed))
    return session_loop(wl, starts=starts.tolist(), clients=None)


def _seconds(x: Any) -> bool:
    """Whether ``x`` is one non-negative, finite number."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return False
    return bool(np.ndim(x) == 0 and math.isfinite(v) and v >= 0)


def _closed_loop(cfg: SimulationConfig, clients: int, think_s: float | np.ndarray, ramp_s: float | None,
                 not_before: np.ndarray | None) -> ClosedLoop:
    """The closed loop of :func:`simulate`'s ``clients`` (checked)."""
    if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
        raise SpecError(f"clients={clients!r} must be a positive integer")
    n = len(cfg.workload.input_lengths)
    each = None
    if np.ndim(think_s) == 1:
        th = np.asarray(think_s, dtype=float)
        if th.shape != (n,) or not np.all(np.isfinite(th)) or np.any(th < 0):
            raise SpecError(f"think_s: expected {n} non-negative, finite seconds (one per request), "
                            f"got {th.shape[0]} values with min {np.min(th) if th.size else float('nan')}")
        each, think_s = th.tolist(), 0.0
    elif not _seconds(think_s):
        raise SpecError(f"think_s={think_s!r} must be a non-negative number of seconds")
    if cfg.fidelity is not Fidelity.ITERATION or cfg.early_stop:
        raise SpecError("a closed loop (clients=...) needs fidelity='iteration' and early_stop=False")
    if ramp_s is not None and not (math.isfinite(ramp_s) and ramp_s >= 0):
        raise SpecError(f"ramp_s={ramp_s!r} must be a non-negative number of seconds")
    sends = None
    if not_before is not None:
        nb = np.asarray(not_before, dtype=float)
        if nb.shape != (n,) or not np.all(np.isfinite(nb)) or np.any(np.diff(nb) < 0):
            raise SpecError(f"not_before must hold {n} finite, non-decreasing send times (one per request)")
        sends = nb.tolist()
    if cfg.workload.session is not None:  # each session's turns follow one another on one of the clients
        if each is not None or float(think_s) > 0:
            raise SpecError(f"think_s={think_s!r}: a session workload's turns wait the workload's own think "
                            "time (session_workload(think_s=...), --think-time), not simulate's; leave think_s at 0")
        return session_loop(cfg.workload, starts=None, clients=clients)
    return ClosedLoop(range(n), clients, float(think_s), ramp_s=ramp_s or 0.0, not_before=sends, think_each=each)


def _apply_prefix_hit(req: RequestState, share: float) -> int:
    """Mark ``share`` of every prompt (at least one token left to compute) as found in the prefix
    cache: those tokens count as prefilled. Returns the prompt tokens saved."""
    if not share:
        return 0
    return req.apply_prefix_hit(share)


def _check_kv(dep: Deployment, wl: Workload) -> None:
    cfg, clocks = dep.config, dep.clock_by_role
    if cfg.fidelity is Fidelity.BESTSERVE:
        return  # the paper's simulator is memory-insensitive (§12)
    longest = int(np.max(wl.input_lengths + wl.output_lengths - 1))
    bs_ = cfg.block_size
    for role, clock in clocks.items():
        cap = clock.est.memory.kv_capacity_tokens // bs_ * bs_
        need = ceil_div(int(wl.input_lengths.max()) if role is Role.PREFILL else longest, bs_) * bs_
        if cap < need and (cfg.offline or cfg.concurrency):
            mem = clock.est.memory
            raise InfeasibleError(
                f"the longest request ({need:,} tokens) needs {need * mem.kv_bytes_per_token / 1e9:.2f} GB of KV "
                f"cache per device but a {role.value} instance ({cfg.fleet.instance(role).parallel.label()}) has "
                f"{mem.kv_capacity_tokens * mem.kv_bytes_per_token / 1e9:.2f} GB ({mem.kv_capacity_tokens:,} tokens) "
                "after weights and activations: it can never be admitted; use a larger tp/pp or shorter requests")
        if cap < need:
            inst = cfg.fleet.instance(role)
            field_name = "prefill_max_batch" if role is Role.PREFILL else "max_batch"
            raise SpecError(
                f"{field_name}={inst.batching.max_batch}: a {role.value} instance ({inst.parallel.label()}) holds "
                f"{clock.est.memory.kv_capacity_tokens} KV tokens, fewer than one request needs ({need} tokens); "
                "use a larger tp/pp or shorter requests")


def _default_cap(dep: Deployment, arrival: np.ndarray, wl: Workload) -> float:
    """4x the arrival span plus 20x the zero-load latency of the longest request."""
    cfg, clocks = dep.config, dep.clock_by_role
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


def _run_iteration(dep: Deployment, req: RequestState, cap: float,
                   closed: ClosedLoop | None = None,
                   pstats: PrefixStats | None = None,
                   progress: Callable[[int], None] | None = None, itl: bool = False) -> tuple[list[Instance], bool]:
    handed: list[tuple[float, int]] = []
    stages = _stages(dep, req, cap, handed, pstats, itl=itl)
    if progress is not None:
        _report_progress(stages, progress)
    source = closed if closed is not None else OpenLoop(req.arrival, range(req.n))
    run = run_fleet(stages, req, source=source, handed=handed)
    return run.instances, run.stopped_early


def _report_progress(stages: list[Stage], progress: Callable[[int], None]) -> None:
    """Have every stage report, as it drains an instance, the requests finished (a disaggregated
    fleet's prefill and decode stages each count half a request)."""
    insts = [inst for st in stages for inst in st.instances]
    k = len(stages)

    def report() -> None:
        progress(sum(inst.completed for inst in insts) // k)

    for st in stages:
        st.on_progress = report


def _stages(dep: Deployment, req: RequestState, cap: float, handed: list[tuple[float, int]] | None,
            pstats: PrefixStats | None = None, *, itl: bool = False) -> list[Stage]:
    """The fleet's stages: its instances (their schedulers, KV caches, hand-off), routers and early stop;
    ``itl``: each instance records its inter-token gaps."""
    cfg, clocks = dep.config, dep.clock_by_role
    fleet = cfg.fleet
    strat = fleet.strategy
    stop = EarlyStop(req, cfg.slo) if cfg.early_stop else None
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
        assert transfer is not None and handed is not None
        t_arrive = t + transfer(q)
        handed.append((t_arrive, q))
        return t_arrive

    stages: list[Stage] = []
    first_index = 0
    for role in fleet.roles:
        cfg_r = fleet.instance(role)
        rs = dep.role(role)
        policy = get_scheduler(cfg_r.batching.scheduler)
        insts = [Instance(first_index + i, role, clocks[role], policy(rs.options), req, batching=cfg_r.batching,
                          block_size=cfg.block_size, handoff=handoff if role is Role.PREFILL else None,
                          intake=rs.intake, keep_prefix=rs.keep_prefix, spec=cfg_r.spec)
                 for i in range(strat.count(role))]
        if itl:
            for inst in insts:
                inst.itl = GapLog()
        if pstats is not None and role is not Role.DECODE:
            attach_prefix_caches(insts, clocks[role], block_chains(cfg.workload, cfg.block_size), pstats,
                                 cfg.kv_tiers, cfg.engine)
        # the API server of each replica takes the requests the clients send (not the decode
        # stage's hand-offs); an offline run has none (everything is queued before the first step)
        fs = cfg.engine.frontend_s if cfg.engine is not None and not stages and not cfg.offline else 0.0
        stages.append(Stage(insts, get_router(cfg.router)(), cap, stop, _assigner(req, role, first_index),
                            frontend_s=fs))
        first_index += len(insts)
    return stages


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


def _run_bestserve(dep: Deployment, req: RequestState) -> bool:
    cfg, clocks = dep.config, dep.clock_by_role
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
        prefill_max_batch=fleet.max_prompts, max_batch=fleet.max_batch,
        oracle_p=oracle_p, oracle_d=oracle_d, tau=cfg.tau)
    req.first_token = res["first_token"].tolist()
    req.finish = res["finish"].tolist()
    req.p_inst = res["prefill_instance"].tolist()
    req.d_inst = res["decode_instance"].tolist()
    req.start = res["start"].tolist()
    req.decode_arrival = res["decode_arrival"].tolist()
    req.decode_start = res["decode_start"].tolist()
    return False


def _result(dep: Deployment, rec: RequestRecords, insts: list[Instance], stopped: bool, *,
            closed_loop: bool = False) -> SimulationResult:
    cfg, clocks = dep.config, dep.clock_by_role
    done = np.isfinite(rec.finish)
    n = len(rec)
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
    # overload: the queue grows (completions fall short of arrivals over the second half of the
    # arrival span, beyond a stable queue's noise: QueueGrowth), or requests were still unfinished
    # at the simulated-time cap
    queue = None if closed_loop else QueueGrowth.of(rec.arrival, rec.finish)
    overloaded = (not stopped and n_done < n) or (queue is not None and queue.growing)
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
        itl_s=None if not insts or insts[0].itl is None else GapLog.stats([i.itl for i in insts if i.itl is not None]),
    )

