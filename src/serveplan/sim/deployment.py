"""``resolve(config, clocks) -> Deployment``: one description of a run, resolved once.

A :class:`~serveplan.sim.config.SimulationConfig` says what to run: the model, the devices, the
engine, the fleet and the traffic. :func:`resolve` turns it into what every consumer reads, per
role (:class:`RoleSetup`):

* the instances' count, parallel layout, batching and speculative decoding;
* the device type they run on (the config's hardware and profile, or the role's own
  :class:`~serveplan.sim.fleet.DeviceType`: a prefill pool on one type, decode on another);
* the profile their steps are timed with: the engine's own kernels and operator list
  (:meth:`~serveplan.specs.engine.EngineSpec.profile_for`, applied when the config was built) and
  the largest step this instance replays as a captured graph (:func:`graph_tokens_of`, from its own
  limits);
* the share of device memory the engine lets weights, activations and KV cache fill, from this
  role's own layout (SGLang's static fraction and TensorRT-LLM's free fraction depend on the TP),
  and the KV-cache format;
* the scheduler and its options (the policy's ``Options``, validated and fitted to the role's
  layout), how the instances take requests in (:class:`~serveplan.sim.instance.Intake`) and
  whether a preempted request keeps its computed prefix; the step clock (the estimator and its
  memoised step times), taken from the caller's :class:`~serveplan.sim.clock.Clocks`.

The simulator (:func:`~serveplan.sim.engine.simulate`), the optimizer's screens, bounds and
compositions (:mod:`serveplan.optimize`), the launch files (:mod:`serveplan.report.deploy`) and the
web page all take their estimators and limits from here and from nowhere else (STYLE.md §10), so
the same question gets the same step times whichever door it came in by.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from serveplan.estimator.step import Estimator
from serveplan.sim.clock import Clocks, StepClock
from serveplan.sim.config import BLOCK_SIZE, SimulationConfig, graph_tokens_of
from serveplan.sim.fleet import InstanceConfig, Role
from serveplan.sim.instance import PLAIN_INTAKE, Intake
from serveplan.sim.schedulers.base import Options, get_scheduler, policy_options
from serveplan.specs.engine import EngineSpec
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.profile import EfficiencyProfile
from serveplan.units import DType


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class RoleSetup:
    """The instances of one role of a resolved deployment (module doc).

    ``memory_utilization`` is the share of the datasheet's memory the estimator may fill (``None``:
    the estimator's default, without an engine); ``kv_dtype`` the KV format (``None``: the
    estimator's default); ``graph_tokens`` the largest step (tokens per rank) replayed as a captured
    graph (0: no bound); ``options`` the scheduler's options for this role's layout, ``intake`` how
    its instances take requests in, ``keep_prefix`` whether a preempted request's computed tokens
    stay cached (the engine's prefix caching).
    """

    role: Role
    count: int
    instance: InstanceConfig
    #: the datasheet of this role's devices (the config's, or the role's own device type), as given:
    #: its power and price are this device's (step clocks are shared between specs that differ
    #: only in power, so the estimator's own spec may not carry them)
    hardware: DeviceSpec
    profile: EfficiencyProfile
    memory_utilization: float | None
    kv_dtype: DType | None
    graph_tokens: int
    options: Options
    intake: Intake = PLAIN_INTAKE
    keep_prefix: bool = False
    clock: StepClock

    @property
    def estimator(self) -> Estimator:
        return self.clock.est

    @property
    def num_devices(self) -> int:
        """Devices of one instance."""
        return self.instance.num_devices

    @property
    def kv_capacity_tokens(self) -> int:
        """KV-cache tokens one instance holds (per pipeline stage's share of the model)."""
        return int(self.clock.est.memory.kv_capacity_tokens)

    def to_dict(self) -> dict[str, Any]:
        est = self.clock.est
        b, par = self.instance.batching, self.instance.parallel
        return {"role": self.role.value, "count": self.count, "tp": par.tp, "pp": par.pp, "dp": par.dp, "ep": par.ep,
                "num_devices": par.num_devices, "scheduler": b.scheduler, "max_batch": b.max_batch,
                "prefill_max_batch": b.max_prompts, "token_budget": b.token_budget, "chunk_size": b.chunk_size,
                "scheduler_options": self.options.to_dict(),
                "intake": {"recv_interval": self.intake.recv_interval, "overlap": self.intake.overlap},
                "weight_dtype": est.dtype.value, "kv_dtype": est.kv_dtype.value,
                "memory_utilization": est.memory_utilization, "kv_capacity_tokens": self.kv_capacity_tokens,
                "graph_tokens": self.graph_tokens,
                "spec": None if self.instance.spec is None else self.instance.spec.to_dict(),
                **({"hardware": self.hardware.name} if self.instance.device is not None else {})}


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Deployment:
    """A :class:`~serveplan.sim.config.SimulationConfig` resolved per role (module doc)."""

    config: SimulationConfig
    roles: tuple[RoleSetup, ...]
    notes: tuple[str, ...] = ()
    clocks: Clocks

    @property
    def fleet(self) -> Any:
        return self.config.fleet

    @property
    def engine(self) -> EngineSpec | None:
        return self.config.engine

    @property
    def block_size(self) -> int:
        """Tokens per KV block (the engine's; vLLM's 16 without one)."""
        setup = self.config.engine_setup
        return setup.block_size if setup is not None else BLOCK_SIZE

    def role(self, role: Role | str) -> RoleSetup:
        r = Role(role)
        for s in self.roles:
            if s.role is r:
                return s
        raise KeyError(f"fleet {self.config.fleet.strategy} has no {r.value} instances")

    @property
    def first(self) -> RoleSetup:
        """The instances that receive new requests (collocated or prefill)."""
        return self.roles[0]

    @property
    def last(self) -> RoleSetup:
        """The instances that decode (collocated or decode)."""
        return self.roles[-1]

    @property
    def clock_by_role(self) -> dict[Role, StepClock]:
        return {s.role: s.clock for s in self.roles}

    @property
    def kv_capacity_tokens(self) -> dict[str, int]:
        return {s.role.value: s.kv_capacity_tokens for s in self.roles}

    @property
    def weight_dtype(self) -> DType:
        return self.first.estimator.dtype

    @property
    def kv_dtype(self) -> DType:
        return self.last.estimator.kv_dtype

    def to_dict(self) -> dict[str, Any]:
        """What was assumed: engine and version, formats, per role its layout, scheduler and knobs."""
        eng = self.engine
        return {"engine": None if eng is None else {"name": eng.name, "engine": eng.engine, "version": eng.version,
                                                    "scheduler": eng.scheduler},
                "weight_dtype": self.weight_dtype.value, "kv_dtype": self.kv_dtype.value,
                "kv_block_size": self.block_size, "roles": [s.to_dict() for s in self.roles],
                "notes": list(self.notes)}


def resolve(config: SimulationConfig, clocks: Clocks | None = None) -> Deployment:
    """Resolve ``config`` once into a :class:`Deployment` (module doc), its step clocks from
    ``clocks`` (default: a fresh :class:`~serveplan.sim.clock.Clocks`, shared with nothing).

    Raises
    ------
    InfeasibleError
        The weights of a role's instances do not fit its devices under the engine's memory rule.
    """
    clocks = clocks if clocks is not None else Clocks()
    cfg = config
    fleet, eng, setup = cfg.fleet, cfg.engine, cfg.engine_setup
    roles = []
    for role in fleet.roles:
        inst = fleet.instance(role)
        hardware, profile = cfg.hardware, cfg.profile
        if inst.device is not None:   # a pool on its own device type: its datasheet, its profile
            hardware = inst.device.hardware
            profile = eng.profile_for(inst.device.profile) if eng is not None else inst.device.profile
        graphs = 0
        if eng is not None and eng.prefill_graphs is not None:
            graphs = graph_tokens_of(eng, inst)
            profile = clocks.graph_profile(profile, graphs)
        kv = cfg.effective_kv_dtype
        util: float | None = None
        if eng is not None:
            # the engine's memory rule on this role's own layout (weights and activations per device)
            probe = clocks.clock(cfg.model, hardware, profile, inst.parallel, cfg.dtype, kv_dtype=kv,
                                 memory_utilization=1.0).est
            util = eng.memory_utilization(hardware, weights_bytes=probe.memory.weights_bytes,
                                          activation_bytes=probe.memory.activation_bytes, tp=inst.parallel.tp,
                                          pp=inst.parallel.pp)
        clock = clocks.clock(cfg.model, hardware, profile, inst.parallel, cfg.dtype, kv_dtype=kv,
                             memory_utilization=util, spec=inst.spec)
        roles.append(RoleSetup(role=role, count=fleet.strategy.count(role), instance=inst, hardware=hardware,
                               profile=profile,
                               memory_utilization=util, kv_dtype=kv, graph_tokens=graphs, clock=clock,
                               **_scheduling(eng, inst)))
    return Deployment(config=cfg, roles=tuple(roles), notes=setup.notes if setup is not None else (), clocks=clocks)


def _scheduling(engine: EngineSpec | None, inst: InstanceConfig) -> dict[str, Any]:
    """The scheduler options, intake and prefix keeping of an instance of ``engine`` (without one:
    the policy's defaults, every arrival taken in before each step, nothing kept)."""
    policy = inst.batching.scheduler
    if engine is None:
        return {"options": get_scheduler(policy).Options()}
    options = policy_options(engine, policy).for_layout(inst.parallel)
    # the engine's loop takes requests in, whichever policy plans a role's steps (a disaggregated
    # SGLang server skips receives as a collocated one does); overlap scheduling is modelled with
    # one pipeline stage (vLLM turns it off under PP)
    recv = policy_options(engine).recv_interval
    intake = Intake(recv_interval=recv, overlap=engine.overlap_scheduling and inst.parallel.pp == 1)
    return {"options": options, "intake": intake, "keep_prefix": engine.prefix_caching}
