"""Search every strategy of a space, rank by normalized goodput, and build the Pareto view.

Evaluations are pure in ``(candidate, settings)``, so they run in parallel processes (default),
on a Ray cluster (``backend="ray"``), or in process (``jobs=1``). With an output directory every
finished evaluation is appended to ``checkpoint.jsonl`` at once; a search restarted with the same
directory and settings skips those, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from serveplan.errors import InfeasibleError, SpecError
from serveplan.optimize.compose import FastOutcome, decomposable, fast_search
from serveplan.optimize.economics import OBJECTIVES, Economics, economics
from serveplan.optimize.goodput import (
    GoodputMethod,
    GoodputResult,
    GoodputSettings,
    GoodputStatus,
    max_goodput,
    worker_clocks,
)
from serveplan.optimize.lifecycle import append_checkpoint, read_checkpoint, reap_on_exit, worker_pool
from serveplan.optimize.screen import Screen
from serveplan.optimize.space import Pruned, SearchSpace, SpaceListing, enumerate_space
from serveplan.sim.clock import Clocks
from serveplan.sim.fleet import DeviceType, Fleet
from serveplan.specs.catalog import get_engine
from serveplan.specs.prices import Price, PriceTable, bundled_prices

CHECKPOINT = "checkpoint.jsonl"


class SearchMethod(str, Enum):
    """How :func:`search` ranks a space; a ``str`` enum, so ``method == "fast"`` holds and
    documents keep the plain string."""

    EXHAUSTIVE = "exhaustive"   # every fleet simulated
    FAST = "fast"               # pools composed and the best confirmed
    #: every fleet that can still reach the best ``keep`` simulated whole, best analytic bound
    #: first (branch and bound)
    BOUNDED = "bounded"
    AUTO = "auto"               # the fast one where its confirmations agree with its compositions, else bounded

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: str | SearchMethod) -> SearchMethod:
        try:
            return cls(value)
        except ValueError:
            raise SpecError(f"method={value!r}; expected one of: {', '.join(METHODS)}") from None


#: the search methods' names
METHODS = tuple(m.value for m in SearchMethod)
#: method "bounded": how many of the best strategies are ranked exactly as the exhaustive search
KEEP = 1
#: results of fleets simulated whole (the others were composed, bounded or cut)
_WHOLE = (GoodputMethod.WHOLE, GoodputMethod.CONFIRMED)


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchResult:
    """Ranked strategies (best normalized goodput first), rejected and pruned ones, Pareto set."""

    strategies: tuple[GoodputResult, ...]
    rejected: tuple[GoodputResult, ...]
    pruned: tuple[Pruned, ...]
    pareto: tuple[str, ...]
    num_simulations: int
    num_evaluated: int
    num_resumed: int
    elapsed_s: float
    settings_summary: dict[str, Any] = field(default_factory=dict)
    #: strategies shown after the best of each architecture (:meth:`ranking`)
    top: int = 10
    #: cost and energy of each ranked strategy, by name (:mod:`serveplan.optimize.economics`)
    economics: dict[str, Economics] = field(default_factory=dict)
    #: what ``strategies`` is ordered by: goodput per device, cost ($/Mtok) or energy (J/token)
    objective: str = "goodput-per-device"

    @property
    def best(self) -> GoodputResult:
        return self.strategies[0]

    def _best_whole(self, disaggregated: bool) -> GoodputResult | None:
        return next((r for r in self.strategies if r.candidate.is_disaggregated == disaggregated
                     and r.method in _WHOLE), None)

    @property
    def best_collocated(self) -> GoodputResult | None:
        """The best collocated strategy simulated whole (None: none met the SLO, or none was asked for)."""
        return self._best_whole(False)

    @property
    def best_disaggregated(self) -> GoodputResult | None:
        """The best disaggregated strategy simulated whole (None: none met the SLO, or none was asked for)."""
        return self._best_whole(True)

    def ranking(self) -> list[GoodputResult]:
        """What the ranking shows, best per device first: the best collocated and the best
        disaggregated strategies simulated whole, then the ``top`` best of the others."""
        heads = [r for r in (self.best_collocated, self.best_disaggregated) if r is not None]
        rest = [r for r in self.strategies if r not in heads][:self.top]
        order = {r.name: i for i, r in enumerate(self.strategies)}
        return sorted(heads + rest, key=lambda r: order[r.name])

    @property
    def slo_tolerance(self) -> float | None:
        """The share by which a percentile may exceed its target and still count as meeting it
        (BestServe Algorithm 9's tau; ``GoodputSettings.relaxation``). None for a result built
        without settings."""
        tol = self.settings_summary.get("slo_tolerance", self.settings_summary.get("relaxation"))
        return None if tol is None else float(tol)

    @property
    def frontier(self) -> tuple[FrontierPoint, ...]:
        """Output tokens/s per device against tokens/s per user (:func:`throughput_frontier`)."""
        return throughput_frontier(self.strategies, self.economics)

    def cost_energy(self, name: str) -> dict[str, Any]:
        """The flat cost and energy figures of strategy ``name`` (:data:`ECONOMICS_KEYS`; None
        where not computed), for tables, CSV rows and JSON."""
        e = self.economics.get(name)
        if e is None:
            return dict.fromkeys(ECONOMICS_KEYS)
        return {k: _finite(getattr(e, k)) for k in ECONOMICS_KEYS}

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": self.settings_summary,
            "objective": self.objective,
            "strategies": [r.to_dict() | {"pareto": r.name in self.pareto, "slo_tolerance": self.slo_tolerance}
                           | self.cost_energy(r.name)
                           | {"economics": None if r.name not in self.economics
                              else _safe(self.economics[r.name].to_dict())}
                           for r in self.strategies],
            "rejected": [r.to_dict() for r in self.rejected],
            "pruned": [p.to_dict() for p in self.pruned],
            "ranking": [r.name for r in self.ranking()],
            "best_collocated": None if self.best_collocated is None else self.best_collocated.name,
            "best_disaggregated": None if self.best_disaggregated is None else self.best_disaggregated.name,
            "pareto": list(self.pareto),
            "frontier": [p.to_dict() for p in self.frontier],
            "num_simulations": self.num_simulations,
            "num_evaluated": self.num_evaluated,
            "num_resumed": self.num_resumed,
            "elapsed_s": self.elapsed_s,
        }


def _fingerprint(settings: GoodputSettings) -> str:
    """Identity of everything that changes an evaluation besides the candidate."""
    s = settings
    wl = s.workload
    parts = [
        repr(s.model), repr(s.hardware),  # every field of both specs (frozen dataclasses)
        json.dumps(s.profile.to_dict(), sort_keys=True), str(s.dtype), repr(s.slo), repr(s.relaxation),
        repr(s.rel_tol), repr(s.abs_tol), str(s.seeds), str(s.seed), s.fidelity,
        wl._digest,  # content hash of lengths, arrival process and trace
    ]
    if s.engine is not None or s.kv_dtype is not None:  # absent before engines: old checkpoints stay valid
        parts += [str(s.engine), str(s.kv_dtype)]
    if s.checks_steady_state:
        parts.append("steady-state")
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:16]


def _load_checkpoint(path: Path, fingerprint: str) -> dict[str, GoodputResult]:
    done: dict[str, GoodputResult] = {}
    for rec in read_checkpoint(path):  # partial and duplicate lines dropped (optimize.lifecycle)
        if rec.get("fingerprint") == fingerprint:
            done[rec["name"]] = GoodputResult.from_dict(rec["result"])
    return done


def _append_checkpoint(path: Path, fingerprint: str, res: GoodputResult, key: str | None = None) -> None:
    append_checkpoint(path, {"fingerprint": fingerprint, "name": key or res.name, "result": res.to_dict()})


def _evaluate(args: tuple[int, Fleet, GoodputSettings]) -> tuple[int, GoodputResult]:
    """A pool worker's evaluation, its step clocks the worker's own (``worker_clocks``)."""
    key, cand, settings = args
    return key, max_goodput(cand, settings, clocks=worker_clocks())


def _evaluate_beat(key: int, cand: Fleet, settings: GoodputSettings, beat: float | None,
                   clocks: Clocks | None = None) -> tuple[int, GoodputResult]:
    return key, max_goodput(cand, settings, beat=beat, clocks=clocks if clocks is not None else worker_clocks())


def _check_ray_address(address: str) -> None:
    """Fail fast with a one-line error when a Ray head is not reachable (``host:port``)."""
    if address in ("auto", "local"):
        return
    import socket  # only for a remote Ray head (keeps `import serveplan` light)

    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=3):
            pass
    except (OSError, ValueError):
        raise SpecError(f"ray-address={address!r} is unreachable; expected host:port of a running Ray head "
                        f"(start one with `ray start --head`) or omit it for a local Ray instance") from None


Task = tuple[int, Fleet, GoodputSettings]
#: method "bounded": when a task starts, the rate it must beat (None: none yet)
Gate = Callable[[Task], "float | None"]


#: tasks of the branch and bound started together, each told the rate to beat as it stood when the
#: wave began: a fixed number, so which fleets are cut (and the ranking) does not depend on how many
#: workers ran them
WAVE = 2


def _run_gated(todo: list[Task], jobs: int, on_done: Callable[[int, GoodputResult], None], gate: Gate) -> None:
    """Run tasks in the given order (best bound first) in waves of :data:`WAVE`, each task told the
    rate it must beat given the results of the waves before it; a wave's tasks run at most ``jobs``
    at a time, their results recorded in the given order."""
    clocks = Clocks()   # in process: this run's own step clocks
    pool_cm = worker_pool(min(jobs, WAVE)) if jobs > 1 and len(todo) > 1 else contextlib.nullcontext()
    with pool_cm as pool:
        for i in range(0, len(todo), WAVE):
            wave = [(t, gate(t)) for t in todo[i:i + WAVE]]
            if pool is None:
                outs = [_evaluate_beat(*t, beat, clocks) for t, beat in wave]
            else:
                outs = [f.result() for f in [pool.submit(_evaluate_beat, *t, beat) for t, beat in wave]]
            for out in outs:
                on_done(*out)


def _run_local(todo: list[Task], jobs: int, on_done: Callable[[int, GoodputResult], None],
               gate: Gate | None = None) -> None:
    if gate is not None:
        _run_gated(todo, jobs, on_done, gate)
        return
    if jobs <= 1 or len(todo) <= 1:
        clocks = Clocks()   # in process: this run's own step clocks
        for key, c, st in todo:
            on_done(key, max_goodput(c, st, clocks=clocks))
        return
    from concurrent.futures import FIRST_COMPLETED, wait

    # slowest first (most requests to simulate, largest fleets), so the pool drains evenly
    def cost(t: Task) -> tuple[float, int]:
        wl = t[2].workload
        return -len(wl.input_lengths) * float(sum(wl.output_lengths[:64])), -t[1].num_devices

    order = sorted(todo, key=cost)
    # workers end with this process, even on SIGKILL (optimize.lifecycle.worker_pool)
    with worker_pool(min(jobs, len(todo))) as pool:
        pending = {pool.submit(_evaluate, t) for t in order}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                on_done(*f.result())


def _run_ray(todo: list[Task], jobs: int, address: str | None,
             on_done: Callable[[int, GoodputResult], None]) -> None:
    with ray_session(jobs, address) as ray:
        remote = ray.remote(max_goodput)
        refs: dict[int, Any] = {}  # each settings object is shipped once; Ray resolves top-level refs
        pending = {}
        for key, c, st in todo:
            if id(st) not in refs:
                refs[id(st)] = ray.put(st)
            pending[remote.remote(c, refs[id(st)])] = key
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                on_done(pending.pop(ref), ray.get(ref))


@contextlib.contextmanager
def ray_session(jobs: int, address: str | None) -> Iterator[Any]:
    """The ``ray`` module, connected to the Ray head at ``address`` (``host:port``) or, without one,
    to a Ray instance of this process's own with ``jobs`` CPUs, which ends with the block (and with
    this process, SIGKILL included: :class:`~serveplan.optimize.lifecycle.reap_on_exit`). A process
    already connected keeps its connection.

    Raises
    ------
    SpecError
        The head is unreachable, or Ray is not installed.
    """
    if address:  # first: an unreachable head is the same answer with or without Ray installed
        _check_ray_address(address)
    try:
        import ray
    except ImportError:
        raise SpecError("backend='ray' needs Ray: pip install 'serveplan[ray]'") from None
    started_here = not ray.is_initialized()
    with reap_on_exit() if started_here and not address else contextlib.nullcontext():
        if started_here:
            kwargs: dict[str, Any] = {"ignore_reinit_error": True, "include_dashboard": False,
                                      "logging_level": "ERROR", "log_to_driver": False}
            if address:
                kwargs["address"] = address
            else:  # a Ray instance of its own: ray.init()'s default would join whatever cluster Ray last recorded
                kwargs["address"] = "local"
                kwargs["num_cpus"] = max(1, jobs)
            try:
                ray.init(**kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise SpecError(f"ray-address={address!r}: could not connect ({str(exc).splitlines()[0]})") from None
        try:
            yield ray
        finally:
            if started_here and not address:
                ray.shutdown()


@dataclass(frozen=True, slots=True, kw_only=True)
class FrontierPoint:
    """One strategy at its goodput on the throughput-per-device vs speed-per-user plane.

    ``tokens_per_s_per_user`` is ``1 / TPOT`` at the SLO percentile (the speed the slowest 10% of
    users see, for P90) and ``tokens_per_s_per_device`` the output tokens per second of the fleet
    at its goodput, per device: aiconfigurator's axes, under the TTFT target. ``pareto``: no
    strategy of the same architecture is at least as good on both axes and better on one.
    """

    name: str
    architecture: str              # "collocated" or "disaggregated"
    num_devices: int
    goodput_rps: float
    tokens_per_s_per_user: float
    tokens_per_s_per_device: float
    ttft_p_s: float
    tpot_p_s: float
    pareto: bool
    #: cost and energy at the goodput / planned rate (None: not computed; :class:`Economics`)
    usd_per_mtok_output: float | None = None
    j_per_output_token: float | None = None
    power_w_per_device: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__slots__}


#: the flat cost and energy figures every ranking row, frontier point and JSON strategy carries
ECONOMICS_KEYS = ("planned_rps", "replicas", "usd_per_hour", "usd_per_mtok_output", "usd_per_mtok_total",
                  "usd_per_month", "power_w_per_device", "j_per_output_token", "j_per_token", "kwh_per_month")


def _finite(v: Any) -> Any:
    return None if isinstance(v, float) and not np.isfinite(v) else v


def _safe(d: Any) -> Any:
    """``d`` with non-finite floats as None (strict JSON)."""
    if isinstance(d, dict):
        return {k: _safe(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [_safe(v) for v in d]
    return _finite(d)


def throughput_frontier(results: Iterable[GoodputResult],
                        econ: dict[str, Economics] | None = None) -> tuple[FrontierPoint, ...]:
    """Every ranked strategy as a :class:`FrontierPoint`, each architecture's Pareto frontier
    (higher tokens/s per device and per user) marked, ordered by architecture then speed per user;
    ``econ`` (by name) adds each point's $/Mtok, J/token and W per device."""
    pts = []
    for r in results:
        if r.status != GoodputStatus.OK or not (r.tpot_p > 0) or not np.isfinite(r.tpot_p):
            continue
        pts.append((("disaggregated" if r.candidate.is_disaggregated else "collocated"), 1.0 / r.tpot_p,
                    r.output_tokens_per_s / r.candidate.num_devices, r))
    out = []
    for arch, user, dev, r in pts:
        dominated = any(a2 == arch and u2 >= user and d2 >= dev and (u2 > user or d2 > dev)
                        for a2, u2, d2, _ in pts)
        e = (econ or {}).get(r.name)
        out.append(FrontierPoint(name=r.name, architecture=arch, num_devices=r.candidate.num_devices,
                                 goodput_rps=r.goodput_rps, tokens_per_s_per_user=user, tokens_per_s_per_device=dev,
                                 ttft_p_s=r.ttft_p, tpot_p_s=r.tpot_p, pareto=not dominated,
                                 usd_per_mtok_output=None if e is None else _finite(e.usd_per_mtok_output),
                                 j_per_output_token=None if e is None else _finite(e.j_per_output_token),
                                 power_w_per_device=None if e is None else _finite(e.power_w_per_device)))
    out.sort(key=lambda p: (p.architecture, p.tokens_per_s_per_user, p.name))
    return tuple(out)


def pareto_front(results: Iterable[GoodputResult]) -> tuple[str, ...]:
    """Strategies no other beats on both goodput per device (higher) and mean latency (lower):
    the Pareto set of (goodput per device, mean end-to-end latency at the goodput rate)."""
    pts = [(r.e2e_mean_s, r.goodput_per_device, r.name) for r in results if r.status == GoodputStatus.OK]
    front = []
    for lat, thr, name in pts:
        dominated = any((l2 <= lat and t2 >= thr) and (l2 < lat or t2 > thr) for l2, t2, _ in pts)
        if not dominated:
            front.append((lat, name))
    return tuple(n for _, n in sorted(front))


def search(space: SearchSpace, settings: GoodputSettings, *, jobs: int | None = None, backend: str = "local",
           ray_address: str | None = None, out_dir: str | Path | None = None, progress: bool = True,
           max_new_evaluations: int | None = None, method: str | SearchMethod = SearchMethod.EXHAUSTIVE,
           confirm: int = 3, target_rate: float | None = None, frontier: bool = False,
           keep: int = KEEP, objective: str = "goodput-per-device", prices: PriceTable | None = None,
           price_tier: str = "on_demand") -> SearchResult:
    """Rank the candidates of ``space`` by goodput per device (or ``objective``).

    ``method="exhaustive"`` (default) simulates every candidate's goodput (BestServe's Algorithm 8
    per fleet); ``method="fast"`` (what ``serveplan optimize`` runs unless ``--exhaustive``) is
    :mod:`serveplan.optimize.compose`: analytic bounds prune, pool measurements compose the rest,
    and the best ``confirm`` fleets are simulated whole. ``target_rate`` (req/s) ranks the fleets
    reaching it by fewest devices instead. ``frontier`` (fast method) keeps every fleet that may lie
    on the throughput frontier instead of only those that may beat the best per device.
    ``method="bounded"`` simulates whole, as the exhaustive search does, every fleet that may still
    rank among the best ``keep`` per device (branch and bound on the analytic bounds, best bound
    first, :class:`_Brancher`); the others are pruned with the bound or the missed rate that rules
    them out. Its best ``keep`` are the exhaustive search's, with the same goodputs.
    ``method="auto"`` (what ``serveplan optimize`` runs unless ``--exhaustive`` or ``--keep``) runs
    the fast search and keeps its ranking when every whole-fleet confirmation agrees with its
    composition (within the bisection tolerance); when one disagrees, the composition's premise
    (pools independent, each in steady state on its share of the stream) is measured false on this
    space, the composed ranking is dropped and the branch and bound ranks the space instead
    (``settings_summary["auto"]`` says which ran and why; the fast attempt's simulations are
    counted). With ``target_rate`` or ``frontier`` it stays the fast search (the branch and bound
    ranks by goodput per device only), disagreements reported.

    Parameters
    ----------
    jobs:
        Parallel workers (processes, or Ray CPUs for a local Ray); default: all cores.
    backend:
        ``"local"`` (process pool) or ``"ray"``.
    out_dir:
        Where ``checkpoint.jsonl`` lives; a rerun with the same directory resumes.
    max_new_evaluations:
        Stop after this many new evaluations (a deliberately interrupted search, for tests).
    objective:
        ``"goodput-per-device"`` (default), ``"cost"`` (lowest $ per million output tokens at the
        goodput first) or ``"energy"`` (lowest J per output token at the planned rate first);
        every ranked strategy gets its cost and energy either way (:attr:`SearchResult.economics`).
    prices, price_tier:
        The price table (default: the bundled one, :mod:`serveplan.specs.prices`) and its tier.

    Raises
    ------
    InfeasibleError
        No candidate survives pruning, or none meets the SLO at any rate.
    """
    return search_many(space, [settings], jobs=jobs, backend=backend, ray_address=ray_address, out_dir=out_dir,
                       progress=progress, max_new_evaluations=max_new_evaluations, method=method,
                       confirm=confirm, target_rate=target_rate, frontier=frontier, keep=keep,
                       objective=objective, prices=prices, price_tier=price_tier)[0]


class _Brancher:
    """Branch and bound over the exhaustive search (``method="bounded"``).

    Candidates start best analytic bound per device first (:meth:`Screen.fleet`), so the best are
    found early. Once ``keep`` strategies are simulated, each candidate that starts is told the
    rate it must beat: the ``keep``-th best goodput per device so far times its devices. Its first
    run is at that rate (``max_goodput(beat=...)``); missing the SLO there proves its goodput lower
    (the bisection's own premise: the SLO holds below the goodput and fails above it), so it is
    pruned with that reason after one run; meeting it, its goodput is searched exactly as the
    exhaustive search does. The best ``keep`` strategies and their goodputs are therefore the
    exhaustive search's; the strategies ranked below them are exact too, only fewer.

    The analytic bound orders, it does not prune: it is a steady-state rate, and a finite stream
    (its first requests decode in small batches while the load ramps up) may beat it (Pp1d-tp8
    decode pools of DeepSeek-V3 on H200 reach 1.23x their bound at 300 requests of 1,000 output
    tokens, benchmarks/results/optimize-wideep-64xh200.md).
    """

    def __init__(self, settings: GoodputSettings, candidates: list[Fleet], keep: int) -> None:
        screen = Screen(settings)
        self.keep = keep
        self.bounds = {c.name: screen.fleet(c) for c in candidates}
        #: the best goodputs per device simulated, best first, per architecture (is_disaggregated): the
        #: best ``keep`` of each are exact, so the ranking says which architecture wins
        self.top: dict[bool, list[tuple[float, str]]] = {False: [], True: []}
        self.pruned: list[Pruned] = []
        self.cut_sims = 0
        self._beat: dict[str, tuple[float, str]] = {}

    def order(self, cands: list[Fleet]) -> list[Fleet]:
        """Best bound per device first (ties, such as ``N`` copies of one instance: the fewest devices,
        the cheapest to simulate, then the name)."""
        return sorted(cands, key=lambda c: (-self.bounds[c.name] / c.num_devices, c.num_devices, c.name))

    def _which(self, arch: bool) -> str:
        pd, name = self.top[arch][self.keep - 1]
        rank = "the best" if self.keep == 1 else f"the {self.keep}th best"
        return f"{rank} {'disaggregated' if arch else 'collocated'} simulated, {pd:.3g} per device ({name})"

    def gate(self, cand: Fleet) -> float | None:
        """The rate ``cand`` must beat (the ``keep``-th best of its architecture), None while fewer
        than ``keep`` of its architecture are simulated."""
        top = self.top[cand.is_disaggregated]
        if len(top) < self.keep:
            return None
        self._beat[cand.name] = (top[self.keep - 1][0], self._which(cand.is_disaggregated))
        return top[self.keep - 1][0] * cand.num_devices

    def done(self, res: GoodputResult) -> bool:
        """Record a finished search; False when it was cut (then pruned with the reason)."""
        if res.method is GoodputMethod.CUT:
            self.cut_sims += res.num_simulations
            why = self._beat.get(res.name, (0.0, "the best simulated"))[1]
            self.pruned.append(Pruned(name=res.name, num_devices=res.candidate.num_devices, kind="bound",
                                      reason=f"{res.reason}: {why}; analytic bound "
                                             f"{self.bounds[res.name]:.3g} req/s", bound_rps=res.miss_rps))
            return False
        if res.status == GoodputStatus.OK and res.goodput_rps > 0:
            top = self.top[res.candidate.is_disaggregated]
            top.append((res.goodput_per_device, res.name))
            top.sort(key=lambda t: (-t[0], t[1]))
            del top[self.keep:]
        return True


@dataclass
class _Plan:
    settings: GoodputSettings
    fingerprint: str
    listing: SpaceListing
    results: dict[str, GoodputResult]
    resumed: int
    evaluated: int = 0
    done: dict[str, GoodputResult] = field(default_factory=dict)   # checkpointed records (fast search)
    fast: FastOutcome | None = None
    branch: _Brancher | None = None
    auto: str = ""          # method "auto": which method ranked the space, and why
    probe_sims: int = 0     # method "auto": simulations of a fast attempt dropped for the branch and bound


def search_many(space: SearchSpace, settings_list: list[GoodputSettings], **kwargs: Any) -> list[SearchResult]:
    """:func:`search` for several workloads (e.g. BestServe's op1-op4) sharing one pool of workers,
    so no core idles while another scenario finishes. Returns one result per settings, in order.
    ``on_progress(done, total)``, if given, is called after every finished evaluation."""
    opts = _Options.of(kwargs)
    jobs, backend, max_new, out_dir = opts.jobs, opts.backend, opts.max_new, opts.out_dir
    if backend == "ray" and kwargs.get("ray_address"):   # fail fast: before any work, whatever runs on Ray
        _check_ray_address(kwargs["ray_address"])
    exhaustive = opts.method in (SearchMethod.EXHAUSTIVE, SearchMethod.BOUNDED)
    confirm, target_rate = opts.confirm, opts.target_rate
    t0 = time.perf_counter()
    ckpt = None
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        ckpt = Path(out_dir) / CHECKPOINT
    plans: list[_Plan] = []
    todo: list[Task] = []
    for key, settings in enumerate(settings_list):
        listing = _listing(space, settings)
        fp = _fingerprint(settings)
        done = _load_checkpoint(ckpt, fp) if ckpt is not None else {}
        names = {c.name for c in listing.candidates}
        if not exhaustive and decomposable(settings):
            plans.append(_Plan(settings, fp, listing, {}, 0, done=done))
            continue
        results = {n: r for n, r in done.items() if n in names and r.method in _WHOLE}
        plan = _Plan(settings, fp, listing, results, len(results))
        plans.append(plan)
        cands = [c for c in listing.candidates if c.name not in results]
        if opts.method is SearchMethod.BOUNDED:
            if target_rate is not None:
                raise SpecError(f"target-rate={target_rate:g} ranks by fewest devices; the branch and bound "
                                "(method 'bounded', --keep) ranks by goodput per device: use one of them")
            plan.branch = _Brancher(settings, listing.candidates, opts.keep)
            for r in results.values():  # resumed: they already set the rate to beat
                plan.branch.done(r)
            cands = plan.branch.order(cands)
        todo += [(key, c, settings) for c in cands]
    if max_new is not None:
        todo = todo[:max_new]

    tracker = _Tracker(plans, ckpt, kwargs.get("on_progress"), opts.progress)
    on_done, settle, record = tracker.on_done, tracker.settle, tracker.record
    bar = tracker.bar
    auto = opts.method is SearchMethod.AUTO and target_rate is None and not opts.frontier

    try:
        for key, plan in enumerate(plans):
            if _is_fast(plan, exhaustive):
                plan.fast = fast_search(plan.listing.candidates, plan.settings, jobs=jobs, done=plan.done,
                                        on_record=record(plan), on_candidate=settle(plan), confirm=confirm,
                                        target_rate=target_rate, frontier=opts.frontier, strict=auto)
                plan.results = plan.fast.results
                if auto and max_new is None:
                    todo += _auto_fallback(key, plan, opts.keep)
                    if plan.branch is not None:
                        tracker.restart(plan)
        gate = tracker.gate if any(p.branch is not None for p in plans) else None
        if backend == "ray" and gate is None:
            _run_ray(todo, jobs, kwargs.get("ray_address"), on_done)
        else:  # method "bounded" starts each task once the results it must beat are known: local workers
            _run_local(todo, jobs, on_done, gate)
    finally:
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - t0
    return [dataclasses.replace(_finish(space, p, elapsed, target_rate, objective=opts.objective, prices=opts.prices,
                                        price_tier=opts.price_tier), top=opts.top) for p in plans]


class _Tracker:
    """Progress bar, progress callback and checkpoint appends of one :func:`search_many`."""

    def __init__(self, plans: list[_Plan], ckpt: Path | None, on_progress: Callable[[int, int], None] | None,
                 progress: bool) -> None:
        self.plans, self.ckpt, self.on_progress = plans, ckpt, on_progress
        self.total = sum(len(p.listing.candidates) for p in plans)
        self.bar: Any = None
        if progress:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, initial=sum(p.resumed for p in plans), desc="strategies",
                            unit="strategy", dynamic_ncols=True, leave=False)

    def restart(self, plan: _Plan) -> None:
        """Method "auto" fell back to the branch and bound: its candidates are counted again."""
        plan.evaluated = 0
        if self.bar is not None:
            self.bar.reset(total=self.total)
            self.bar.update(sum(p.evaluated + p.resumed for p in self.plans))

    def _tick(self, label: str | None) -> None:
        if self.bar is not None:
            if label:
                self.bar.set_postfix_str(label, refresh=False)
            self.bar.update(1)
        if self.on_progress is not None:
            self.on_progress(sum(p.evaluated + p.resumed for p in self.plans), self.total)

    def on_done(self, key: int, res: GoodputResult) -> None:
        """An exhaustive evaluation finished."""
        plan = self.plans[key]
        plan.evaluated += 1
        if plan.branch is not None and not plan.branch.done(res):
            self._tick(f"{res.name}: cut")  # not checkpointed: a rerun may have a lower rate to beat
            return
        plan.results[res.name] = res
        if self.ckpt is not None:
            _append_checkpoint(self.ckpt, plan.fingerprint, res)
        self._tick(f"{res.name}: {res.goodput_rps:.2f} req/s")

    def gate(self, task: Task) -> float | None:
        """Method "bounded": the rate the task must beat."""
        plan = self.plans[task[0]]
        return None if plan.branch is None else plan.branch.gate(task[1])

    def settle(self, plan: _Plan) -> Callable[[str], None]:
        """Fast search: a candidate was composed or pruned."""
        def tick(name: str) -> None:
            plan.evaluated += 1
            self._tick(None)
        return tick

    def record(self, plan: _Plan) -> Callable[[str, GoodputResult], None]:
        """Fast search: a pool measurement or confirmation to checkpoint."""
        def keep(key: str, res: GoodputResult) -> None:
            if self.ckpt is not None:
                _append_checkpoint(self.ckpt, plan.fingerprint, res, key)
            if self.bar is not None:
                self.bar.set_postfix_str(f"{key}: {res.goodput_rps:.2f} req/s", refresh=False)
        return keep


@dataclass(frozen=True, slots=True)
class _Options:
    """The keyword options of :func:`search_many`, checked."""

    jobs: int
    backend: str
    out_dir: str | Path | None
    progress: bool
    max_new: int | None
    method: SearchMethod
    confirm: int
    target_rate: float | None
    frontier: bool = False
    keep: int = KEEP
    top: int = 10
    objective: str = "goodput-per-device"
    prices: PriceTable | None = None
    price_tier: str = "on_demand"

    @staticmethod
    def of(kwargs: dict[str, Any]) -> _Options:
        jobs = kwargs.get("jobs")
        backend = kwargs.get("backend", "local")
        method = SearchMethod.parse(kwargs.get("method", SearchMethod.EXHAUSTIVE))
        confirm = int(kwargs.get("confirm", 3))
        target_rate = kwargs.get("target_rate")
        if target_rate is not None and not (isinstance(target_rate, (int, float)) and target_rate > 0):
            raise SpecError(f"target-rate={target_rate!r} must be a positive number of requests per second")
        if confirm < 1:
            raise SpecError(f"confirm={confirm} must be a positive integer")
        keep = kwargs.get("keep", KEEP)
        if not (isinstance(keep, int) and keep >= 1):
            raise SpecError(f"keep={keep!r} must be a positive integer (strategies ranked exactly)")
        if backend not in ("local", "ray"):
            raise SpecError(f"backend={backend!r}; expected one of: local, ray")
        if jobs is not None and jobs < 1:
            raise SpecError(f"jobs={jobs} must be a positive integer")
        objective = kwargs.get("objective") or "goodput-per-device"
        if objective not in OBJECTIVES:
            raise SpecError(f"objective={objective!r}; expected one of: {', '.join(OBJECTIVES)}")
        return _Options(jobs=jobs or os.cpu_count() or 1, backend=backend, out_dir=kwargs.get("out_dir"),
                        progress=kwargs.get("progress", True), max_new=kwargs.get("max_new_evaluations"),
                        method=method, confirm=confirm, target_rate=target_rate,
                        frontier=bool(kwargs.get("frontier", False)), keep=keep, top=int(kwargs.get("top", 10)),
                        objective=objective, prices=kwargs.get("prices"),
                        price_tier=kwargs.get("price_tier") or "on_demand")


def _listing(space: SearchSpace, settings: GoodputSettings) -> SpaceListing:
    """The candidates of ``space`` for ``settings``' workload; an error when none is left."""
    wl = settings.workload
    request_tokens = int(np.max(wl.input_lengths + wl.output_lengths))
    listing = enumerate_space(space, settings, request_tokens=request_tokens)
    multi_node = tuple(p for p in (2, 4, 8) if p * min(space.tp_sizes) <= space.devices)
    if (not listing.candidates and space.pp_sizes == (1,) and multi_node and listing.pruned
            and all(p.kind == "memory" for p in listing.pruned)):
        # a model larger than every single-stage layout: pipeline stages across nodes
        wider = enumerate_space(dataclasses.replace(space, pp_sizes=(1, *multi_node)), settings,
                                request_tokens=request_tokens)
        if wider.candidates:
            listing = wider
    if not listing.candidates:
        reasons = "; ".join(f"{p.name}: {p.reason}" for p in listing.pruned[:4]) or "no layout fits the budget"
        if listing.pruned and all(p.kind == "layout" for p in listing.pruned):
            raise SpecError(f"no admissible layout: {reasons}")
        where = f"{space.devices} x {settings.hardware.name}"
        if space.prefill_device is not None:
            where = f"{space.prefill_devices} x {space.prefill_device.name} (prefill) and {where} (decode)"
        raise InfeasibleError(f"no strategy fits {where}: {reasons}")
    return listing


def _assumptions(space: SearchSpace, settings: GoodputSettings, best: Fleet | None) -> dict[str, Any]:
    """What a search assumed, for every output: the engine (name, version, scheduler), the weight
    and KV formats its best plan runs with, the architectures asked for and the search lists."""
    eng = settings.engine
    spec = get_engine(eng) if isinstance(eng, str) else eng
    out: dict[str, Any] = {
        "engine": None if spec is None else {"name": spec.name, "engine": spec.engine, "version": spec.version,
                                             "scheduler": spec.scheduler},
        "architectures": [a for a, on in (("collocated", space.collocated), ("disaggregated", space.disaggregated))
                          if on],
        "space": {"tp": list(space.tp_sizes), "pp": list(space.pp_sizes), "dp": list(space.dp_sizes),
                  "ep": list(space.ep_sizes), "max_batches": list(space.max_batches),
                  "prefill_max_batch": space.prefill_max_batch, "schedulers": list(space.schedulers),
                  "chunk_sizes": list(space.chunk_sizes), "token_budget": space.token_budget},
    }
    if best is not None:
        dep = settings.deployment(best)
        out |= {"weight_dtype": dep.weight_dtype.value, "kv_dtype": dep.kv_dtype.value,
                "deployment": dep.to_dict()}
    return out


def _auto_fallback(key: int, plan: _Plan, keep: int) -> list[Task]:
    """Method "auto" after the fast search: keep it when its confirmations agree with their
    compositions; else drop the composed ranking and queue the branch and bound's tasks."""
    assert plan.fast is not None
    fast = plan.fast
    if not fast.disagreements:
        plan.auto = ("fast: every fleet simulated whole agreed with its composition from pool measurements, "
                     "so the composed ranking stands")
        return []
    plan.auto = ("bounded: the composition from pool measurements disagreed with the whole fleet ("
                 + "; ".join(fast.disagreements[:2]) + "), so its premise (pools independent, each in steady "
                 "state on its share of the stream) fails here and the branch and bound ranked every strategy")
    plan.probe_sims = fast.num_simulations
    plan.fast = None
    names = {c.name for c in plan.listing.candidates}
    plan.results = {n: r for n, r in plan.done.items() if n in names and r.method is GoodputMethod.WHOLE}
    plan.resumed = len(plan.results)
    plan.branch = _Brancher(plan.settings, plan.listing.candidates, keep)
    for r in plan.results.values():
        plan.branch.done(r)
    cands = plan.branch.order([c for c in plan.listing.candidates if c.name not in plan.results])
    return [(key, c, plan.settings) for c in cands]


def _is_fast(plan: _Plan, exhaustive: bool) -> bool:
    return not exhaustive and decomposable(plan.settings)


def _economics(settings: GoodputSettings, ok: list[GoodputResult], target_rate: float | None,
               prices: PriceTable | None, tier: str) -> dict[str, Economics]:
    """Cost and energy of every ranked strategy (:func:`~serveplan.optimize.economics.economics`)."""
    table = prices or bundled_prices()
    price = table.find(settings.hardware.name, tier)
    clocks = Clocks()

    def price_of(hardware: str) -> Price | None:
        return table.find(hardware, tier)

    return {r.name: economics(r, settings, price=price, target_rate=target_rate, clocks=clocks, price_of=price_of)
            for r in ok}


def _ranked(ok: list[GoodputResult], econ: dict[str, Economics], fast: bool, objective: str,
            target_rate: float | None, trusted_methods: tuple[GoodputMethod, ...] = (GoodputMethod.CONFIRMED,),
            ) -> list[GoodputResult]:
    """The strategies that met the SLO in ranking order: goodput per device (or the objective's
    $/Mtok or J/token, ties by goodput per device); with a target rate the fleets reaching it first
    (fewest devices first under goodput per device); after a fast search the best fleet simulated
    whole leads."""
    ok = sorted(ok, key=lambda r: (-r.goodput_per_device, -r.goodput_rps, r.candidate.num_devices, r.name))
    if objective != "goodput-per-device":
        # lowest $/Mtok (cost) or J/token (energy) first; ties by goodput per device (the order above)
        rank = {r.name: i for i, r in enumerate(ok)}
        ok.sort(key=lambda r: (econ[r.name].objective_value(objective), rank[r.name]))
    if target_rate is not None:
        by = {r.name: i for i, r in enumerate(ok)}
        if objective == "goodput-per-device":
            ok.sort(key=lambda r: (r.goodput_rps < target_rate, r.candidate.num_devices, -r.goodput_rps, r.name))
        else:   # the fleets reaching the target first, each group in the objective's order
            ok.sort(key=lambda r: (r.goodput_rps < target_rate, by[r.name]))
    if fast:
        # the fleets simulated whole come first: the best is a confirmed one
        def trusted(r: GoodputResult) -> bool:
            return r.method in trusted_methods and (target_rate is None or r.goodput_rps >= target_rate)

        head = [r for r in ok if trusted(r)][:1]
        ok = head + [r for r in ok if r not in head]
    return ok


def _finish(space: SearchSpace, plan: _Plan, elapsed: float, target_rate: float | None = None, *,
            objective: str = "goodput-per-device", prices: PriceTable | None = None,
            price_tier: str = "on_demand") -> SearchResult:
    settings, results, listing = plan.settings, plan.results, plan.listing
    wl = settings.workload
    ok = [r for r in results.values() if r.status == GoodputStatus.OK and r.goodput_rps > 0]
    rejected = [r for r in results.values() if not (r.status == GoodputStatus.OK and r.goodput_rps > 0)]
    econ = _economics(settings, ok, target_rate, prices, price_tier)
    ok = _ranked(ok, econ, plan.fast is not None, objective, target_rate)
    rejected.sort(key=lambda r: r.name)
    summary = {
        "model": settings.model.name, "hardware": settings.hardware.name, "profile": settings.profile.name,
        "workload": wl.name, "devices": space.devices,
        "slo": {"ttft_s": settings.slo.ttft_s, "tpot_s": settings.slo.tpot_s, "percentile": settings.slo.percentile},
        "relaxation": settings.relaxation, "slo_tolerance": settings.relaxation, "seeds": settings.seeds,
        "seed": settings.seed,
        "num_requests": len(wl.input_lengths), "fidelity": settings.fidelity.value,
        "num_candidates": len(listing.candidates),
        "method": (SearchMethod.FAST if plan.fast is not None else SearchMethod.BOUNDED if plan.branch is not None
                   else SearchMethod.EXHAUSTIVE).value,
    }
    pruned = list(listing.pruned)
    n_sims = sum(r.num_simulations for r in results.values())
    resumed = plan.resumed
    if plan.fast is not None:
        resumed = plan.fast.num_resumed
        pruned += plan.fast.pruned
        n_sims = plan.fast.num_simulations
        summary |= {"pool_measurements": plan.fast.num_units, "pruned_by_bound": len(plan.fast.pruned),
                    "confirmed": [r.name for r in ok if r.method is GoodputMethod.CONFIRMED],
                    "disagreements": list(plan.fast.disagreements)}
    if plan.branch is not None:
        pruned += plan.branch.pruned
        n_sims += plan.branch.cut_sims + plan.probe_sims
        summary |= {"pruned_by_bound": len(plan.branch.pruned), "keep": plan.branch.keep}
    if plan.auto:
        summary |= {"auto": plan.auto}
        if plan.probe_sims:
            summary |= {"fast_attempt_simulations": plan.probe_sims}
    if target_rate is not None:
        summary["target_rate"] = target_rate
    summary |= _assumptions(space, settings, ok[0].candidate if ok else None)
    held = [f"{r.name} at {', '.join(f'{x:.3g}' for x in r.nonstationary_rps)} req/s"
            for r in results.values() if r.nonstationary_rps]
    if held:
        summary["nonstationary_rejections"] = "; ".join(held[:4]) + (" ..." if len(held) > 4 else "")
    summary["objective"] = objective
    summary["planned_rate"] = ("the target rate (--target-rate), served by ceil(target / goodput) copies of each fleet"
                               if target_rate is not None else "each strategy's goodput")
    price = (prices or bundled_prices()).find(settings.hardware.name, price_tier)
    summary["price"] = None if price is None else price.to_dict()
    summary["price_tier"] = price_tier
    result = SearchResult(
        strategies=tuple(ok), rejected=tuple(rejected), pruned=tuple(pruned), pareto=pareto_front(ok),
        num_simulations=n_sims, num_evaluated=plan.evaluated,
        num_resumed=resumed, elapsed_s=elapsed, settings_summary=summary, economics=econ, objective=objective,
    )
    if target_rate is not None and not any(r.goodput_rps >= target_rate for r in ok):
        top = max(ok, key=lambda r: r.goodput_rps, default=None)
        best = f"; the most found is {top.goodput_rps:.3g} req/s ({top.name})" if top else ""
        raise InfeasibleError(f"no fleet of at most {space.devices} devices reaches the target rate "
                              f"{target_rate:g} req/s{best}; raise --devices")
    if (plan.fast is not None or len(results) == len(listing.candidates)) and not ok:
        why = "; ".join(f"{r.name}: {r.reason}" for r in rejected[:3])
        raise InfeasibleError(f"no strategy meets the SLO at any rate >= 0.1 req/s ({why})")
    return result


def merge_results(parts: list[SearchResult], *, target_rate: float | None = None,
                  summary: dict[str, Any] | None = None) -> SearchResult:
    """One ranking of several searches of one question: one per device type and one per pair of
    types for the mixed fleets (prefill pool on one type, decode on the other). Every strategy
    that met the SLO is ranked by the parts' objective as :func:`search` ranks (after a fast
    search, the best fleet simulated whole leads); the rejected and pruned ones, the cost and
    energy figures and the simulation counts are the parts' together. ``summary`` is merged over
    the first part's settings summary. One part is returned unchanged.
    """
    if not parts:
        raise ValueError("merge_results needs at least one search result")
    if len(parts) == 1:
        return parts[0]
    objective = parts[0].objective
    econ: dict[str, Economics] = {}
    ok: list[GoodputResult] = []
    for part in parts:
        econ |= part.economics
        ok += part.strategies
    fast = any(p.settings_summary.get("method") == SearchMethod.FAST.value for p in parts)
    ok = _ranked(ok, econ, fast, objective, target_rate, trusted_methods=_WHOLE)
    summaries = [p.settings_summary for p in parts]
    settings_summary = dict(summaries[0]) | {
        "num_candidates": sum(s.get("num_candidates", 0) for s in summaries),
        "pool_measurements": sum(s.get("pool_measurements", 0) for s in summaries),
        "confirmed": [n for s in summaries for n in s.get("confirmed", [])],
        "disagreements": [d for s in summaries for d in s.get("disagreements", [])]} | (summary or {})
    return SearchResult(
        strategies=tuple(ok), rejected=tuple(sorted((r for p in parts for r in p.rejected), key=lambda r: r.name)),
        pruned=tuple(x for p in parts for x in p.pruned), pareto=pareto_front(ok),
        num_simulations=sum(p.num_simulations for p in parts), num_evaluated=sum(p.num_evaluated for p in parts),
        num_resumed=sum(p.num_resumed for p in parts), elapsed_s=sum(p.elapsed_s for p in parts),
        settings_summary=settings_summary, top=parts[0].top, economics=econ, objective=objective)


def on_device(result: SearchResult, device: DeviceType) -> SearchResult:
    """``result`` with every fleet named with ``device`` (``2m@l40s-tp1-...``; pruned layouts
    ``... on l40s``): the ranking of one type among others (:func:`merge_results`), its numbers
    unchanged."""
    def tag(r: GoodputResult) -> GoodputResult:
        return dataclasses.replace(r, candidate=r.candidate.on_device(device))

    strategies = tuple(tag(r) for r in result.strategies)
    econ = {tag(r).name: dataclasses.replace(result.economics[r.name], name=tag(r).name)
            for r in result.strategies if r.name in result.economics}
    return dataclasses.replace(
        result, strategies=strategies, rejected=tuple(tag(r) for r in result.rejected),
        pruned=tuple(dataclasses.replace(p, name=f"{p.name} on {device.name}") for p in result.pruned),
        pareto=tuple(tag(r).name for r in result.strategies if r.name in result.pareto),
        economics=econ)
