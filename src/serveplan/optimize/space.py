"""Strategy space: every collocated ``Nm`` and disaggregated ``PpDd`` fleet within a device budget.

A candidate is a :class:`~serveplan.sim.fleet.Fleet` (the one description the simulator, the
optimizer and the CLI share): how many instances of each role, each instance's parallel layout
(TP, and PP / DP-attention / EP for large models), batch limits and the collocated scheduler.
:func:`enumerate_space` lists every candidate of a :class:`SearchSpace` and, separately, the
ones pruned before simulation with the reason (weights do not fit, a request's KV cache does not
fit, a layout that does not divide the model) — never silently.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from serveplan.errors import InfeasibleError, SpecError, check_int
from serveplan.sim.clock import Clocks
from serveplan.sim.fleet import DeviceType, Fleet, Strategy
from serveplan.sim.schedulers import canonical_scheduler, collocated_schedulers, get_scheduler
from serveplan.specs.catalog import get_engine
from serveplan.specs.engine import EngineSpec
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.parallel import MAX_FLEET_DEVICES, ParallelConfig
from serveplan.specs.speculative import SpecDecodeConfig

if TYPE_CHECKING:
    from serveplan.optimize.goodput import GoodputSettings


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchSpace:
    """What to enumerate (BestServe §11.2 user inputs, extended).

    Parameters
    ----------
    devices:
        Device budget; strategies may use fewer (ranking is per device).
    tp_sizes, pp_sizes, dp_sizes, ep_sizes:
        Admissible layouts per instance.
    max_batches:
        Maximum batch sizes (decode slots) per instance.
    prefill_max_batch:
        Prompts per prefill step (BestServe Table 4 uses 4); ``None`` = no limit besides KV.
    schedulers, chunk_sizes:
        Collocated schedulers (mechanisms, or the alias ``sarathi`` of ``chunked-prefill``) and the
        chunk sizes of chunked schedulers (each also their token budget).
    token_budget:
        New tokens per step of every other instance (unchunked collocated schedulers, prefill and
        decode instances): the engine's (vLLM ``max_num_batched_tokens``, TensorRT-LLM
        ``max_num_tokens``); ``None``: unlimited (BestServe's testbed).
    collocated, disaggregated:
        Which architectures to include.
    mixed_tp:
        Let prefill and decode instances of a ``PpDd`` strategy use different TP sizes.
    specs:
        Speculative decoding settings of the decoding instances to try (``None``: plain
        decoding), e.g. one per draft length ``K`` (:func:`spec_choices`); layouts with
        ``pp > 1`` get plain decoding only.
    mixed_ep:
        Let them also use different DP-attention and EP sizes (prefill and decode pools of their
        own widths, as DeepSeek's EP32 prefill and EP144 decode units).
    redundant_experts:
        Extra expert copies of every instance (``ParallelConfig.redundant_experts``).
    prefill_device, prefill_devices:
        A mixed space: disaggregated fleets only, their prefill pool on ``prefill_device`` (at most
        ``prefill_devices`` of them) and their decode pool on the settings' hardware (at most
        ``devices``); ``None`` (default): every pool on the settings' hardware.
    """

    devices: int = 8
    tp_sizes: tuple[int, ...] = (1, 2, 4, 8)
    pp_sizes: tuple[int, ...] = (1,)
    dp_sizes: tuple[int, ...] = (1,)
    ep_sizes: tuple[int, ...] = (1,)
    max_batches: tuple[int, ...] = (16,)
    prefill_max_batch: int | None = 4
    schedulers: tuple[str, ...] = ("prefill-first",)
    chunk_sizes: tuple[int, ...] = (512,)
    token_budget: int | None = None
    collocated: bool = True
    disaggregated: bool = True
    mixed_tp: bool = True
    specs: tuple[SpecDecodeConfig | None, ...] = (None,)
    mixed_ep: bool = False
    redundant_experts: int = 0
    prefill_device: DeviceType | None = None
    prefill_devices: int | None = None

    def __post_init__(self) -> None:
        if self.prefill_device is not None:
            check_int("prefill_devices", self.prefill_devices, low=1, high=MAX_FLEET_DEVICES,
                      why=f"the budget of {self.prefill_device.name} devices")
        check_int("devices", self.devices, low=1, high=MAX_FLEET_DEVICES,
                  why="serveplan.specs.parallel.MAX_FLEET_DEVICES")
        for fname in ("tp_sizes", "pp_sizes", "dp_sizes", "ep_sizes", "max_batches", "chunk_sizes"):
            vals = getattr(self, fname)
            if not vals:
                flag = fname.replace("_sizes", "").replace("_", "-")
                raise SpecError(f"{flag} set is empty; give at least one value")
            if any((not isinstance(v, int)) or v < 1 for v in vals):
                raise SpecError(f"{fname}={vals!r}: every value must be a positive integer")
        if self.token_budget is not None:
            check_int("token_budget", self.token_budget, low=1, why="new tokens per step")
        if not self.schedulers:
            raise SpecError(f"schedulers is empty; expected one or more of: {', '.join(collocated_schedulers())}")
        names = tuple(canonical_scheduler(s) for s in self.schedulers)
        for s in names:
            if s not in collocated_schedulers():
                raise SpecError(f"scheduler {s!r} is a disaggregation role; expected one of: "
                                f"{', '.join(collocated_schedulers())}")
        object.__setattr__(self, "schedulers", tuple(dict.fromkeys(names)))
        if not self.specs:
            raise SpecError("specs is empty; give (None,) for plain decoding")
        # inactive settings (K = 0) are plain decoding: one candidate, not two
        object.__setattr__(self, "specs", tuple(dict.fromkeys(
            sd if sd is not None and sd.is_active else None for sd in self.specs)))
        if not (self.collocated or self.disaggregated):
            raise SpecError("both architectures are disabled; enable collocated or disaggregated")
        smallest = min(self.tp_sizes) * min(self.pp_sizes) * min(self.dp_sizes)
        if self.devices < smallest:
            raise SpecError(
                f"devices={self.devices} is fewer than the smallest instance ({smallest} devices: "
                f"tp={min(self.tp_sizes)} x pp={min(self.pp_sizes)} x dp={min(self.dp_sizes)})"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class Pruned:
    """A candidate layout removed before simulation, and why."""

    name: str
    num_devices: int
    reason: str
    #: "layout": the sizes do not divide the model; "memory": it does not fit; "bound": its analytic
    #: goodput bound (``bound_rps``) cannot beat the best found
    kind: str = "memory"
    bound_rps: float | None = None

    @property
    def bound_per_device(self) -> float | None:
        return None if self.bound_rps is None else self.bound_rps / self.num_devices

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "num_devices": self.num_devices, "reason": self.reason, "kind": self.kind,
                "bound_rps": self.bound_rps, "bound_per_device": self.bound_per_device}


@dataclass
class SpaceListing:
    candidates: list[Fleet] = field(default_factory=list)
    pruned: list[Pruned] = field(default_factory=list)


def _check_layout(space: SearchSpace, settings: GoodputSettings, par: ParallelConfig, request_tokens: int,
                  clocks: Clocks) -> Pruned | None:
    """Why instances of layout ``par`` cannot serve (None: they can), from the deployment the
    simulator would run (the engine's memory rule, KV format and kernels, the largest max batch)."""
    probe = Fleet.build("1m", tp=par.tp, pp=par.pp, dp=par.dp, ep=par.ep, redundant_experts=par.redundant_experts,
                        max_batch=max(space.max_batches), prefill_max_batch=space.prefill_max_batch,
                        scheduler=space.schedulers[0], chunk_size=space.chunk_sizes[0],
                        token_budget=space.token_budget)
    try:
        dep = settings.deployment(probe, clocks)
    except SpecError as exc:
        return Pruned(name=par.label(), num_devices=par.num_devices, reason=str(exc), kind="layout")
    except InfeasibleError as exc:
        return Pruned(name=par.label(), num_devices=par.num_devices, reason=f"weights do not fit: {exc}")
    cap = dep.first.kv_capacity_tokens
    if cap < request_tokens:
        return Pruned(name=par.label(), num_devices=par.num_devices,
                      reason=f"KV cache holds {cap} tokens, one request needs {request_tokens}")
    return None


def enumerate_space(space: SearchSpace, settings: GoodputSettings, *, request_tokens: int) -> SpaceListing:
    """Every candidate within the device budget, and the pruned layouts with their reasons.

    ``request_tokens`` is the KV footprint (input + output tokens) of the largest request; a
    layout whose KV capacity cannot hold one such request, or whose weights do not fit under the
    engine's memory rule, is pruned with the reason (never the whole search).
    """
    out = SpaceListing()
    if space.prefill_device is not None:
        return _mixed(space, settings, request_tokens)
    layouts = _layouts(space, settings, request_tokens, out)
    seen: set[Fleet] = set()
    for par in layouts:
        for mb in space.max_batches:
            fleets = _collocated(space, par, mb) if space.collocated else iter(())
            for c in itertools.chain(fleets, _disaggregated(space, par, layouts, mb) if space.disaggregated else ()):
                if c not in seen and c.num_devices <= space.devices:
                    seen.add(c)
                    out.candidates.append(c)
    out.candidates.sort(key=lambda c: (c.num_devices, c.name))
    return out


def _layouts(space: SearchSpace, settings: GoodputSettings, request_tokens: int,
             out: SpaceListing) -> list[ParallelConfig]:
    """The instance layouts within the budget that hold the model and one request (the others go
    to ``out.pruned`` with their reason)."""
    clocks = Clocks()
    layouts = []
    for tp, pp, dp, ep in itertools.product(space.tp_sizes, space.pp_sizes, space.dp_sizes, space.ep_sizes):
        if (tp * dp) % ep:
            continue
        try:
            par = ParallelConfig(tp=tp, pp=pp, dp=dp, ep=ep, redundant_experts=space.redundant_experts)
        except SpecError as exc:  # pragma: no cover - guarded above
            out.pruned.append(Pruned(name=f"tp{tp}-pp{pp}-dp{dp}-ep{ep}", num_devices=tp * pp * dp, reason=str(exc)))
            continue
        if par.num_devices > space.devices:
            continue
        pruned = _check_layout(space, settings, par, request_tokens, clocks)
        if pruned is not None:
            out.pruned.append(pruned)
            continue
        layouts.append(par)
    return layouts


def _collocated(space: SearchSpace, par: ParallelConfig, max_batch: int) -> Iterator[Fleet]:
    """``Nm`` fleets of layout ``par``: every count, scheduler and (chunked schedulers) chunk size."""
    for n in range(1, space.devices // par.num_devices + 1):
        for sched in space.schedulers:
            chunked = get_scheduler(sched).chunked
            for cs in space.chunk_sizes if chunked else (space.chunk_sizes[0],):
                for sd in _specs_for(space, par):
                    yield Fleet.build(Strategy(num_collocated=n), tp=par.tp, pp=par.pp, dp=par.dp, ep=par.ep,
                                      max_batch=max_batch, prefill_max_batch=space.prefill_max_batch,
                                      scheduler=sched, chunk_size=cs, spec=sd,
                                      token_budget=cs if chunked else space.token_budget,
                                      redundant_experts=par.redundant_experts)


def _disaggregated(space: SearchSpace, par: ParallelConfig, layouts: list[ParallelConfig],
                   max_batch: int) -> Iterator[Fleet]:
    """``PpDd`` fleets with prefill layout ``par`` and a decode layout of the same PP/DP/EP (any
    DP/EP with ``mixed_ep``)."""
    for par_d in layouts:
        if par_d.pp != par.pp or ((par_d.dp, par_d.ep) != (par.dp, par.ep) and not space.mixed_ep):
            continue
        if par_d.tp != par.tp and not space.mixed_tp:
            continue
        for p in range(1, space.devices // par.num_devices + 1):
            for d in range(1, space.devices + 1):
                if p * par.num_devices + d * par_d.num_devices > space.devices:
                    break
                for sd in _specs_for(space, par_d):
                    yield Fleet.build(Strategy(num_prefill=p, num_decode=d), tp=par.tp, decode_tp=par_d.tp,
                                      pp=par.pp, dp=par.dp, ep=par.ep, max_batch=max_batch,
                                      prefill_max_batch=space.prefill_max_batch, chunk_size=space.chunk_sizes[0],
                                      token_budget=space.token_budget, spec=sd, decode_dp=par_d.dp,
                                      decode_ep=par_d.ep,
                                      redundant_experts=par.redundant_experts)


def _mixed(space: SearchSpace, settings: GoodputSettings, request_tokens: int) -> SpaceListing:
    """The candidates of a mixed space (:class:`SearchSpace` ``prefill_device``): every ``PpDd``
    fleet whose prefill instances hold a layout that fits ``prefill_device`` (within
    ``prefill_devices``) and whose decode instances hold one that fits the settings' hardware
    (within ``devices``), each pool named with its type; the layouts pruned on either side with
    their reason and type."""
    pre = space.prefill_device
    assert pre is not None and space.prefill_devices is not None
    dec = DeviceType(hardware=settings.hardware, profile=settings.profile)
    out = SpaceListing()
    sides = []
    for dev, side_space, side_settings in (
            (pre, dataclasses.replace(space, devices=space.prefill_devices, prefill_device=None, prefill_devices=None),
             dataclasses.replace(settings, hardware=pre.hardware, profile=pre.profile)),
            (dec, dataclasses.replace(space, prefill_device=None, prefill_devices=None), settings)):
        listing = SpaceListing()
        sides.append((side_space.devices, _layouts(side_space, side_settings, request_tokens, listing)))
        out.pruned += [dataclasses.replace(p, name=f"{p.name} on {dev.name}") for p in listing.pruned]
    (budget_p, layouts_p), (budget_d, layouts_d) = sides
    for par, par_d in itertools.product(layouts_p, layouts_d):
        if par_d.pp != par.pp or ((par_d.dp, par_d.ep) != (par.dp, par.ep) and not space.mixed_ep):
            continue
        if par_d.tp != par.tp and not space.mixed_tp:
            continue
        for mb, p, d in itertools.product(space.max_batches, range(1, budget_p // par.num_devices + 1),
                                          range(1, budget_d // par_d.num_devices + 1)):
            for sd in _specs_for(space, par_d):
                fleet = Fleet.build(Strategy(num_prefill=p, num_decode=d), tp=par.tp, decode_tp=par_d.tp, pp=par.pp,
                                    dp=par.dp, ep=par.ep, max_batch=mb, prefill_max_batch=space.prefill_max_batch,
                                    chunk_size=space.chunk_sizes[0], token_budget=space.token_budget, spec=sd,
                                    decode_dp=par_d.dp, decode_ep=par_d.ep, redundant_experts=par.redundant_experts)
                out.candidates.append(fleet.on_devices(prefill=pre, decode=dec))
    out.candidates.sort(key=lambda c: (c.num_devices, c.name))
    return out


def _specs_for(space: SearchSpace, par: ParallelConfig) -> tuple[SpecDecodeConfig | None, ...]:
    """The speculative settings a decoding layout may take (plain decoding only with ``pp > 1``)."""
    return space.specs if par.pp == 1 else (None,)


def spec_choices(method: str | None, tokens: list[int] | tuple[int, ...] | None, *,
                 acceptance: str | tuple[float, ...] | None = None,
                 draft_model: str | None = None) -> tuple[SpecDecodeConfig | None, ...]:
    """The ``specs`` of a :class:`SearchSpace` from user options: one setting per draft length in
    ``tokens`` (``0``: plain decoding), e.g. ``spec_choices("eagle", [0, 1, 2, 3])``; ``(None,)``
    without a method."""
    if method is None:
        if tokens and any(tokens):
            raise SpecError("spec_tokens needs spec_method (draft, eagle, mtp or ngram)")
        return (None,)
    ks: list[int | None] = list(tokens) if tokens else [None]
    return tuple(dict.fromkeys(SpecDecodeConfig.of(method, k, acceptance, draft_model) for k in ks))


def search_defaults(engine: str | EngineSpec | None, hardware: DeviceSpec, *, max_batch: str | None = None,
                    prefill_max_batch: int | None = None, schedulers: str | None = None,
                    chunk_sizes: str | None = None, knobs: bool = False) -> tuple[str, int, str, str, int | None]:
    """The search lists ``(max batches, prompts per prefill step, schedulers, chunk sizes, token
    budget)`` of ``serveplan optimize`` (and the web planner) where the user gave none: BestServe's
    testbed (16, 4, prefill-first, 512, unlimited) without an engine, else the engine's scheduler and
    limits on ``hardware`` (:meth:`~serveplan.specs.engine.EngineSpec.limits`; its online server's
    token budget for every instance that does not chunk by the chunk sizes).

    ``knobs`` searches the engine's knobs around those defaults (:func:`knob_ladder`) for every
    list the user left out."""
    if engine is None:
        mb, pmb, sch, cs = (max_batch or "16", 4 if prefill_max_batch is None else prefill_max_batch,
                            schedulers or "prefill-first", chunk_sizes or "512")
        default_sched, default_batch, budget = "prefill-first", 16, 512
        token_budget = None
    else:
        spec = get_engine(engine) if isinstance(engine, str) else engine
        lim = spec.limits(hardware)
        default_batch = lim.max_num_seqs or spec.max_num_seqs_cap or 16   # the engine's max batch
        budget = lim.token_budget or lim.chunk_size or 512
        token_budget = lim.token_budget
        default_sched = spec.scheduler
        mb, pmb, sch, cs = (max_batch or str(default_batch),
                            (lim.prefill_max_batch or 0) if prefill_max_batch is None else prefill_max_batch,
                            schedulers or default_sched, chunk_sizes or str(budget))
    if knobs:
        ladder = knob_ladder(default_batch, budget, default_sched)
        mb = max_batch or ",".join(map(str, ladder[0]))
        cs = chunk_sizes or ",".join(map(str, ladder[1]))
        sch = schedulers or ",".join(ladder[2])
    return mb, pmb, sch, cs, token_budget


def knob_ladder(max_batch: int, token_budget: int, scheduler: str) -> tuple[tuple[int, ...], tuple[int, ...],
                                                                             tuple[str, ...]]:
    """The engine knobs searched around an engine's defaults: ``max_batch`` (vLLM's
    ``max_num_seqs``) at the default and a quarter and a sixteenth of it (at least 8: smaller
    batches trade throughput for TPOT), the token budget (vLLM's ``max_num_batched_tokens``, the
    chunk size of chunked prefill) at the default and twice it (longer chunks finish prompts sooner
    at the cost of decode stalls), and chunked prefill on and off (``chunked-prefill`` and
    ``prefill-first``), the default first."""
    seqs = tuple(dict.fromkeys(v for v in (max_batch, max_batch // 4, max_batch // 16) if v >= 8)) or (8,)
    budgets = (token_budget, 2 * token_budget)
    other = "prefill-first" if scheduler == "chunked-prefill" else "chunked-prefill"
    scheds = (scheduler, other) if scheduler in ("chunked-prefill", "prefill-first") else (scheduler,)
    return seqs, budgets, scheds
