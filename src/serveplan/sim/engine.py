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
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from serveplan.errors import InfeasibleError, SpecError, check_int
from serveplan.estimator.batch import StepBatch
from serveplan.estimator.static import decode_times, fom_flops
from serveplan.sim import bestserve as bs
from serveplan.sim.clock import Clocks
from serveplan.sim.cluster import ClosedLoop, EarlyStop, OpenLoop, Stage, kv_transfer_time, run_fleet, session_loop
from serveplan.sim.deployment import BLOCK_SIZE, Deployment, graph_tokens_of, resolve
from serveplan.sim.fleet import Fleet, Role, Strategy
from serveplan.sim.instance import Instance
from serveplan.sim.metrics import SLO, LatencyStats, QueueGrowth
from serveplan.sim.prefix_cache import (
    KVTiers,
    PrefixCacheReport,
    PrefixStats,
    attach_prefix_caches,
    block_chains,
    prefix_report,
)
from serveplan.sim.request import RequestRecords, RequestState
from serveplan.sim.router import check_router, get_router
from serveplan.sim.schedulers import get_scheduler
from serveplan.sim.serving import EngineSetup, check_loads, resolve_engine, steady_window
from serveplan.sim.stream import check_size, run_windowed, windowed
from serveplan.sim.workload import MAX_REQUESTS, Workload, arrival_times
from serveplan.specs.catalog import get_engine
from serveplan.specs.engine import EngineSpec
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.model import ModelSpec
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.profile import EfficiencyProfile
from serveplan.units import DType, ceil_div


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
                  "scheduler", "chunk_size", "token_budget", "spec")


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
    engine:
        A serving engine (``"vllm"``, ``"sglang"``, ``"trtllm"``, ``"bestserve"``, a versioned id
        such as ``"vllm-0.11"``, or an :class:`~serveplan.specs.engine.EngineSpec`): its scheduler,
        limits, KV block size, memory rule and KV format fill every fleet setting not given (the
        strategy defaults to ``"1m"``, the TP to the smallest that fits,
        :func:`~serveplan.sim.serving.default_tp`). ``None`` (default): the fleet as given or
        built from the flat settings' defaults (BestServe's testbed), vLLM's memory rule.
    kv_dtype:
        KV-cache format (default: the engine's choice, else the estimator's: the weights' format
        for 16/32-bit weights, bf16 otherwise).
    offline:
        Every request is queued at t=0 and the run goes to completion (``rate`` must be None).
    concurrency:
        Closed loop with that many clients (``rate`` must be None); statistics over the steady
        window (:func:`~serveplan.sim.serving.steady_window`) are in
        :attr:`SimulationResult.closed_loop`.
    prefix_hit:
        Share of each prompt found in the prefix cache, in [0, 1): those tokens are not prefilled
        (they still occupy KV blocks and are attended to).
    engine_setup:
        The resolved engine (set by the constructor; pass only when copying a config).
    kv_tiers:
        CPU memory and disk tiers of the prefix cache (:class:`~serveplan.sim.prefix_cache.KVTiers`);
        the cache runs when the workload shares prompt blocks (sessions, trace hashes, a system
        prompt: ``Workload.prefix_cached``).
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
    engine: EngineSpec | None = None
    kv_dtype: DType | None = None
    offline: bool = False
    concurrency: int | None = None
    prefix_hit: float = 0.0
    engine_setup: EngineSetup | None = None
    kv_tiers: KVTiers | None = None

    def __init__(self, *, model: ModelSpec, hardware: DeviceSpec, profile: EfficiencyProfile,
                 fleet: Fleet | None = None, router: str = "round_robin", fidelity: Fidelity | str = Fidelity.ITERATION,
                 rate: float | None = 3.5, workload: Workload | None = None, slo: SLO | None = None, seed: int = 0,
                 dtype: DType | str | None = None, early_stop: bool = False, max_time_s: float | None = None,
                 tau: float = bs.TAU, engine: str | EngineSpec | None = None, kv_dtype: DType | str | None = None,
                 offline: bool = False, concurrency: int | None = None, prefix_hit: float = 0.0,
                 engine_setup: EngineSetup | None = None, kv_tiers: KVTiers | None = None,
                 **fleet_settings: Any) -> None:
        unknown = sorted(set(fleet_settings) - set(FLEET_KEYWORDS))
        if unknown:
            raise TypeError(f"SimulationConfig got unexpected keyword arguments: {', '.join(unknown)}")
        if fleet is not None and fleet_settings:
            raise SpecError(f"give fleet= or the flat fleet settings ({', '.join(sorted(fleet_settings))}), not both")
        check_loads(offline=offline, concurrency=concurrency, rate=rate if (offline or concurrency) else None)
        if concurrency is not None and rate is not None:
            raise SpecError(f"concurrency={concurrency} with rate={rate}: a closed loop sets its own arrivals; "
                            "drop the rate (rate=None)")
        if not (isinstance(prefix_hit, (int, float)) and 0 <= prefix_hit < 1):
            raise SpecError(f"prefix_hit={prefix_hit!r} must be a share of prompt tokens in [0, 1)")
        kv = None if kv_dtype is None else DType.parse(kv_dtype)
        if kv is not None:
            _check_kv_format(hardware, kv)
        spec = get_engine(engine) if isinstance(engine, str) else engine
        if spec is not None:   # a measured profile's curves of this engine's own kernels
            profile = spec.profile_for(profile)
        if spec is not None and engine_setup is None:
            fleet, engine_setup = _engine_fleet(spec, model, hardware, profile, fleet, fleet_settings,
                                                workload if workload is not None else _default_workload(),
                                                offline=offline, dtype=dtype, kv_dtype=kv)
            host_note = _host_note(spec, model, fleet)
            if host_note:
                engine_setup = dataclasses.replace(engine_setup, notes=(*engine_setup.notes, host_note))
        elif fleet is None:
            fleet = Fleet.build(**fleet_settings)
        values = dict(model=model, hardware=hardware, profile=profile, fleet=fleet, router=router,
                      fidelity=Fidelity.parse(fidelity), rate=rate,
                      workload=workload if workload is not None else _default_workload(),
                      slo=slo if slo is not None else SLO(), seed=seed,
                      dtype=None if dtype is None else DType.parse(dtype), early_stop=early_stop,
                      max_time_s=max_time_s, tau=tau, engine=spec, kv_dtype=kv, offline=bool(offline),
                      concurrency=concurrency, prefix_hit=float(prefix_hit), engine_setup=engine_setup,
                      kv_tiers=kv_tiers)
        for k, v in values.items():
            object.__setattr__(self, k, v)
        self.__post_init__()

    def __post_init__(self) -> None:
        if not isinstance(self.fleet, Fleet):
            raise SpecError(f"fleet must be a Fleet (Fleet.build('2m', tp=4)), got {type(self.fleet).__name__}")
        check_router(self.router)
        if not isinstance(self.workload, Workload):
            raise SpecError(f"workload must be a Workload, got {type(self.workload).__name__}")
        if self.workload.arrival != "trace" and not (self.offline or self.concurrency):
            r = self.rate
            if r is None or isinstance(r, bool) or not isinstance(r, (int, float)) or not (math.isfinite(r) and r > 0):
                raise SpecError(f"rate={r!r} must be a positive number of requests per second")
        if not isinstance(self.slo, SLO):
            raise SpecError(f"slo must be an SLO, got {type(self.slo).__name__}")
        check_int("seed", self.seed, low=0, why="numpy seeds are non-negative")
        if self.concurrency is not None:
            check_int("concurrency", self.concurrency, low=1, high=MAX_REQUESTS, why="clients of a closed loop")

        if self.max_time_s is not None and not self.max_time_s > 0:
            raise SpecError(f"max_time_s={self.max_time_s!r} must be positive seconds")
        if not self.tau > 0:
            raise SpecError(f"tau={self.tau!r} must be positive (BestServe eq. 9 default 2.5)")
        if self.fleet.spec is not None:
            if self.fidelity is Fidelity.BESTSERVE:
                raise SpecError(f"spec_method={self.fleet.spec.method.value!r} needs fidelity='iteration' "
                                "(BestServe's algorithms decode one token per step)")
            if self.fleet.last.parallel.pp > 1:
                raise SpecError(f"pp={self.fleet.last.parallel.pp} with speculative decoding: the drafter runs "
                                "beside the whole model; use pp=1 with spec_method")
        if self.workload.prefix_cached or self.kv_tiers is not None:
            _check_prefix_setup(self)
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
            "engine": None if self.engine is None else self.engine.name,
            "kv_dtype": None if self.kv_dtype is None else self.kv_dtype.value, "offline": self.offline,
            "concurrency": self.concurrency, "prefix_hit": self.prefix_hit,
            "engine_setup": None if self.engine_setup is None else self.engine_setup.to_dict(),
            **({"kv_tiers": self.kv_tiers.to_dict()} if self.kv_tiers is not None else {}),
            **({"system_prompt_len": self.workload.system_prompt_len} if self.workload.system_prompt_len else {}),
        }

    @property
    def block_size(self) -> int:
        """Tokens per KV block (the engine's; vLLM's 16 without one)."""
        return self.engine_setup.block_size if self.engine_setup is not None else BLOCK_SIZE

    @property
    def effective_kv_dtype(self) -> DType | None:
        """KV format the estimator uses: as given, else the engine's choice (None: its default)."""
        if self.kv_dtype is not None:
            return self.kv_dtype
        return self.engine_setup.kv_dtype if self.engine_setup is not None else None


def _check_prefix_setup(cfg: SimulationConfig) -> None:
    """The prefix cache's settings against the rest (one line each, exit 2)."""
    wl = cfg.workload
    if cfg.kv_tiers is not None and not isinstance(cfg.kv_tiers, KVTiers):
        raise SpecError(f"kv_tiers must be a KVTiers, got {type(cfg.kv_tiers).__name__}")
    if cfg.kv_tiers is not None and not wl.prefix_cached:
        raise SpecError("kv_tiers hold prefix-cache blocks: give sessions, a trace with hash_ids or a "
                        "system prompt (--sessions, --trace, --system-prompt-len)")
    if cfg.prefix_hit and wl.prefix_cached:
        raise SpecError(f"prefix_hit={cfg.prefix_hit} is the quick knob for single-turn workloads; with sessions, "
                        "trace hashes or a system prompt the hit rate comes from the prefix cache (drop prefix_hit)")
    if cfg.fidelity is not Fidelity.ITERATION:
        raise SpecError("the prefix cache needs fidelity='iteration' (BestServe's algorithms have no KV blocks)")
    if wl.session is not None and cfg.early_stop:
        raise SpecError("sessions are a closed loop per session: early_stop=False")
    if cfg.model.local_window or cfg.model.num_attention_layers < cfg.model.num_hidden_layers:
        raise SpecError(f"model={cfg.model.name!r} has local-attention or state layers: the prefix cache models "
                        "full-attention KV only; use a full-attention model or drop sessions/system prompt/hash_ids")


def _check_kv_format(hardware: DeviceSpec, kv: DType) -> None:
    """A KV format the device has no arithmetic for is bad input (one line, exit 2): attention
    reads the cache in its own format, so the device must list it among its peak FLOP/s."""
    if kv not in hardware.peak_flops:
        raise SpecError(f"kv_dtype={kv.value!r}: {hardware.name} cannot hold a {kv.value} KV cache; expected one of: "
                        f"{', '.join(sorted(d.value for d in hardware.peak_flops))}")


def _engine_fleet(spec: EngineSpec, model: ModelSpec, hardware: DeviceSpec, profile: EfficiencyProfile,
                  fleet: Fleet | None, settings: dict[str, Any], workload: Workload, *, offline: bool,
                  dtype: DType | str | None, kv_dtype: DType | None) -> tuple[Fleet, EngineSetup]:
    """The fleet an engine runs: every flat setting given overrides the engine's default."""
    if fleet is not None:
        par = fleet.last.parallel
        b = fleet.last.batching
        setup = resolve_engine(spec, model, hardware, profile, parallel=par, longest_request=workload.max_tokens,
                               offline=offline, dtype=dtype, kv_dtype=kv_dtype, max_batch=b.max_batch,
                               token_budget=b.token_budget, chunk_size=b.chunk_size, prefill_max_batch=b.max_prompts,
                               scheduler=b.scheduler)
        return fleet, setup
    tp = settings.get("tp")
    layout: ParallelConfig | None = None
    if tp is not None:
        layout = ParallelConfig(tp=tp, pp=settings.get("pp", 1), dp=settings.get("dp", 1), ep=settings.get("ep", 1))
    setup = resolve_engine(spec, model, hardware, profile, parallel=layout, longest_request=workload.max_tokens,
                           offline=offline, dtype=dtype, kv_dtype=kv_dtype, max_batch=settings.get("max_batch"),
                           token_budget=settings.get("token_budget"), chunk_size=settings.get("chunk_size"),
                           prefill_max_batch=settings.get("prefill_max_batch"), scheduler=settings.get("scheduler"))
    p = setup.parallel
    budget = None if math.isinf(setup.token_budget) else int(setup.token_budget)
    built = Fleet.build(settings.get("strategy", "1m"), tp=p.tp, prefill_tp=settings.get("prefill_tp"),
                        decode_tp=settings.get("decode_tp"), pp=p.pp, dp=p.dp, ep=p.ep, max_batch=setup.max_batch,
                        prefill_max_batch=setup.prefill_max_batch, scheduler=setup.scheduler,
                        chunk_size=setup.chunk_size, token_budget=budget, spec=settings.get("spec"))
    return built, setup


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
        if include_requests:
            d["requests"] = self.requests.to_dict()
        return d


def _host_note(engine: EngineSpec, model: ModelSpec, fleet: Fleet) -> str | None:
    """The engine note on the steps that pay the engine's host work, with each role's graph bound."""
    bounds = {role.value: graph_tokens_of(engine, fleet.instance(role)) for role in fleet.roles}
    graphs: int | dict[str, int] = next(iter(bounds.values())) if len(set(bounds.values())) == 1 else bounds
    return engine.host_note(moe=model.is_moe, graphs=graphs)


# ---------------------------------------------------------------------- simulate

#: fleet options a user may leave to the engine (``None``: the engine's default)
FLEET_OPTIONS = ("tp", "prefill_tp", "decode_tp", "pp", "dp", "ep", "max_batch", "prefill_max_batch", "scheduler",
                 "chunk_size", "token_budget")


def simulation_config(*, engine: str | EngineSpec | None, strategy: str | None = None,
                      fleet_options: dict[str, Any] | None = None, allow_long_context: bool = False,
                      **config: Any) -> SimulationConfig:
    """A :class:`SimulationConfig` from user-level options, as ``serveplan simulate`` and the web
    planner take them: the engine (a family, a versioned id or a spec; ``None``: the default,
    vLLM), its default strategy when none is given (``1p1d`` for BestServe's testbed, else ``1m``),
    and only the fleet options that were given (``None`` or a ``prefill_max_batch`` of 0 leave
    the engine's default). ``config`` holds the other :class:`SimulationConfig` fields.

    A request longer than the model's ``max_position_embeddings`` is refused unless
    ``allow_long_context`` (the model was not trained for it, and engines refuse it unless told
    otherwise: vLLM needs ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` for a ``--max-model-len`` above the
    config's)."""
    check_context(config.get("model"), config.get("workload"), allow_long_context)
    spec = engine if isinstance(engine, EngineSpec) else get_engine("vllm" if engine is None else engine)
    opts = dict(fleet_options or {})
    unknown = sorted(set(opts) - set(FLEET_OPTIONS))
    if unknown:
        raise SpecError(f"unknown fleet option(s) {', '.join(unknown)}; expected: {', '.join(FLEET_OPTIONS)}")
    if not opts.get("prefill_max_batch"):
        opts.pop("prefill_max_batch", None)
    given = {k: v for k, v in opts.items() if v is not None}
    return SimulationConfig(engine=spec, strategy=strategy or spec.default_strategy or "1m",
                            **given, **config)


def check_context(model: ModelSpec | None, workload: Workload | None, allow_long_context: bool = False) -> None:
    """Refuse a workload whose longest request exceeds the model's ``max_position_embeddings``
    (see :func:`simulation_config`)."""
    if model is None or workload is None or allow_long_context:
        return
    longest = workload.max_tokens
    if longest > model.max_position_embeddings:
        raise SpecError(
            f"a request of {longest:,} tokens (input + output) exceeds max_position_embeddings="
            f"{model.max_position_embeddings:,} of {model.name!r}; expected requests within the model's context, "
            "or --allow-long-context (allow_long_context=True) to simulate it anyway")


def simulate(config: SimulationConfig | Deployment, *, clients: int | None = None,
             think_s: float | np.ndarray = 0.0, ramp_s: float | None = None, not_before: np.ndarray | None = None,
             progress: Callable[[int], None] | None = None, clocks: Clocks | None = None) -> SimulationResult:
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
        stage = _stages(dep, req, cap, None)[0]
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
            insts, stopped = _run_iteration(dep, req, cap, closed, pstats, progress)
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
                   progress: Callable[[int], None] | None = None) -> tuple[list[Instance], bool]:
    handed: list[tuple[float, int]] = []
    stages = _stages(dep, req, cap, handed, pstats)
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
            pstats: PrefixStats | None = None) -> list[Stage]:
    """The fleet's stages: its instances (their schedulers, KV caches, hand-off), routers and early stop."""
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
    )


def replace(config: SimulationConfig, **changes: Any) -> SimulationConfig:
    """``dataclasses.replace`` for configs (e.g. another rate)."""
    return dataclasses.replace(config, **changes)
