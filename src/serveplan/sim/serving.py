"""An engine resolved for one deployment, and the offline and closed-loop loads.

:func:`resolve_engine` turns an :class:`~serveplan.specs.engine.EngineSpec` plus a model, a
device and whatever the user set into the numbers an instance runs with: sequences per step,
token budget, chunk, KV block size, the memory share the KV cache may take, the KV format and,
when no TP is given, the smallest TP whose weights fit with room for a useful KV cache
(:func:`default_tp`). Every value the engine chose is listed in :attr:`EngineSetup.notes`, so
reports can say where a number came from.

Loads (how requests arrive), beside the open-loop arrival processes of
:mod:`serveplan.sim.workload`:

* **offline** (``vllm bench throughput``, ``LLM.generate``): every request is queued at ``t = 0``
  and the run goes to completion without a time cap.
* **closed loop** at concurrency ``C`` (``vllm bench serve --max-concurrency``, genai-perf,
  aiconfigurator's silicon measurements): ``C`` clients each send a request at ``t = 0`` and the
  next one the moment their previous one finishes. Client ``c`` sends requests
  ``c, c + C, c + 2C, ...`` of the stream and, in a fleet of ``N`` collocated instances, talks to
  instance ``c mod N``. Statistics exclude warm-up and cool-down (:func:`steady_window`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from serveplan.errors import InfeasibleError, SpecError
from serveplan.estimator.step import Estimator
from serveplan.sim.schedulers.base import Options, policy_options
from serveplan.specs.engine import EngineSpec
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.model import ModelSpec
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.profile import EfficiencyProfile
from serveplan.units import DType

#: Concurrency a "useful" KV cache must hold (requests of the workload's longest length) when the
#: engine picks the TP: assumed, the smallest batch at which serving is batched at all in the
#: engines' own benchmarks (vLLM's and aiconfigurator's sweeps start at 1-16).
USEFUL_KV_REQUESTS = 16
TP_CANDIDATES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineSetup:
    """What one instance runs with under an engine (see :func:`resolve_engine`)."""

    engine: EngineSpec
    parallel: ParallelConfig
    max_batch: int
    token_budget: float
    chunk_size: int
    prefill_max_batch: int
    scheduler: str
    options: Options
    block_size: int
    memory_utilization: float
    kv_dtype: DType | None
    kv_capacity_tokens: int
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine.describe(), "tp": self.parallel.tp, "pp": self.parallel.pp,
            "max_batch": self.max_batch,
            "token_budget": None if math.isinf(self.token_budget) else int(self.token_budget),
            "chunk_size": self.chunk_size, "prefill_max_batch": self.prefill_max_batch, "scheduler": self.scheduler,
            "scheduler_options": self.options.to_dict(), "kv_block_size": self.block_size,
            "memory_utilization": self.memory_utilization,
            "kv_dtype": None if self.kv_dtype is None else self.kv_dtype.value,
            "kv_capacity_tokens": self.kv_capacity_tokens, "notes": list(self.notes),
        }


#: engine_estimator's answers in this process, by the identity of its specs and the value of the rest
_ESTIMATORS: dict[tuple[Any, ...], tuple[tuple[Any, ...], tuple[Estimator, float, DType | None]]] = {}
_ESTIMATORS_SIZE = 512


def engine_estimator(engine: EngineSpec, model: ModelSpec, hardware: DeviceSpec, profile: EfficiencyProfile,
                     parallel: ParallelConfig, *, dtype: DType | str | None = None,
                     kv_dtype: DType | str | None = None) -> tuple[Estimator, float, DType | None]:
    """The estimator of one instance with the engine's memory rule and KV format.

    Returns the estimator, the memory share it was built with and the KV format chosen
    (``None``: the estimator's default). A measured profile's curves of the engine's own kernels
    apply (:meth:`~serveplan.specs.profile.EfficiencyProfile.for_engine`).

    The same specs (the same objects) and layout give the same estimator: a search asks it for
    every candidate fleet of the same instances (a thousand zero-load checks per 16-device search),
    and building one costs milliseconds. An estimator is read-only after construction (its memos
    return the values they would compute), so sharing it changes no result."""
    specs = (engine, model, hardware, profile)
    key = (*map(id, specs), parallel, str(dtype), str(kv_dtype))
    hit = _ESTIMATORS.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], specs, strict=True)):
        return hit[1]
    if len(_ESTIMATORS) >= _ESTIMATORS_SIZE:
        _ESTIMATORS.clear()
    got = _engine_estimator(engine, model, hardware, profile, parallel, dtype=dtype, kv_dtype=kv_dtype)
    _ESTIMATORS[key] = (specs, got)
    return got


def _engine_estimator(engine: EngineSpec, model: ModelSpec, hardware: DeviceSpec, profile: EfficiencyProfile,
                      parallel: ParallelConfig, *, dtype: DType | str | None,
                      kv_dtype: DType | str | None) -> tuple[Estimator, float, DType | None]:
    profile = engine.profile_for(profile)
    w_dtype = DType.parse(dtype) if dtype is not None else model.dtype
    kv = DType.parse(kv_dtype) if kv_dtype is not None else engine.kv_dtype_for(w_dtype, model.kv_dtype)
    probe = Estimator(model, hardware, profile, parallel, dtype=dtype, kv_dtype=kv, memory_utilization=1.0)
    util = engine.memory_utilization(hardware, weights_bytes=probe.memory.weights_bytes,
                                     activation_bytes=probe.memory.activation_bytes, tp=parallel.tp, pp=parallel.pp)
    if util == 1.0:
        return probe, util, kv
    return Estimator(model, hardware, profile, parallel, dtype=dtype, kv_dtype=kv, memory_utilization=util), util, kv


def default_tp(engine: EngineSpec, model: ModelSpec, hardware: DeviceSpec, profile: EfficiencyProfile, *,
               longest_request: int, pp: int = 1, dtype: DType | str | None = None,
               kv_dtype: DType | str | None = None) -> tuple[int, str]:
    """Smallest TP whose weights fit with room for :data:`USEFUL_KV_REQUESTS` requests of
    ``longest_request`` tokens in the KV cache (the engine's ``default_tp`` when it has one).
    Returns the TP and a sentence saying why."""
    if engine.default_tp is not None:
        return engine.default_tp, f"tp={engine.default_tp}: the {engine.name} engine's default"
    need = USEFUL_KV_REQUESTS * longest_request
    tried = []
    for tp in TP_CANDIDATES:
        if tp > hardware.devices_per_node * 8:
            break
        try:
            par = ParallelConfig(tp=tp, pp=pp)
            par.validate_for(model)
        except SpecError:
            continue
        est, _, _ = engine_estimator(engine, model, hardware, profile, par, dtype=dtype, kv_dtype=kv_dtype)
        cap = est.memory.kv_capacity_tokens
        tried.append(f"tp={tp}: {cap:,} KV tokens")
        if cap >= need:
            return tp, (f"tp={tp}: the smallest TP whose weights fit with room for {USEFUL_KV_REQUESTS} requests of "
                        f"{longest_request:,} tokens ({cap:,} KV tokens); --tp overrides")
    raise InfeasibleError(f"{model.name} on {hardware.name}: no TP up to {TP_CANDIDATES[-1]} leaves room for "
                          f"{USEFUL_KV_REQUESTS} requests of {longest_request:,} tokens "
                          f"({'; '.join(tried) or 'none fit'}); give --tp/--pp explicitly")


def resolve_engine(engine: EngineSpec, model: ModelSpec, hardware: DeviceSpec, profile: EfficiencyProfile, *,
                   parallel: ParallelConfig | None, longest_request: int, offline: bool = False,
                   dtype: DType | str | None = None, kv_dtype: DType | str | None = None,
                   max_batch: int | None = None, token_budget: int | None = None, chunk_size: int | None = None,
                   prefill_max_batch: int | None = None, scheduler: str | None = None) -> EngineSetup:
    """The engine's defaults for this deployment; every argument given overrides its default.

    ``parallel=None`` lets the engine pick the TP (:func:`default_tp`)."""
    notes: list[str] = []
    if parallel is None:
        tp, why = default_tp(engine, model, hardware, profile, longest_request=longest_request, dtype=dtype,
                             kv_dtype=kv_dtype)
        parallel = ParallelConfig(tp=tp)
        notes.append(why)
    est, util, kv = engine_estimator(engine, model, hardware, profile, parallel, dtype=dtype, kv_dtype=kv_dtype)
    est.check_fits()
    lim = engine.limits(hardware, offline=offline)
    cap = est.memory.kv_capacity_tokens
    src = f"{engine.label} default"
    if max_batch is None:
        max_batch = engine.max_num_seqs_for(lim, cap, context_len=model.max_position_embeddings)
        where = f" on {hardware.name}" if lim.max_num_seqs is not None else ", from the KV cache"
        notes.append(f"max batch {max_batch} ({src}{where})")
    if token_budget is None and lim.token_budget is not None:
        token_budget = lim.token_budget
        notes.append(f"token budget {token_budget} per step ({src}, {'offline' if offline else 'online server'})")
    budget = float(token_budget) if token_budget is not None else math.inf
    if chunk_size is None:
        chunk_size = lim.chunk_size or (int(budget) if math.isfinite(budget) else 512)
    if prefill_max_batch is None:
        prefill_max_batch = lim.prefill_max_batch or max_batch
    sched = scheduler or engine.scheduler
    options = policy_options(engine, sched).for_layout(parallel)
    notes.extend(options.notes())
    if engine.overlap_scheduling:
        off = " (off with pipeline parallelism)" if parallel.pp > 1 else ""
        notes.append("steps planned while the previous one runs (overlap scheduling): a request reaching a busy "
                     f"engine joins the step after next{off}")
    if kv is not None and kv_dtype is None:
        w = DType.parse(dtype).value if dtype else model.dtype.value
        notes.append(f"KV cache {kv.value} ({src} for {w} weights)")
    return EngineSetup(engine=engine, parallel=parallel, max_batch=int(max_batch), token_budget=budget,
                       chunk_size=int(chunk_size), prefill_max_batch=int(prefill_max_batch), scheduler=sched,
                       options=options, block_size=engine.kv_block_size, memory_utilization=util,
                       kv_dtype=kv, kv_capacity_tokens=cap, notes=tuple(notes))


# ---------------------------------------------------------------------- closed-loop statistics
@dataclass(frozen=True, slots=True, kw_only=True)
class SteadyWindow:
    """The part of a closed-loop run measured at full concurrency.

    ``start_s``: when the first client sends its second request (the end of the warm-up in which
    all ``C`` first requests arrive together); ``end_s``: when the first client's last request
    finishes (after it fewer than ``C`` requests are ever in flight: the cool-down; a client still
    sending holds one request in flight until then, so exactly ``C`` are in the system throughout
    the window, with zero think time). ``measured`` marks requests sent in ``[start_s, end_s]``
    that also finished by ``end_s``: they ran entirely at concurrency ``C``. ``completed`` marks
    the requests finishing in ``(start_s, end_s]``: their count over the span is the throughput.
    """

    start_s: float
    end_s: float
    measured: np.ndarray
    completions: int  # requests of any kind finishing in (start_s, end_s]
    completed: np.ndarray


def steady_window(arrival: np.ndarray, finish: np.ndarray, concurrency: int) -> SteadyWindow:
    """:class:`SteadyWindow` of a closed-loop run whose request ``i`` was sent at ``arrival[i]``
    (client ``c`` sends ``c, c + C, ...``, so the clients' last requests are the final ``C``)."""
    n = len(arrival)
    c = concurrency
    if n <= c:
        done = np.isfinite(finish)
        return SteadyWindow(start_s=0.0, end_s=float(np.nanmax(finish)) if n else 0.0,
                            measured=done, completions=int(done.sum()), completed=done)
    start = float(arrival[c])
    with np.errstate(invalid="ignore"):
        last = finish[n - c:]
        end = float(np.min(last)) if np.all(np.isfinite(last)) else float(np.nanmax(finish))
        idx = np.arange(n)
        measured = (idx >= c) & (arrival >= start) & (finish <= end) & np.isfinite(finish)
        completed = (finish > start) & (finish <= end)
    if not measured.any():  # a run too short for a steady part: keep every completed request
        measured = np.isfinite(finish)
    return SteadyWindow(start_s=start, end_s=end, measured=measured, completions=int(np.count_nonzero(completed)),
                        completed=completed)


def check_loads(*, offline: bool, concurrency: Sequence[int] | int | None, rate: float | None) -> None:
    """One line, exit 2, for loads that contradict each other or are out of range."""
    if concurrency is not None:
        cs = [concurrency] if isinstance(concurrency, (int, np.integer)) else list(concurrency)
        for c in cs:
            if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1:
                raise SpecError(f"concurrency={c!r} must be a positive integer number of clients")
        if offline:
            raise SpecError("offline=True with concurrency: choose one load (offline queues every request at t=0)")
    if offline and rate is not None:
        raise SpecError(f"offline=True with rate={rate}: an offline run queues every request at t=0; drop the rate")


# ---------------------------------------------------------------------- drivers
def closed_loop_feed(num_instances: int, num_requests: int, concurrency: int) -> list[list[int]]:
    """Requests each instance serves, in the order its clients send them: client ``c`` sends
    ``c, c + C, ...`` and talks to instance ``c mod N``."""
    per: list[list[int]] = [[] for _ in range(num_instances)]
    for c in range(min(concurrency, num_requests)):
        per[c % num_instances].extend(range(c, num_requests, concurrency))
    return per
