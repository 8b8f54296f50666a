"""Search every strategy of a space, rank by normalized goodput, and build the Pareto view.

Evaluations are pure in ``(candidate, settings)``, so they run in parallel processes (default),
on a Ray cluster (``backend="ray"``), or in process (``jobs=1``). With an output directory every
finished evaluation is appended to ``checkpoint.jsonl`` at once; a search restarted with the same
directory and settings skips those, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from serveplan.errors import InfeasibleError, SpecError
from serveplan.optimize.goodput import GoodputResult, GoodputSettings, GoodputStatus, max_goodput
from serveplan.optimize.lifecycle import append_checkpoint, read_checkpoint, watch_parent
from serveplan.optimize.space import Pruned, SearchSpace, SpaceListing, enumerate_space
from serveplan.sim.fleet import Fleet

CHECKPOINT = "checkpoint.jsonl"


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

    @property
    def best(self) -> GoodputResult:
        return self.strategies[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": self.settings_summary,
            "strategies": [r.to_dict() | {"pareto": r.name in self.pareto} for r in self.strategies],
            "rejected": [r.to_dict() for r in self.rejected],
            "pruned": [p.to_dict() for p in self.pruned],
            "pareto": list(self.pareto),
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
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:16]


def _load_checkpoint(path: Path, fingerprint: str) -> dict[str, GoodputResult]:
    done: dict[str, GoodputResult] = {}
    for rec in read_checkpoint(path):  # partial and duplicate lines dropped (optimize.lifecycle)
        if rec.get("fingerprint") == fingerprint:
            done[rec["name"]] = GoodputResult.from_dict(rec["result"])
    return done


def _append_checkpoint(path: Path, fingerprint: str, res: GoodputResult) -> None:
    append_checkpoint(path, {"fingerprint": fingerprint, "name": res.name, "result": res.to_dict()})


def _evaluate(args: tuple[int, Fleet, GoodputSettings]) -> tuple[int, GoodputResult]:
    key, cand, settings = args
    return key, max_goodput(cand, settings)


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


def _run_local(todo: list[Task], jobs: int, on_done: Callable[[int, GoodputResult], None]) -> None:
    if jobs <= 1 or len(todo) <= 1:
        for key, c, st in todo:
            on_done(key, max_goodput(c, st))
        return
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait  # multiprocessing: only when used

    # slowest first (most requests to simulate, largest fleets), so the pool drains evenly
    def cost(t: Task) -> tuple[float, int]:
        wl = t[2].workload
        return -len(wl.input_lengths) * float(sum(wl.output_lengths[:64])), -t[1].num_devices

    order = sorted(todo, key=cost)
    # workers end with this process, even on SIGKILL (optimize.lifecycle.watch_parent)
    with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), initializer=watch_parent,
                             initargs=(os.getpid(),)) as pool:
        pending = {pool.submit(_evaluate, t) for t in order}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                on_done(*f.result())


def _run_ray(todo: list[Task], jobs: int, address: str | None,
             on_done: Callable[[int, GoodputResult], None]) -> None:
    if address:  # first: an unreachable head is the same answer with or without Ray installed
        _check_ray_address(address)
    try:
        import ray
    except ImportError:
        raise SpecError("backend='ray' needs Ray: pip install 'serveplan[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        kwargs: dict[str, Any] = {"ignore_reinit_error": True, "include_dashboard": False,
                                  "logging_level": "ERROR", "log_to_driver": False}
        if address:
            kwargs["address"] = address
        else:
            kwargs["num_cpus"] = max(1, jobs)
        try:
            ray.init(**kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise SpecError(f"ray-address={address!r}: could not connect ({str(exc).splitlines()[0]})") from None
    try:
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
    finally:
        if started_here and not address:
            ray.shutdown()


def pareto_front(results: Iterable[GoodputResult]) -> tuple[str, ...]:
    """Strategies no other beats on both goodput per device (higher) and mean latency (lower)."""
    pts = [(r.e2e_mean_s, r.goodput_per_device, r.name) for r in results if r.status == GoodputStatus.OK]
    front = []
    for lat, thr, name in pts:
        dominated = any((l2 <= lat and t2 >= thr) and (l2 < lat or t2 > thr) for l2, t2, _ in pts)
        if not dominated:
            front.append((lat, name))
    return tuple(n for _, n in sorted(front))


def search(space: SearchSpace, settings: GoodputSettings, *, jobs: int | None = None, backend: str = "local",
           ray_address: str | None = None, out_dir: str | Path | None = None, progress: bool = True,
           max_new_evaluations: int | None = None) -> SearchResult:
    """Evaluate every candidate of ``space`` and rank them by goodput per device.

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

    Raises
    ------
    InfeasibleError
        No candidate survives pruning, or none meets the SLO at any rate.
    """
    return search_many(space, [settings], jobs=jobs, backend=backend, ray_address=ray_address, out_dir=out_dir,
                       progress=progress, max_new_evaluations=max_new_evaluations)[0]


@dataclass
class _Plan:
    settings: GoodputSettings
    fingerprint: str
    listing: SpaceListing
    results: dict[str, GoodputResult]
    resumed: int
    evaluated: int = 0


def search_many(space: SearchSpace, settings_list: list[GoodputSettings], **kwargs: Any) -> list[SearchResult]:
    """:func:`search` for several workloads (e.g. BestServe's op1-op4) sharing one pool of workers,
    so no core idles while another scenario finishes. Returns one result per settings, in order.
    ``on_progress(done, total)``, if given, is called after every finished evaluation."""
    jobs = kwargs.get("jobs")
    backend = kwargs.get("backend", "local")
    out_dir = kwargs.get("out_dir")
    progress = kwargs.get("progress", True)
    max_new = kwargs.get("max_new_evaluations")
    if backend not in ("local", "ray"):
        raise SpecError(f"backend={backend!r}; expected one of: local, ray")
    if jobs is not None and jobs < 1:
        raise SpecError(f"jobs={jobs} must be a positive integer")
    jobs = jobs or os.cpu_count() or 1
    t0 = time.perf_counter()
    ckpt = None
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        ckpt = Path(out_dir) / CHECKPOINT
    plans: list[_Plan] = []
    todo: list[Task] = []
    for key, settings in enumerate(settings_list):
        wl = settings.workload
        request_tokens = int(np.max(wl.input_lengths + wl.output_lengths))
        listing = enumerate_space(space, settings.model, settings.hardware, settings.profile,
                                  request_tokens=request_tokens, dtype=settings.dtype)
        if not listing.candidates:
            reasons = "; ".join(f"{p.name}: {p.reason}" for p in listing.pruned[:4]) or "no layout fits the budget"
            if listing.pruned and all(p.kind == "layout" for p in listing.pruned):
                raise SpecError(f"no admissible layout: {reasons}")
            raise InfeasibleError(f"no strategy fits {space.devices} x {settings.hardware.name}: {reasons}")
        fp = _fingerprint(settings)
        done = _load_checkpoint(ckpt, fp) if ckpt is not None else {}
        names = {c.name for c in listing.candidates}
        results = {n: r for n, r in done.items() if n in names}
        plans.append(_Plan(settings, fp, listing, results, len(results)))
        todo += [(key, c, settings) for c in listing.candidates if c.name not in results]
    if max_new is not None:
        todo = todo[:max_new]

    on_progress = kwargs.get("on_progress")
    total_candidates = sum(len(p.listing.candidates) for p in plans)
    bar = None
    if progress:
        from tqdm import tqdm

        total = sum(len(p.listing.candidates) for p in plans)
        bar = tqdm(total=total, initial=sum(p.resumed for p in plans), desc="strategies", unit="strategy",
                   dynamic_ncols=True, leave=False)

    def on_done(key: int, res: GoodputResult) -> None:
        plan = plans[key]
        plan.results[res.name] = res
        plan.evaluated += 1
        if ckpt is not None:
            _append_checkpoint(ckpt, plan.fingerprint, res)
        if bar is not None:
            bar.set_postfix_str(f"{res.name}: {res.goodput_rps:.2f} req/s", refresh=False)
            bar.update(1)
        if on_progress is not None:
            on_progress(sum(p.evaluated + p.resumed for p in plans), total_candidates)

    try:
        if backend == "ray":
            _run_ray(todo, jobs, kwargs.get("ray_address"), on_done)
        else:
            _run_local(todo, jobs, on_done)
    finally:
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - t0
    return [_finish(space, p, elapsed) for p in plans]


def _finish(space: SearchSpace, plan: _Plan, elapsed: float) -> SearchResult:
    settings, results, listing = plan.settings, plan.results, plan.listing
    wl = settings.workload
    ok = [r for r in results.values() if r.status == GoodputStatus.OK and r.goodput_rps > 0]
    rejected = [r for r in results.values() if not (r.status == GoodputStatus.OK and r.goodput_rps > 0)]
    ok.sort(key=lambda r: (-r.goodput_per_device, -r.goodput_rps, r.candidate.num_devices, r.name))
    rejected.sort(key=lambda r: r.name)
    summary = {
        "model": settings.model.name, "hardware": settings.hardware.name, "profile": settings.profile.name,
        "workload": wl.name, "devices": space.devices,
        "slo": {"ttft_s": settings.slo.ttft_s, "tpot_s": settings.slo.tpot_s, "percentile": settings.slo.percentile},
        "relaxation": settings.relaxation, "seeds": settings.seeds, "seed": settings.seed,
        "num_requests": len(wl.input_lengths), "fidelity": settings.fidelity.value,
        "num_candidates": len(listing.candidates),
    }
    result = SearchResult(
        strategies=tuple(ok), rejected=tuple(rejected), pruned=tuple(listing.pruned), pareto=pareto_front(ok),
        num_simulations=sum(r.num_simulations for r in results.values()), num_evaluated=plan.evaluated,
        num_resumed=plan.resumed, elapsed_s=elapsed, settings_summary=summary,
    )
    if len(results) == len(listing.candidates) and not ok:
        why = "; ".join(f"{r.name}: {r.reason}" for r in rejected[:3])
        raise InfeasibleError(f"no strategy meets the SLO at any rate >= 0.1 req/s ({why})")
    return result
