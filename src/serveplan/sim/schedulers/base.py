"""Scheduler interface: a policy that decides what the next step of an instance computes.

A scheduler only decides; the instance applies the plan (KV blocks, request progress, timing),
so a policy is testable with a hand-built view and no engine.

Hooks
-----
``plan_batch(view) -> BatchPlan | None``
    Called at every step boundary. ``view`` is the instance (see :class:`InstanceView` for the
    attributes a policy may read). Return ``None`` when there is nothing to compute.
``fast_paths`` (class attribute, :class:`FastPaths`)
    The shortcuts whose decisions the policy guarantees, so the instance may take them without
    calling ``plan_batch`` (see :class:`FastPaths`). Subclasses inherit them; a subclass whose
    decisions differ in those views must set its own (``FastPaths()`` turns them all off).
``Options`` (class attribute, a frozen dataclass subclassing :class:`Options`)
    The policy's knobs in its engine's own words (SGLang's ``scheduler_recv_interval``,
    TensorRT-LLM's ``batch_wait_timeout_iters``), read from the ``scheduler: {policy, options}``
    mapping of an engine file (:meth:`Options.from_dict` validates them, naming the field, the
    value and the choices), fitted to an instance's layout (:meth:`Options.for_layout`) and
    described in plain words (:meth:`Options.notes`). A policy is built from its options:
    ``policy(options)``; keywords build them too (``PrefillPriorityScheduler(enable_mixed_chunk=True)``).
    The options also say how the instance takes new requests in (:attr:`Options.recv_interval`).
``tag``, ``chunked``, ``collocated`` (class attributes)
    Short tag in fleet names; whether the policy splits prompts into ``chunk_size`` pieces (its
    token budget then defaults to the chunk size, and the chunk size is part of the fleet's
    name and of the optimizer's search); whether it can run a collocated instance
    (``prefill-only`` and ``decode-only`` cannot).

Invariants a plan must keep (the instance asserts them):

* ``preempt`` lists running requests to evict (vLLM recompute preemption: their KV is freed and
  they return to the front of the waiting queue, to prefill ``input + generated`` tokens later).
* ``admit`` lists waiting requests, in queue order, moved to running; their KV blocks (whole
  prompt, or the transferred cache for ``kv_ready`` requests) must fit in ``free_blocks`` after
  the preemptions.
* ``prefill`` holds ``(request, tokens)`` chunks of running-or-admitted requests, at most the
  prompt's remaining tokens; ``decode`` holds running requests whose prompt is done. A request
  appears once. The blocks the decodes append must fit.
* At most ``max_batch`` sequences per step.

Adding a scheduler: subclass :class:`Scheduler` in ``sim/schedulers/<mechanism>.py``, decorate
with ``@register_scheduler("<mechanism>", "<alias>", ...)`` and import the module in
``sim/schedulers/__init__.py``; the conformance tests in ``tests/sim`` pick it up. Engine
presets (a mechanism plus its defaults) are aliases or thin subclasses on top.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

from serveplan.errors import SpecError
from serveplan.specs.catalog import get_engine, list_engines
from serveplan.specs.engine import EngineSpec
from serveplan.specs.parallel import ParallelConfig
from serveplan.units import ceil_div

#: Registered schedulers by mechanism name.
SCHEDULERS: dict[str, type[Scheduler]] = {}
#: Other names accepted for a mechanism (today's engine-style names).
ALIASES: dict[str, str] = {}


def register_scheduler(name: str, *aliases: str) -> Callable[[type[Scheduler]], type[Scheduler]]:
    """Class decorator: register a policy under its mechanism ``name`` and ``aliases``."""

    def deco(cls: type[Scheduler]) -> type[Scheduler]:
        SCHEDULERS[name] = cls
        for a in aliases:
            ALIASES[a] = name
        cls.name = name
        return cls

    return deco


def canonical_scheduler(name: str) -> str:
    """The mechanism name of ``name`` (an alias or a mechanism); :class:`SpecError` listing the
    options when unknown, and saying what to write when ``name`` is an engine's (a scheduler is
    named by what it does, an engine by who ships it; ``--engine`` picks both)."""
    name = ALIASES.get(name, name)
    if name not in SCHEDULERS:
        engine = _engine_named(name)
        if engine is not None:
            raise SpecError(f"scheduler={name!r} is an engine, not a scheduler; give --engine {name} (its "
                            f"{engine.scheduler} policy and defaults) or a mechanism: "
                            f"{', '.join(collocated_schedulers())} (prefill-first is vLLM v0's and BestServe's)")
        raise SpecError(f"scheduler={name!r}; expected one of: {', '.join(scheduler_names())}")
    return name


def _engine_named(name: str) -> EngineSpec | None:
    """The bundled engine family or version called ``name`` (None: none is)."""
    return get_engine(name) if name in list_engines() else None


def policy_options(engine: EngineSpec, policy: str | None = None) -> Options:
    """The validated options of ``policy`` (default: the engine's own) under ``engine``: the
    engine file's ``scheduler.options`` when the engine runs that policy, the policy's defaults
    otherwise. :class:`SpecError` naming the engine and the option when one is unknown or out of
    range."""
    own = canonical_scheduler(engine.scheduler)
    name = own if policy is None else canonical_scheduler(policy)
    cls = SCHEDULERS[name].Options
    if name != own:
        return cls()
    return cls.from_dict(engine.scheduler_options, f"engine {engine.name!r}: scheduler.options")


def scheduler_names() -> list[str]:
    """Every accepted name: mechanisms and aliases, sorted."""
    return sorted([*SCHEDULERS, *ALIASES])


def get_scheduler(name: str) -> type[Scheduler]:
    """The policy class registered under ``name`` (or its alias)."""
    return SCHEDULERS[canonical_scheduler(name)]


def collocated_schedulers() -> tuple[str, ...]:
    """Mechanisms that can run a collocated instance, in registration order."""
    return tuple(n for n, c in SCHEDULERS.items() if c.collocated)


class RequestView(Protocol):
    """Per-request lists a policy reads (:class:`serveplan.sim.request.RequestState`)."""

    inp: list[int]
    prompt_len: list[int]
    prefilled: list[int]
    kv_len: list[int]
    gen: list[int]
    out: list[int]
    blocks: list[int]
    ready_at: list[float]
    kv_ready: list[bool]


class InstanceView(Protocol):
    """What a policy may read (attributes of :class:`serveplan.sim.instance.Instance`)."""

    @property
    def now(self) -> float: ...
    @property
    def waiting(self) -> deque[int]: ...         # arrived, not running, FCFS (preempted requests in front)
    @property
    def running(self) -> list[int]: ...          # holding KV, in admission order
    @property
    def free_blocks(self) -> int: ...
    @property
    def block_size(self) -> int: ...
    @property
    def max_batch(self) -> int: ...              # sequences per step
    @property
    def max_running(self) -> int: ...            # sequences holding KV (max_batch x pipeline stages)
    @property
    def max_prompts(self) -> int: ...            # new prompts per step
    @property
    def token_budget(self) -> float: ...         # new tokens per step (inf = unlimited)
    @property
    def chunk_size(self) -> int: ...             # largest prefill chunk of one request
    # optional ``decode_tokens``: budget tokens per decode (K + 1 with speculative decoding; 1 if absent)
    # optional ``decode_all_need``, ``decode_all_left(clip)``, ``decode_all_future()``: see
    # ``Scheduler.reads_decode_all``
    @property
    def req(self) -> RequestView: ...


#: option field -> the :class:`ParallelConfig` attribute :meth:`Options.for_layout` sets it from
LAYOUT_FIELDS = {"attention_dp_ranks": "dp"}


@dataclass(frozen=True, slots=True)
class FastPaths:
    """Shortcuts a policy declares: views whose decision it guarantees, so the instance (with
    ``pp == 1``) may act without calling ``plan_batch``. Each must give exactly the planned
    path's answer (``tests/sim/test_fast_paths.py`` pins them).

    Attributes
    ----------
    lone_prompt:
        A fresh prompt alone on an empty instance is admitted and prefilled whole in one step
        when its blocks fit, then decodes alone until something else arrives.
    lone_transfer:
        A transferred KV cache alone on an empty instance is admitted when its blocks fit, then
        decodes alone.
    all_decode:
        With nothing waiting and every running request past its prompt and ready, every running
        request decodes one token per step when the blocks they append fit (no preemption).
    repeat_chunk:
        A step of every running decode plus a chunk of the one prompt in progress repeats (the
        same decodes, the prompt's next equal chunk) until the prompt's last chunk, a
        completion, KV exhaustion or an arrival that leftover budget could admit.
    """

    lone_prompt: bool = False
    lone_transfer: bool = False
    all_decode: bool = False
    repeat_chunk: bool = False


@dataclass(slots=True)
class BatchPlan:
    """What one step computes."""

    prefill: list[tuple[int, int]] = field(default_factory=list)
    decode: list[int] = field(default_factory=list)
    admit: list[int] = field(default_factory=list)
    preempt: list[int] = field(default_factory=list)
    #: A decode-only plan that holds waiting prompts back (TensorRT-LLM's batch waiting and
    #: attention-DP balance): the most steps it may repeat before the policy must be asked again
    #: (an arrival asks it too); 0: no bound
    hold_steps: int = 0

    @property
    def is_empty(self) -> bool:
        return not (self.prefill or self.decode)


#: KV blocks holding ``tokens`` tokens: ``blocks_for(tokens, block_size)`` (``ceil_div`` itself,
#: not a wrapper: policies call it per request at every step boundary)
blocks_for = ceil_div


_O = TypeVar("_O", bound="Options")


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """A policy's options, in its engine's own words (the base policy has none).

    Subclasses declare fields with defaults (the engine's own, cited); a field typed as another
    ``Options`` dataclass is a nested mapping in the file (TensorRT-LLM's ``attention_dp_config``).
    Fields named in :attr:`from_layout` are set from the instance's layout, not read from a file.
    """

    #: fields set by :meth:`for_layout` from the instance's layout (refused in a file)
    from_layout: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_dict(cls: type[_O], raw: Mapping[str, Any] | None, where: str = "scheduler options") -> _O:
        """Validated options from a file's mapping: an unknown key, or a value of the wrong kind or
        range, raises :class:`SpecError` naming the field, the value and what was expected."""
        raw = {} if raw is None else raw
        if not isinstance(raw, Mapping):
            raise SpecError(f"{where} must be a mapping of option names to values; got {raw!r}")
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls) if f.name not in cls.from_layout]
        values: dict[str, Any] = {}
        for key, v in raw.items():
            if key not in names:
                choices = ", ".join(names) or "none (this policy has no options)"
                raise SpecError(f"{where}: unknown option {key!r}; expected one of: {choices}")
            values[key] = _option_value(f"{where}.{key}", v, hints[key])
        out = cls(**values)
        out.check(where)
        return out

    def check(self, where: str) -> None:
        """Range checks across fields (:class:`SpecError`); none by default."""

    def for_layout(self: _O, parallel: ParallelConfig) -> _O:
        """These options for an instance of layout ``parallel``: each field in :attr:`from_layout`
        set from the layout (:data:`LAYOUT_FIELDS` names where)."""
        if not self.from_layout:
            return self
        return dataclasses.replace(self, **{f: getattr(parallel, LAYOUT_FIELDS[f]) for f in self.from_layout})

    def notes(self) -> list[str]:
        """What the options change, in plain words, for the run's notes (only what departs from
        a plain policy)."""
        return []

    @property
    def recv_interval(self) -> int:
        """Steps between the instance's looks at new requests (1: before every step; SGLang's
        ``--scheduler-recv-interval``)."""
        return 1

    def to_dict(self) -> dict[str, Any]:
        """The options as a file would hold them (infinite numbers as ``None``)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Options):
                v = v.to_dict()
            elif isinstance(v, float) and v == float("inf"):
                v = None
            out[f.name] = v
        return out


def _option_value(where: str, v: Any, kind: Any) -> Any:
    """``v`` checked against the annotation ``kind`` (bool, int, float, an ``Options`` dataclass,
    or one of them ``| None``)."""
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in args:
        if v is None:
            return None
        kind = next(a for a in args if a is not type(None))
    if isinstance(kind, type) and issubclass(kind, Options):
        return kind.from_dict(v, where)
    if kind is bool:
        if not isinstance(v, bool):
            raise SpecError(f"{where}={v!r} must be true or false")
        return v
    if kind is int:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise SpecError(f"{where}={v!r} must be an integer >= 0")
        return v
    if kind is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
            raise SpecError(f"{where}={v!r} must be a number >= 0")
        return float(v)
    raise TypeError(f"{where}: option type {kind!r} is not supported")  # pragma: no cover - a policy's bug


#: the base of every policy's options (a name that a :class:`Scheduler` body can use for the type)
PolicyOptions = Options


class Scheduler:
    """Base policy: helpers shared by the concrete schedulers.

    Built from its :attr:`Options` (``policy(options)``, or keywords that build them)."""

    #: the options this policy takes (module docstring)
    Options: ClassVar[type[PolicyOptions]] = PolicyOptions
    #: what a waiting request must find free in the KV cache to be admitted: its ``prompt``
    #: (later shortage preempts), its prompt plus a ``reserve-ratio`` of the outputs still to come,
    #: or its ``full`` length
    admission: ClassVar[str] = "prompt"

    name: ClassVar[str] = "base"
    #: short tag in fleet names (``2m-tp4-b16-<tag>``)
    tag: ClassVar[str] = "base"
    #: shortcuts whose decisions this policy guarantees (none by default)
    fast_paths: ClassVar[FastPaths] = FastPaths()
    #: whether prompts are split into chunk_size pieces (token budget defaults to the chunk size)
    chunked: ClassVar[bool] = False
    #: whether the policy can run a collocated instance
    collocated: ClassVar[bool] = True
    #: whether ``plan_batch`` plans from the view's optional ``decode_all_need`` when it is given
    #: (an int: every running request is past its prompt and ready, at most ``max_batch`` of them,
    #: and one decode step of them all appends that many blocks, which fit), reading then no
    #: running request's KV length, generated tokens or blocks (the instance's decode cohort may
    #: not have written them yet, :mod:`serveplan.sim.cohort`). With it given, the view's
    #: ``decode_all_left(clip)`` is ``sum(min(out - gen, clip))`` and ``decode_all_future()``
    #: ``sum(max(blocks_for(inp + out - 1) - blocks, 0))`` over the running requests (their true
    #: values, from the cohort's running sums)
    reads_decode_all: ClassVar[bool] = False

    def __init__(self, options: PolicyOptions | None = None, **changes: Any) -> None:
        opts = type(self).Options() if options is None else options
        if not isinstance(opts, type(self).Options):
            raise TypeError(f"{type(self).__name__} takes {type(self).Options.__qualname__}, "
                            f"not {type(opts).__qualname__}")
        self.options = dataclasses.replace(opts, **changes) if changes else opts

    def plan_batch(self, view: InstanceView) -> BatchPlan | None:  # pragma: no cover - abstract
        raise NotImplementedError

    # ---------------------------------------------------------------- helpers
    @staticmethod
    def ready_decodes(view: InstanceView) -> list[int]:
        """Running requests whose prompt is done and that are not in the pipeline."""
        r = view.req
        now = view.now
        pl, pf, ra = r.prompt_len, r.prefilled, r.ready_at
        return [q for q in view.running if pf[q] >= pl[q] and ra[q] <= now]

    @staticmethod
    def fit_decodes(view: InstanceView, decodes: list[int], plan: BatchPlan) -> tuple[list[int], int]:
        """Preempt the most recently admitted running requests until one decode step of
        ``decodes`` fits in the KV cache (vLLM ``_preempt``, recompute mode). Returns the kept
        decodes and the free blocks left."""
        r = view.req
        kv, bs = r.kv_len, view.block_size
        free = view.free_blocks
        need = sum(1 for q in decodes if kv[q] % bs == 0)
        if need <= free:
            return decodes, free - need
        kept = list(decodes)
        victims = [q for q in reversed(view.running) if r.ready_at[q] <= view.now]
        for v in victims:
            if need <= free or len(kept) <= 1:
                break
            plan.preempt.append(v)
            free += r.blocks[v]
            if v in kept:
                kept.remove(v)
                if kv[v] % bs == 0:
                    need -= 1
        while need > free and kept:  # only in-flight pipeline requests hold the rest: wait for them
            q = kept.pop()
            if kv[q] % bs == 0:
                need -= 1
        return kept, free - need

    @staticmethod
    def admit_kv_ready(view: InstanceView, plan: BatchPlan) -> None:
        """Admit the transferred requests at the head of the queue (no compute: the instance
        applies the admission and plans again)."""
        r = view.req
        free = view.free_blocks
        slots = view.max_running - len(view.running)
        for q in view.waiting:
            if not r.kv_ready[q] or slots <= 0:
                break
            b = blocks_for(r.kv_len[q], view.block_size)
            if b > free:
                break
            plan.admit.append(q)
            free -= b
            slots -= 1

    @staticmethod
    def admit_cost(view: InstanceView, q: int) -> tuple[int, int]:
        """(blocks, prefill tokens) to admit waiting request ``q``."""
        r = view.req
        if r.kv_ready[q]:
            return blocks_for(r.kv_len[q], view.block_size), 0
        return blocks_for(r.prompt_len[q], view.block_size), r.prompt_len[q] - r.prefilled[q]
