"""One typed description of a serving fleet, shared by the simulator, the optimizer and the CLI.

A :class:`Fleet` is a :class:`Strategy` (how many instances of each role) plus, per role, an
:class:`InstanceConfig`: the instance's parallel layout (:class:`ParallelConfig`) and its
:class:`Batching` (scheduler mechanism, max batch, prompts per step, token budget, chunk size).
Every derived quantity (device count, the fleet's name, the per-role defaults) is computed here
and nowhere else.

Roles (:class:`Role`): a collocated strategy ``Nm`` has ``N`` ``collocated`` instances; a
disaggregated strategy ``PpDd`` has ``P`` ``prefill`` and ``D`` ``decode`` instances.

Build one from flat settings (CLI flags, a YAML file, keyword arguments) with
:meth:`Fleet.build`, which resolves every default once:

* ``max_prompts`` (new prompts per step) defaults to ``max_batch``; a ``prefill`` instance's
  max batch is its ``max_prompts`` (it only runs prompts);
* ``token_budget`` defaults to ``chunk_size`` under ``chunked-prefill`` (Sarathi: one chunk plus
  the piggybacked decodes per step) and to unlimited (``None``) otherwise;
* disaggregated roles run the ``prefill-only`` and ``decode-only`` schedulers.

Mixed device types: an instance configuration may name its own :class:`DeviceType` (datasheet
and efficiency profile); ``None`` (the default) runs it on the config's hardware. A disaggregated
fleet whose prefill pool runs on one type and decode pool on another (:meth:`Fleet.on_devices`)
is named with each pool's type, e.g. ``1p@h100-sxm+2d@l40s-tp4/2-b256``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

import numpy as np

from serveplan.errors import SpecError
from serveplan.sim.schedulers import canonical_scheduler, collocated_schedulers, get_scheduler
from serveplan.specs.catalog import get_hardware, get_profile
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.parallel import MAX_FLEET_DEVICES, ParallelConfig
from serveplan.specs.profile import EfficiencyProfile
from serveplan.specs.speculative import SpecDecodeConfig

_STRATEGY = re.compile(r"^\s*(?:(\d+)\s*m|(\d+)\s*p\s*(\d+)\s*d)\s*$", re.IGNORECASE)


class Role(str, Enum):
    """What an instance does in its fleet."""

    COLLOCATED = "collocated"
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(frozen=True, slots=True, kw_only=True)
class Strategy:
    """A serving strategy: ``num_collocated`` instances, or ``num_prefill`` + ``num_decode``."""

    num_collocated: int = 0
    num_prefill: int = 0
    num_decode: int = 0

    def __post_init__(self) -> None:
        for f in ("num_collocated", "num_prefill", "num_decode"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise SpecError(f"strategy {f}={v!r} must be a non-negative integer")
            if v > MAX_FLEET_DEVICES:
                raise SpecError(f"strategy {f}={v:,} instances; expected at most {MAX_FLEET_DEVICES:,} (every "
                                "instance holds at least one device: serveplan.specs.parallel.MAX_FLEET_DEVICES)")
        if self.num_collocated and (self.num_prefill or self.num_decode):
            raise SpecError("a strategy is either collocated (Nm) or disaggregated (PpDd), not both")
        if not self.num_collocated and (self.num_prefill < 1 or self.num_decode < 1):
            raise SpecError(
                f"strategy needs num_collocated >= 1, or num_prefill >= 1 and num_decode >= 1; got "
                f"{self.num_collocated}m / {self.num_prefill}p{self.num_decode}d")

    @staticmethod
    def parse(text: str) -> Strategy:
        """``"2m"`` (2 collocated instances) or ``"1p1d"`` (1 prefill, 1 decode instance)."""
        m = _STRATEGY.match(str(text))
        if not m:
            raise SpecError(f"strategy={text!r} does not parse; expected Nm (e.g. 2m) or PpDd (e.g. 1p1d)")
        if m.group(1):
            return Strategy(num_collocated=int(m.group(1)))
        return Strategy(num_prefill=int(m.group(2)), num_decode=int(m.group(3)))

    @property
    def is_disaggregated(self) -> bool:
        return self.num_collocated == 0

    @property
    def num_instances(self) -> int:
        return self.num_collocated + self.num_prefill + self.num_decode

    def count(self, role: Role) -> int:
        """Instances of ``role``."""
        return {Role.COLLOCATED: self.num_collocated, Role.PREFILL: self.num_prefill,
                Role.DECODE: self.num_decode}[role]

    @property
    def roles(self) -> tuple[Role, ...]:
        return (Role.PREFILL, Role.DECODE) if self.is_disaggregated else (Role.COLLOCATED,)

    def __str__(self) -> str:
        return f"{self.num_prefill}p{self.num_decode}d" if self.is_disaggregated else f"{self.num_collocated}m"


@dataclass(frozen=True, slots=True, kw_only=True)
class Batching:
    """How one instance forms its steps.

    Parameters
    ----------
    scheduler:
        Registered mechanism (``prefill-first``, ``chunked-prefill``, ``prefill-only``,
        ``decode-only``; aliases such as ``vllm`` and ``sarathi`` are resolved to these).
    max_batch:
        Sequences per step (per micro-batch with pipeline parallelism).
    max_prompts:
        New prompts per step (BestServe's prefill batch).
    token_budget:
        New tokens per step; ``None``: unlimited.
    chunk_size:
        Largest prefill chunk of one request (``chunked-prefill``).
    """

    scheduler: str = "prefill-first"
    max_batch: int = 16
    max_prompts: int = 16
    token_budget: int | None = None
    chunk_size: int = 512

    def __post_init__(self) -> None:
        object.__setattr__(self, "scheduler", canonical_scheduler(self.scheduler))
        for f in ("max_batch", "max_prompts", "chunk_size"):
            _positive_int(f, getattr(self, f))
        if self.token_budget is not None:
            _positive_int("token_budget", self.token_budget)

    @property
    def step_token_budget(self) -> float:
        """New tokens per step as a number (``inf``: unlimited)."""
        return float(self.token_budget) if self.token_budget is not None else float("inf")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class DeviceType:
    """The devices one pool runs on when they are not the config's: the datasheet and the
    efficiency profile its steps are timed with. Equal (and hashed) by the two names, so an
    instance configuration stays a dictionary key."""

    hardware: DeviceSpec
    profile: EfficiencyProfile

    def __post_init__(self) -> None:
        if not isinstance(self.hardware, DeviceSpec):
            raise SpecError(f"DeviceType hardware must be a DeviceSpec, got {type(self.hardware).__name__}")
        if not isinstance(self.profile, EfficiencyProfile):
            raise SpecError(f"DeviceType profile must be an EfficiencyProfile, got {type(self.profile).__name__}")

    @property
    def name(self) -> str:
        return self.hardware.name

    def _key(self) -> tuple[str, str]:
        return self.hardware.name, self.profile.name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeviceType) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceConfig:
    """Parallel layout and batching of the instances of one role, their speculative decoding
    (``spec``: ``None`` for plain decoding; set on the decoding roles only) and their device type
    (``device``: ``None`` for the config's hardware and profile)."""

    parallel: ParallelConfig
    batching: Batching
    spec: SpecDecodeConfig | None = None
    device: DeviceType | None = None

    def __post_init__(self) -> None:
        if self.spec is not None and not isinstance(self.spec, SpecDecodeConfig):
            raise SpecError(f"spec must be a SpecDecodeConfig, got {type(self.spec).__name__}")
        if self.device is not None and not isinstance(self.device, DeviceType):
            raise SpecError(f"device must be a DeviceType, got {type(self.device).__name__}")
        if self.spec is not None and not self.spec.is_active:
            object.__setattr__(self, "spec", None)  # K = 0 or method none: plain decoding, one description

    @property
    def num_devices(self) -> int:
        return self.parallel.num_devices


@dataclass(frozen=True, slots=True, kw_only=True)
class Fleet:
    """A serving fleet: strategy and, per role, the instances' layout and batching.

    Exactly the roles of ``strategy`` are set: ``collocated`` for ``Nm``, ``prefill`` and
    ``decode`` for ``PpDd``. Build from flat settings with :meth:`build`.
    """

    strategy: Strategy
    collocated: InstanceConfig | None = None
    prefill: InstanceConfig | None = None
    decode: InstanceConfig | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.strategy, Strategy):
            raise SpecError(f"strategy must be a Strategy (Strategy.parse('2m')), got {self.strategy!r}")
        for role in Role:
            given = getattr(self, role.value) is not None
            if given != (role in self.strategy.roles):
                raise SpecError(f"fleet {self.strategy}: the {role.value} instance configuration must be "
                                f"{'given' if role in self.strategy.roles else 'absent'}")
        if self.num_devices > MAX_FLEET_DEVICES:
            raise SpecError(f"fleet {self.strategy} uses {self.num_devices:,} devices; expected at most "
                            f"{MAX_FLEET_DEVICES:,} (serveplan.specs.parallel.MAX_FLEET_DEVICES)")
        if self.collocated is not None and self.collocated.batching.scheduler not in collocated_schedulers():
            raise SpecError(f"scheduler={self.collocated.batching.scheduler!r} is a disaggregation role; expected "
                            f"one of: {', '.join(collocated_schedulers())}")

    # ------------------------------------------------------------------ construction
    @staticmethod
    def build(strategy: str | Strategy = "1p1d", *, tp: int = 4, prefill_tp: int | None = None,
              decode_tp: int | None = None, pp: int = 1, dp: int = 1, ep: int = 1, max_batch: int = 16,
              prefill_max_batch: int | None = None, scheduler: str = "prefill-first", chunk_size: int = 512,
              token_budget: int | None = None, spec: SpecDecodeConfig | None = None,
              decode_dp: int | None = None, decode_ep: int | None = None,
              redundant_experts: int = 0) -> Fleet:
        """A fleet from flat settings (CLI flags, keyword arguments); the module docstring lists
        the defaults resolved here. ``spec`` (speculative decoding) applies to the decoding
        instances (collocated or decode).

        ``prefill_max_batch`` (0 or ``None``: ``max_batch``) is the prompts per step of every
        instance and the max batch of prefill instances; ``prefill_tp`` / ``decode_tp`` override
        ``tp`` for the prefill and decode instances of a disaggregated strategy, and ``decode_dp`` /
        ``decode_ep`` its decode instances' DP-attention and EP sizes (DeepSeek's pools: prefill
        EP32 on 4 nodes, decode EP144 on 18); ``redundant_experts`` applies to every instance.
        """
        strat = strategy if isinstance(strategy, Strategy) else Strategy.parse(strategy)
        for name, v in (("tp", tp), ("pp", pp), ("dp", dp), ("ep", ep), ("max_batch", max_batch),
                        ("chunk_size", chunk_size)):
            _positive_int(name, v)
        for name, w in (("prefill_tp", prefill_tp), ("decode_tp", decode_tp), ("prefill_max_batch", prefill_max_batch),
                        ("token_budget", token_budget), ("decode_dp", decode_dp), ("decode_ep", decode_ep)):
            if w:  # 0 reads as "not given"
                _positive_int(name, w)
        prompts = prefill_max_batch or max_batch
        sched = canonical_scheduler(scheduler)  # checked whatever the strategy: a typo is an error

        def layout(t: int | None, d: int | None = None, e: int | None = None) -> ParallelConfig:
            return ParallelConfig(tp=t or tp, pp=pp, dp=d or dp, ep=e or ep, redundant_experts=redundant_experts)

        if not strat.is_disaggregated:
            budget = token_budget or (chunk_size if get_scheduler(sched).chunked else None)
            return Fleet(strategy=strat, collocated=InstanceConfig(
                parallel=layout(None), batching=Batching(scheduler=sched, max_batch=max_batch, max_prompts=prompts,
                                                         token_budget=budget, chunk_size=chunk_size), spec=spec))
        budget = token_budget or None
        return Fleet(
            strategy=strat,
            prefill=InstanceConfig(parallel=layout(prefill_tp), batching=Batching(
                scheduler="prefill-only", max_batch=prompts, max_prompts=prompts, token_budget=budget,
                chunk_size=chunk_size)),
            decode=InstanceConfig(parallel=layout(decode_tp, decode_dp, decode_ep), batching=Batching(
                scheduler="decode-only", max_batch=max_batch, max_prompts=prompts, token_budget=budget,
                chunk_size=chunk_size), spec=spec),
        )

    # ------------------------------------------------------------------ views
    @property
    def is_disaggregated(self) -> bool:
        return self.strategy.is_disaggregated

    @property
    def roles(self) -> tuple[Role, ...]:
        return self.strategy.roles

    def instance(self, role: Role | str) -> InstanceConfig:
        """Configuration of the instances of ``role``."""
        r = Role(role)
        cfg = self.collocated if r is Role.COLLOCATED else self.prefill if r is Role.PREFILL else self.decode
        if cfg is None:
            raise SpecError(f"fleet {self.strategy} has no {r.value} instances")
        return cfg

    @property
    def first(self) -> InstanceConfig:
        """The instances that receive new requests (collocated or prefill)."""
        return self.instance(self.roles[0])

    @property
    def last(self) -> InstanceConfig:
        """The instances that decode (collocated or decode)."""
        return self.instance(self.roles[-1])

    @property
    def max_batch(self) -> int:
        """Sequences per step of the decoding instances."""
        return self.last.batching.max_batch

    @property
    def max_prompts(self) -> int:
        return self.first.batching.max_prompts

    @property
    def scheduler(self) -> str:
        """The collocated scheduler, or ``"disaggregated"``."""
        return "disaggregated" if self.is_disaggregated else self.first.batching.scheduler

    @property
    def spec(self) -> SpecDecodeConfig | None:
        """Speculative decoding of the decoding instances (``None``: off)."""
        return self.last.spec

    @property
    def num_devices(self) -> int:
        """Devices of the whole fleet."""
        return sum(self.strategy.count(r) * self.instance(r).num_devices for r in self.roles)

    @property
    def devices(self) -> dict[Role, DeviceType | None]:
        """Each role's device type (``None``: the config's hardware)."""
        return {r: self.instance(r).device for r in self.roles}

    @property
    def has_device_types(self) -> bool:
        """Whether a pool names its own device type (its name then shows the types)."""
        return any(d is not None for d in self.devices.values())

    @property
    def is_mixed(self) -> bool:
        """Whether its pools run on different device types (a prefill pool on one, decode on another)."""
        return len(set(self.devices.values())) > 1

    def on_device(self, device: DeviceType) -> Fleet:
        """This fleet with every pool on ``device`` (named with it: ``2m@l40s-tp1-b256-...``)."""
        return Fleet(strategy=self.strategy, **{r.value: replace(self.instance(r), device=device) for r in self.roles})

    def on_devices(self, *, prefill: DeviceType | None, decode: DeviceType | None) -> Fleet:
        """This disaggregated fleet with its prefill and decode pools on the given device types."""
        if not self.is_disaggregated:
            raise SpecError(f"fleet {self.strategy}: only a disaggregated fleet puts its pools on different "
                            "device types")
        assert self.prefill is not None and self.decode is not None
        return Fleet(strategy=self.strategy, prefill=replace(self.prefill, device=prefill),
                     decode=replace(self.decode, device=decode))

    def _strategy_label(self) -> str:
        """``2p1d``, or with the pools' device types ``2p@h100-sxm+1d@l40s`` (one type: ``2p1d@l40s``).
        An ``@`` rather than brackets: the tables render names as they are (no markup)."""
        if not self.has_device_types:
            return str(self.strategy)
        if not self.is_mixed:
            return f"{self.strategy}@{self.first.device.name}"  # type: ignore[union-attr]
        tag = {r: f"@{d.name}" if d is not None else "" for r, d in self.devices.items()}
        s = self.strategy
        return f"{s.num_prefill}p{tag[Role.PREFILL]}+{s.num_decode}d{tag[Role.DECODE]}"

    @property
    def name(self) -> str:
        """Short name, e.g. ``2m-tp4-b1024-chunked8192``, ``2m-tp4-b16-prefill-first``,
        ``1p1d-tp4/2-pp2-b16``: the strategy, layout, max batch and the scheduler by mechanism (with
        its chunk size when it chunks). Search checkpoints and result files are keyed by it."""
        par = self.first.parallel
        extra = "".join(f"-{k}{v}" for k, v in (("pp", par.pp), ("dp", par.dp), ("ep", par.ep)) if v > 1)
        if par.redundant_experts:
            extra += f"-r{par.redundant_experts}"
        if self.is_disaggregated:
            last = self.last.parallel
            tp_p, tp_d = par.tp, last.tp
            tp = f"tp{tp_p}" if tp_p == tp_d else f"tp{tp_p}/{tp_d}"
            if (last.dp, last.ep) != (par.dp, par.ep):   # decode pool of another DP/EP size
                extra += "/" + "-".join(f"{k}{v}" for k, v in (("dp", last.dp), ("ep", last.ep)))
            sd = self.last.spec
            return f"{self._strategy_label()}-{tp}{extra}-b{self.max_batch}" + (f"-{sd.tag}" if sd is not None else "")
        b = self.first.batching
        tag = get_scheduler(b.scheduler).tag
        sched = tag if not get_scheduler(b.scheduler).chunked else f"{tag}{b.chunk_size}"
        sd = self.first.spec
        label = f"{self._strategy_label()}-tp{par.tp}{extra}-b{b.max_batch}-{sched}"
        return label + (f"-{sd.tag}" if sd is not None else "")

    def to_dict(self) -> dict[str, Any]:
        """Flat record (the keys of the CLI flags; :meth:`from_dict` reads it back)."""
        first, last = self.first, self.last
        s = self.strategy
        spec = {} if last.spec is None else last.spec.to_dict()  # keys only when speculation is on
        return {
            "name": self.name, "strategy": str(s), "num_devices": self.num_devices,
            "num_collocated": s.num_collocated, "num_prefill": s.num_prefill, "num_decode": s.num_decode,
            "tp": first.parallel.tp, "decode_tp": last.parallel.tp, "pp": first.parallel.pp,
            "dp": first.parallel.dp, "ep": first.parallel.ep, "max_batch": last.batching.max_batch,
            "prefill_max_batch": first.batching.max_prompts, "scheduler": self.scheduler,
            "chunk_size": first.batching.chunk_size, "token_budget": first.batching.token_budget, **spec,
            "decode_dp": last.parallel.dp, "decode_ep": last.parallel.ep,
            "redundant_experts": first.parallel.redundant_experts,
            **{f"{r.value}_hardware": d.name for r, d in self.devices.items() if d is not None},
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Fleet:
        """Inverse of :meth:`to_dict`."""
        strat = Strategy(num_collocated=d["num_collocated"], num_prefill=d["num_prefill"],
                         num_decode=d["num_decode"])
        sched = _LEGACY_SCHEDULERS.get(d.get("scheduler", "prefill-first"), d.get("scheduler", "prefill-first"))
        fleet = Fleet.build(strat, tp=d["tp"], prefill_tp=d["tp"], decode_tp=d.get("decode_tp") or d["tp"],
                           pp=d["pp"], dp=d["dp"], ep=d["ep"], max_batch=d["max_batch"],
                           prefill_max_batch=d.get("prefill_max_batch"),
                           scheduler="prefill-first" if sched == "disaggregated" else sched,
                           chunk_size=d["chunk_size"], token_budget=d.get("token_budget"),
                           spec=SpecDecodeConfig.of(d.get("spec_method"), d.get("spec_tokens"),
                                                    tuple(d["spec_acceptance"]) if d.get("spec_acceptance") else None,
                                                    d.get("spec_draft_model")),
                           decode_dp=d.get("decode_dp") or d["dp"], decode_ep=d.get("decode_ep") or d["ep"],
                           redundant_experts=d.get("redundant_experts") or 0)
        if d.get("collocated_hardware"):
            return fleet.on_device(_device_named(d["collocated_hardware"]))  # type: ignore[arg-type]
        if d.get("prefill_hardware") or d.get("decode_hardware"):
            return fleet.on_devices(prefill=_device_named(d.get("prefill_hardware")),
                                    decode=_device_named(d.get("decode_hardware")))
        return fleet


#: scheduler names of records written before schedulers were named only by mechanism (checkpoints, result files)
_LEGACY_SCHEDULERS = {"vllm": "prefill-first"}


def _device_named(name: str | None) -> DeviceType | None:
    """A bundled device type by hardware id, with the hardware's own profile (records read back)."""
    if not name:
        return None
    return DeviceType(hardware=get_hardware(name), profile=get_profile(None, hardware=name))


def _positive_int(name: str, v: Any) -> None:
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
        raise SpecError(f"{name}={v!r} must be a positive integer")
