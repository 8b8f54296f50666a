"""What a simulation runs: :class:`SimulationConfig` (the model, the devices, the engine, the fleet and
the traffic), the user-level door :func:`simulation_config`, and the checks a config makes of itself.

The config is a description; :func:`serveplan.sim.deployment.resolve` turns it, once per run, into the
deployment every consumer reads, and :func:`serveplan.sim.engine.simulate` runs that.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from serveplan.errors import SpecError, check_int
from serveplan.sim import bestserve as bs
from serveplan.sim.fleet import Fleet, InstanceConfig, Strategy
from serveplan.sim.metrics import SLO
from serveplan.sim.prefix_cache import KVTiers
from serveplan.sim.router import check_router
from serveplan.sim.serving import EngineSetup, check_loads, resolve_engine
from serveplan.sim.workload import MAX_REQUESTS, Workload
from serveplan.specs.catalog import get_engine
from serveplan.specs.engine import EngineSpec
from serveplan.specs.hardware import DeviceSpec, kv_link
from serveplan.specs.model import ModelSpec
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.profile import EfficiencyProfile
from serveplan.units import DType

#: vLLM's KV block size (tokens per PagedAttention block, vLLM default ``block_size=16``): the block
#: of a run without an engine
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
        if self.fleet.has_device_types:
            _check_device_types(self)
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


def _check_device_types(cfg: SimulationConfig) -> None:
    """A fleet whose pools run on their own device types: each holds the KV format, the KV
    transfer between the types has a network link, and the timing is the iteration fidelity's."""
    if cfg.fidelity is not Fidelity.ITERATION and cfg.fleet.is_mixed:
        raise SpecError("pools on different device types need fidelity='iteration' (BestServe's algorithms time "
                        "one device type)")
    kv = cfg.effective_kv_dtype
    hw = {role: (inst.device.hardware if inst.device is not None else cfg.hardware)
          for role in cfg.fleet.roles for inst in (cfg.fleet.instance(role),)}
    if kv is not None:
        for h in hw.values():
            _check_kv_format(h, kv)
    if cfg.fleet.is_disaggregated:
        p, d = hw[cfg.fleet.roles[0]], hw[cfg.fleet.roles[-1]]
        if p.name != d.name:
            kv_link(p, d)   # raises when a type has no NIC in its data file


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


def _host_note(engine: EngineSpec, model: ModelSpec, fleet: Fleet) -> str | None:
    """The engine note on the steps that pay the engine's host work, with each role's graph bound."""
    bounds = {role.value: graph_tokens_of(engine, fleet.instance(role)) for role in fleet.roles}
    graphs: int | dict[str, int] = next(iter(bounds.values())) if len(set(bounds.values())) == 1 else bounds
    return engine.host_note(moe=model.is_moe, graphs=graphs)


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


def replace(config: SimulationConfig, **changes: Any) -> SimulationConfig:
    """``dataclasses.replace`` for configs (e.g. another rate)."""
    return dataclasses.replace(config, **changes)


def graph_tokens_of(engine: EngineSpec, inst: InstanceConfig) -> int:
    """The largest step (tokens per rank) an instance of ``engine`` replays as a captured graph:
    :meth:`~serveplan.specs.engine.EngineSpec.graph_tokens` of the instance's sequences, token
    budget, data-parallel ranks and speculative decode query length."""
    query = 1 + (inst.spec.k if inst.spec is not None and inst.spec.is_active else 0)
    return engine.graph_tokens(inst.batching.max_batch, query_len=query, token_budget=inst.batching.token_budget,
                               dp=inst.parallel.dp)
