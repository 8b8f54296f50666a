"""``sweep``: a grid of plan questions, each answered by one search, with one summary
(``serveplan sweep FILE.yaml``).

A sweep file names the options of ``serveplan optimize`` (:class:`~serveplan.commands.plan.PlanOptions`,
by option or field name: ``slo-ttft`` or ``slo_ttft``) that every question shares and the axes
whose every combination is one question::

    common:                 # options every question shares
      devices: 2
      tp: 1
      num_requests: 200
    grid:                   # the questions: every combination of the axes' values
      model: [llama-3.1-8b, qwen3-8b]
      hardware: [h100-sxm, a100-80g]
      slo:                  # a linked axis: each value sets several options together
        - {slo_ttft: 0.5, slo_tpot: 0.03}
        - {slo_ttft: 1.0, slo_tpot: 0.05}

An axis named after an option lists that option's values; any other name is a linked axis whose
values are mappings of options. A list given for a text option (``tp: [1, 2]`` in ``common``) is
its comma-separated form (``"1,2"``); in ``grid`` a list is an axis, so a list value there is
written as a list of lists. The options of the sweep itself (``jobs``, ``backend``,
``ray-address``, ``out``, ``deploy``) are not questions' options.

:func:`prepare` reads the file and checks every question whole (each value through the options'
own checks, then each question's search built: :func:`serveplan.commands.plan.prepare`) before
any work; a bad file raises :class:`~serveplan.errors.SpecError` naming the file, the key or
question, the value and what was expected. :func:`run` answers the questions, each one search in
one process (``jobs=1``): locally in a pool of worker processes that end with this one
(:func:`~serveplan.optimize.lifecycle.worker_pool`), or as Ray tasks (``backend="ray"``), which
Ray reruns on another node when their worker or node dies (``retries``). With ``out``, each
answer is written as it arrives to ``out/questions/KEY.json``, ``KEY`` a hash of the question's
options, so a rerun skips every question already answered; ``summary.csv`` and ``summary.json``
hold one row per question (per workload, when a question names several scenarios) with the
best plan, its goodput, goodput per device, dollars per million output tokens and per month.

A question's answer depends only on its options (the searches are seeded): the summary of a run
on Ray equals a local run's, whatever the order, retries and resumptions.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import itertools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from serveplan.commands import plan
from serveplan.commands.checks import MAX_JOBS
from serveplan.commands.options import CommandOptions, opt
from serveplan.errors import InfeasibleError, PlannerError, SpecError, check_int, suggest_names
from serveplan.optimize.lifecycle import worker_pool
from serveplan.optimize.search import SearchResult, ray_session
from serveplan.units import json_safe

#: options of ``serveplan optimize`` the sweep sets itself: how questions run and where answers go
SWEEP_OWN = frozenset({"jobs", "backend", "ray_address", "out", "deploy"})
#: top-level keys of a sweep file
FILE_KEYS = ("common", "grid")
#: most questions one sweep may hold (each is a whole search)
MAX_QUESTIONS = 10_000
#: the row of a question, after its grid values: the best plan and its economics
ROW_KEYS = ("workload", "status", "best", "devices", "goodput_rps", "goodput_per_device", "usd_per_mtok_output",
            "usd_per_month", "j_per_output_token", "ttft_p_s", "tpot_p_s", "reason")
#: folder of ``out`` holding one answer per question
QUESTIONS_DIR = "questions"


def bundled_sweeps() -> list[str]:
    """Names of the sweep files shipped with the package (``specs/data/sweeps``)."""
    d = resources.files("serveplan.specs").joinpath("data").joinpath("sweeps")
    return sorted(f.name[: -len(".yaml")] for f in d.iterdir() if f.name.endswith(".yaml"))


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepOptions(CommandOptions):
    """The sweep ``serveplan sweep`` runs (module doc)."""

    file: str | None = opt(None, "--file", argument=True, page=False, help=(
        "Sweep YAML: common options and grid axes of serveplan optimize's options (docs/sweep.md), or the name of "
        "a bundled sweep (small)."))
    jobs: int | None = opt(None, "--jobs", "-j", page=False, help=(
        "Questions answered at a time (default: all cores; Ray: this many CPUs of a Ray instance of its own)."))
    backend: str = opt("local", "--backend", page=False, help=(
        "local (worker processes) or ray (one task per question, rerun on another node when its node dies)."))
    ray_address: str | None = opt(None, "--ray-address", page=False, help=(
        "host:port of a Ray head (default: a local Ray instance of the run's own)."))
    retries: int = opt(3, "--retries", page=False, help=(
        "Ray: times a question is rerun when its worker or node dies."))
    out: Path | None = opt(None, "--out", page=False, help=(
        "Directory of one JSON answer per question (a rerun skips those answered), summary.csv and summary.json."))

    def __post_init__(self) -> None:
        if self.jobs is not None:
            check_int("jobs", self.jobs, low=1, high=MAX_JOBS, why="questions answered at a time")
        check_int("retries", self.retries, low=0, high=100, why="reruns of a question whose worker or node died")
        if self.backend not in ("local", "ray"):
            raise SpecError(f"backend={self.backend!r}; expected one of: local, ray")
        if self.ray_address is not None and self.backend != "ray":
            raise SpecError(f"ray-address={self.ray_address!r} needs --backend ray (backend={self.backend!r})")


@dataclass(frozen=True, slots=True, kw_only=True)
class Question:
    """One question of a sweep: its place, its grid values and its options."""

    index: int
    #: option field name -> value, for each option the grid sets (converted to the option's type)
    point: tuple[tuple[str, Any], ...]
    options: plan.PlanOptions

    @property
    def key(self) -> str:
        """A stable hash of the question's options (those not at their default), naming its answer."""
        return question_key(self.options)

    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.point) or "the common options"


def question_key(o: plan.PlanOptions) -> str:
    """16 hex digits of the SHA-256 of the options not at their default (by field name, values as
    text), so the same question gets the same key in every run and on every machine."""
    changed = {f.name: str(getattr(o, f.name)) for f in o.fields() if getattr(o, f.name) != f.default}
    return hashlib.sha256(json.dumps(changed, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedSweep:
    """A checked sweep: its questions in grid order, and the options its grid varies."""

    options: SweepOptions
    path: str
    questions: tuple[Question, ...]
    #: field names of the options the grid sets, in file order
    axes: tuple[str, ...]


def _read(o: SweepOptions) -> tuple[str, dict[str, Any]]:
    if not o.file:
        raise SpecError("file is missing; expected a sweep YAML path or a bundled sweep's name "
                        f"({', '.join(bundled_sweeps())})")
    path = Path(o.file)
    if not path.exists() and "/" not in o.file and not o.file.endswith((".yaml", ".yml")):
        if o.file in bundled_sweeps():
            d = resources.files("serveplan.specs").joinpath("data").joinpath("sweeps")
            return o.file, _parse_yaml(d.joinpath(f"{o.file}.yaml").read_text(), o.file)
        near = suggest_names(o.file, bundled_sweeps())
        raise SpecError(f"sweep file {o.file!r} does not exist and is no bundled sweep; bundled: "
                        f"{', '.join(bundled_sweeps())}" + (f" (did you mean {near[0]!r}?)" if near else ""))
    if not path.is_file():
        raise SpecError(f"sweep file {o.file!r} does not exist" + (" (it is a folder)" if path.is_dir() else "")
                        + "; expected a YAML file with common and grid")
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise SpecError(f"sweep file {o.file!r} is not text; expected a UTF-8 YAML file") from None
    return o.file, _parse_yaml(text, o.file)


def _parse_yaml(text: str, where: str) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"sweep file {where!r} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if raw is None or raw == {}:
        raise SpecError(f"sweep file {where!r} is empty; expected a mapping with the keys {', '.join(FILE_KEYS)}")
    if not isinstance(raw, dict):
        raise SpecError(f"sweep file {where!r} must hold a mapping with the keys {', '.join(FILE_KEYS)}; "
                        f"got {type(raw).__name__}")
    unknown = [k for k in raw if k not in FILE_KEYS]
    if unknown:
        raise SpecError(f"{where}: unknown key {unknown[0]!r}; expected: {', '.join(FILE_KEYS)}")
    for k in FILE_KEYS:
        if raw.get(k) is not None and not isinstance(raw[k], dict):
            raise SpecError(f"{where}: {k} must be a mapping of options to values; got {type(raw[k]).__name__}")
    return raw


def _allowed() -> list[str]:
    return [f.opt.name for f in plan.PlanOptions.fields() if f.name not in SWEEP_OWN]


def _option(name: Any, where: str) -> str:
    """The field name of the question option ``name`` (option or field name), or a SpecError."""
    if not isinstance(name, str):
        raise SpecError(f"{where}: key {name!r} is no option; expected one of: {', '.join(_allowed())}")
    try:
        f = plan.PlanOptions.field(name)
    except SpecError:
        near = suggest_names(name.replace("_", "-"), _allowed())
        raise SpecError(f"{where}: unknown option {name!r}" + (f" (did you mean {near[0]!r}?)" if near else "")
                        + f"; expected one of: {', '.join(_allowed())}") from None
    if f.name in SWEEP_OWN:
        raise SpecError(f"{where}: {name!r} is the sweep's own option, not a question's; give it to serveplan "
                        f"sweep (--{f.opt.name})" if f.name != "deploy" else
                        f"{where}: 'deploy' writes one plan's launch files; a sweep has no single plan (run "
                        "serveplan optimize --deploy on the question you choose)")
    return f.name


def _value(name: str, raw: Any, where: str) -> Any:
    """``raw`` as option ``name`` takes it, checked alone (its range, its type)."""
    f = plan.PlanOptions.field(name)
    if isinstance(raw, list) and f.kind is str:
        if any(isinstance(v, (list, dict)) for v in raw):
            raise SpecError(f"{where}: {f.opt.name}={raw!r}; expected a value or a list of values")
        raw = ",".join(str(v) for v in raw)
    elif isinstance(raw, (list, dict)):
        raise SpecError(f"{where}: {f.opt.name}={raw!r}; expected one value ({f.kind.__name__})")
    elif f.kind is str and isinstance(raw, (int, float)) and not isinstance(raw, bool):
        raw = str(raw)
    elif f.kind is str and isinstance(raw, bool):
        raise SpecError(f"{where}: {f.opt.name}={raw!r}; expected text (quote it in YAML)")
    try:
        return getattr(plan.PlanOptions.parse({name: raw}, blank_is_default=False), name)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


def _axes(grid: Mapping[Any, Any], where: str) -> list[list[dict[str, Any]]]:
    """Each axis as its list of settings (field name -> value)."""
    axes = []
    for axis, values in grid.items():
        here = f"{where}: grid.{axis}"
        if not isinstance(values, list) or not values:
            raise SpecError(f"{here}={values!r}; expected a non-empty list of values (one question each)")
        is_option = isinstance(axis, str)
        try:
            name = plan.PlanOptions.field(axis).name if is_option else ""
        except SpecError:
            is_option = False
        settings = []
        for i, v in enumerate(values):
            if is_option:
                settings.append({_option(axis, here): _value(name, v, f"{here}[{i}]")})
            elif isinstance(v, dict) and v:
                settings.append({_option(k, f"{here}[{i}]"): _value(_option(k, f"{here}[{i}]"), x, f"{here}[{i}]")
                                 for k, x in v.items()})
            else:
                near = suggest_names(str(axis).replace("_", "-"), _allowed())
                raise SpecError(f"{here}[{i}]={v!r}: {str(axis)!r} is no option"
                                + (f" (did you mean {near[0]!r}?)" if near else "")
                                + " and this value is no mapping of options (a linked axis, e.g. slo: [{slo_ttft: "
                                f"0.5, slo_tpot: 0.03}}]); options: {', '.join(_allowed())}")
        axes.append(settings)
    return axes


def prepare(o: SweepOptions) -> PreparedSweep:
    """Read ``o.file`` and check every question before any work (module doc). Raises
    :class:`SpecError` naming the file, the key or question, the value and what was expected."""
    where, raw = _read(o)
    common = {}
    for k, v in (raw.get("common") or {}).items():
        name = _option(k, f"{where}: common")
        common[name] = _value(name, v, f"{where}: common.{k}")
    axes = _axes(raw.get("grid") or {}, where)
    set_by: dict[str, str] = {}
    for axis, settings in zip((raw.get("grid") or {}), axes, strict=True):
        for name in dict.fromkeys(n for s in settings for n in s):
            if name in common:
                raise SpecError(f"{where}: option {name!r} is set in both common and grid.{axis}; expected one")
            if name in set_by and set_by[name] != axis:
                raise SpecError(f"{where}: option {name!r} is set by two axes, grid.{set_by[name]} and grid.{axis}; "
                                "expected one (link them in one axis of mappings)")
            set_by[name] = str(axis)
    total = 1
    for settings in axes:
        total *= len(settings)
    if total > MAX_QUESTIONS:
        raise SpecError(f"{where}: the grid holds {total:,} questions; expected at most {MAX_QUESTIONS:,} (each is a "
                        "whole search): split the sweep")
    questions: list[Question] = []
    seen: dict[str, int] = {}
    for i, combo in enumerate(itertools.product(*axes)):
        point: dict[str, Any] = {}
        for s in combo:
            point.update(s)
        q = Question(index=i, point=tuple(point.items()), options=_question(common, point, where, i, total))
        if q.key in seen:
            raise SpecError(f"{where}: question {i + 1} ({q.label()}) is the same question as question "
                            f"{seen[q.key] + 1}; expected distinct questions")
        seen[q.key] = i
        questions.append(q)
    return PreparedSweep(options=o, path=where, questions=tuple(questions), axes=tuple(set_by))


def _question(common: dict[str, Any], point: dict[str, Any], where: str, i: int, total: int) -> plan.PlanOptions:
    label = ", ".join(f"{k}={v}" for k, v in point.items()) or "the common options"
    try:
        q = plan.PlanOptions(**common, **point, jobs=1)
        plan.prepare(q)   # the whole question: names, sizes, the search space, prices
    except SpecError as exc:
        raise SpecError(f"{where}: question {i + 1} of {total} ({label}): {exc}") from None
    except InfeasibleError:
        pass   # a well-posed question without an answer (nothing fits): its row says so
    return q


def answer(o: plan.PlanOptions) -> dict[str, Any]:
    """One question answered in this process: its record (the key, the options, the command line
    that reproduces it, one row per workload, the whole answer as ``serveplan optimize --json``
    prints it, and the time it took). A question no fleet can answer is a row with status
    ``infeasible`` and the reason."""
    t0 = time.perf_counter()
    document: dict[str, Any] | None
    try:
        result = plan.run(o, launch_files=False)
    except InfeasibleError as exc:
        rows = [_row(None, None, str(exc))]
        document = None
    else:
        rows = [_row(wl.name, res) for wl, res in zip(result.prepared.workloads, result.results, strict=True)]
        document = json_safe(result.document())
    return {"key": question_key(o), "options": {k: str(v) for k, v in o.changed().items() if k != "jobs"},
            "command": o.command_line("optimize"), "rows": json_safe(rows), "document": document,
            "elapsed_s": time.perf_counter() - t0}


def _row(workload: str | None, res: SearchResult | None, reason: str = "") -> dict[str, Any]:
    if res is None:
        return {**dict.fromkeys(ROW_KEYS), "workload": workload, "status": "infeasible", "reason": reason}
    best = res.best
    ce = res.cost_energy(best.name)
    return {"workload": workload, "status": "ok", "best": best.name, "devices": best.candidate.num_devices,
            "goodput_rps": best.goodput_rps, "goodput_per_device": best.goodput_per_device,
            "usd_per_mtok_output": ce["usd_per_mtok_output"], "usd_per_month": ce["usd_per_month"],
            "j_per_output_token": ce["j_per_output_token"], "ttft_p_s": best.ttft_p, "tpot_p_s": best.tpot_p,
            "reason": best.reason or None}


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepResult:
    """The answers of a sweep, in grid order, and how the run went."""

    prepared: PreparedSweep
    #: one record per question (:func:`answer`), in grid order
    records: tuple[dict[str, Any], ...]
    num_run: int
    num_resumed: int
    elapsed_s: float
    files: tuple[Path, ...] = field(default_factory=tuple)

    def rows(self) -> list[dict[str, Any]]:
        """The summary: per question (per workload) its number, key, grid values and
        :data:`ROW_KEYS`. It holds no timing, so equal questions give equal rows in any run."""
        out = []
        for q, rec in zip(self.prepared.questions, self.records, strict=True):
            point: dict[str, Any] = dict.fromkeys(self.prepared.axes)   # a linked axis may set some of them
            point.update((k, v if isinstance(v, (int, float, str, bool)) or v is None else str(v)) for k, v in q.point)
            for row in rec["rows"]:
                out.append({"question": q.index + 1, "key": q.key, **point, **row})
        safe: list[dict[str, Any]] = json_safe(out)
        return safe

    def document(self) -> dict[str, Any]:
        """What ``serveplan sweep --json`` prints: the summary rows, and the run's counts and time."""
        o = self.prepared.options
        return {"file": self.prepared.path, "command": o.command_line("sweep"), "backend": o.backend,
                "num_questions": len(self.records), "num_run": self.num_run, "num_resumed": self.num_resumed,
                "axes": list(self.prepared.axes), "rows": self.rows(), "elapsed_s": self.elapsed_s,
                "files": [str(p) for p in self.files]}


def run(o: SweepOptions | PreparedSweep, *, on_progress: Callable[[int, int], None] | None = None) -> SweepResult:
    """Answer every question not answered yet in ``out`` (module doc); ``on_progress(done, total)``
    is called once at the start and per question answered.

    Raises
    ------
    SpecError
        A bad file, an unreachable Ray head, or Ray not installed, before any question runs.
    PlannerError
        A question's Ray task failed even after its retries (what is answered stays in ``out``).
    """
    t0 = time.perf_counter()
    prep = o if isinstance(o, PreparedSweep) else prepare(o)
    opts = prep.options
    qdir = opts.out / QUESTIONS_DIR if opts.out is not None else None
    if qdir is not None:
        qdir.mkdir(parents=True, exist_ok=True)
    answered = {q.key: rec for q in prep.questions if (rec := _load(qdir, q.key)) is not None}
    resumed = len(answered)
    todo = [q for q in prep.questions if q.key not in answered]
    total = len(prep.questions)
    if on_progress is not None:
        on_progress(len(answered), total)

    def done(q: Question, rec: dict[str, Any]) -> None:
        answered[q.key] = rec
        if qdir is not None:
            _write_json(qdir / f"{q.key}.json", rec)
        if on_progress is not None:
            on_progress(len(answered), total)

    if todo:
        if opts.backend == "ray":
            _run_ray(todo, opts, done)
        else:
            _run_local(todo, opts.jobs or os.cpu_count() or 1, done)
    result = SweepResult(prepared=prep, records=tuple(answered[q.key] for q in prep.questions), num_run=len(todo),
                         num_resumed=resumed, elapsed_s=time.perf_counter() - t0)
    if opts.out is None:
        return result
    files = (write_summary_csv(result, opts.out / "summary.csv"), opts.out / "summary.json")
    result = SweepResult(prepared=prep, records=result.records, num_run=result.num_run, num_resumed=resumed,
                         elapsed_s=result.elapsed_s, files=files)
    _write_json(opts.out / "summary.json", result.document())
    return result


def _load(qdir: Path | None, key: str) -> dict[str, Any] | None:
    """The answer recorded for ``key``, or None (none, or a file that is not a whole answer)."""
    if qdir is None:
        return None
    try:
        rec = json.loads((qdir / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and rec.get("key") == key and isinstance(rec.get("rows"), list) else None


def _write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as strict JSON atomically (a kill leaves the old file or the new one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(json_safe(obj), indent=1, allow_nan=False))
    os.replace(tmp, path)


def write_summary_csv(result: SweepResult, path: Path) -> Path:
    """The summary rows as CSV (one row per question and workload; empty cells: no value)."""
    cols = ["question", "key", *result.prepared.axes, *ROW_KEYS]
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for row in result.rows():
            w.writerow({k: "" if row.get(k) is None else row[k] for k in cols})
    return path


def _run_local(todo: list[Question], jobs: int, done: Callable[[Question, dict[str, Any]], None]) -> None:
    if jobs <= 1 or len(todo) <= 1:
        for q in todo:
            done(q, answer(q.options))
        return
    from concurrent.futures import FIRST_COMPLETED, wait

    # workers end with this process, even on SIGKILL (optimize.lifecycle.worker_pool)
    with worker_pool(min(jobs, len(todo))) as pool:
        pending = {pool.submit(answer, q.options): q for q in todo}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                q = pending.pop(f)
                try:
                    rec = f.result()
                except SpecError as exc:   # an input only the run could see (a file gone since the check)
                    for other in pending:
                        other.cancel()
                    raise SpecError(f"question {q.index + 1} ({q.label()}): {exc}") from None
                done(q, rec)


def _run_ray(todo: list[Question], opts: SweepOptions, done: Callable[[Question, dict[str, Any]], None]) -> None:
    with _ray(opts) as ray:
        # a task whose worker or node dies is rerun elsewhere; an error raised by the question is not
        remote = ray.remote(num_cpus=1, max_retries=opts.retries, retry_exceptions=False)(answer)
        pending = {remote.remote(q.options): q for q in todo}
        while pending:
            finished, _ = ray.wait(list(pending), num_returns=1)
            for ref in finished:
                q = pending.pop(ref)
                try:
                    rec = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    for other in pending:
                        ray.cancel(other, force=True)
                    raise _ray_failure(q, exc, opts) from None
                done(q, rec)


def _ray_failure(q: Question, exc: Exception, opts: SweepOptions) -> Exception:
    """What a question's failed task raises: the question's own input error (``SpecError``, one
    line), a bug as Ray reports it (with its traceback), or, when the worker or node was lost more
    often than ``retries`` allow, a one-line :class:`PlannerError`."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, SpecError):
        return SpecError(f"question {q.index + 1} ({q.label()}): {cause}")
    if cause is not None:   # raised by the question itself (not retried): a bug keeps its traceback
        return exc
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return PlannerError(f"question {q.index + 1} ({q.label()}) failed on Ray after {opts.retries} retries: "
                        f"{type(exc).__name__}: {first}"
                        + ("; rerun with the same --out to resume" if opts.out is not None else ""))


@contextlib.contextmanager
def _ray(opts: SweepOptions) -> Iterator[Any]:
    """Ray for one sweep: :func:`~serveplan.optimize.search.ray_session`, disconnected after when
    this sweep connected to a running cluster."""
    mod = sys.modules.get("ray")
    connected_before = mod is not None and mod.is_initialized()
    with ray_session(opts.jobs or os.cpu_count() or 1, opts.ray_address) as ray:
        connected_here = opts.ray_address is not None and not connected_before
        try:
            yield ray
        finally:
            if connected_here:
                ray.shutdown()
