"""The whole validation (``serveplan validate``): every bundled measured row predicted out of the box
(:mod:`~serveplan.validate.mapping`), the errors grouped by kind, engine, source, accelerator and
model class, and the confidence bands checked with each row's own source left out.

What is held out, and how: no prediction is fitted or chosen on these rows (no simulator
constant was set from them; the pages of ``docs/validation/`` say which constants were chosen on
which other data), so the predictions need no split. The one thing chosen on these rows is the
confidence band (:mod:`~serveplan.validate.confidence`): its residuals are these rows'. Its
calibration is therefore measured leave-one-source-out: each row's band is drawn from the rows of
every other source, and the share of measured values inside their band is reported per kind. A
subset (``--source``, ``--engine``, ``--kind``) draws its bands from its own rows only.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from serveplan.optimize.lifecycle import worker_pool
from serveplan.validate.confidence import (
    BANDED_KINDS,
    RESIDUAL_FILES,
    Band,
    Query,
    Residual,
    band_for,
    bundled_table,
    loso_bands,
)
from serveplan.validate.mapping import Unmappable, predict, simulation_key
from serveplan.validate.rows import MeasuredRow, load_rows

#: what the output and the docs say is held out
HELD_OUT = ("No value in the predictions is fitted on these rows, so they need no split. Five mapping rules were "
            "written after residuals of these rows had been seen (2026-11), each following what the source states "
            "or what its benchmark tool does, with no value chosen: ShareGPT runs drawn from vLLM's own ShareGPT "
            "sample (scaled to the printed means) instead of fixed mean lengths, a rate of inf sent to the server "
            "(its online defaults and API-server work) instead of queued offline, ITL over tokens instead of TPOT, "
            "vLLM's --async-scheduling read from the serving script, and result blocks printed for two "
            "accelerators used for neither; on the 2,143 rows mapped before and after, the median error went from "
            "42.5% to 34.9% (mapping.py says which rule did what). The "
            "confidence bands are drawn from these rows' residuals: their coverage is measured "
            "leave-one-source-out, each row's band drawn from the other sources' rows only.")
#: the groupings of the tables, in order: (key, title)
GROUPS = (("kind", "kind"), ("engine", "engine"), ("source", "source"), ("hardware", "accelerator"),
          ("model_class", "model class"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """One row: its prediction and error, or why it was not mapped (``reason``)."""

    row: MeasuredRow
    predicted: float | None = None
    regime: str = ""
    family: str = ""
    model_class: str = ""
    context_tokens: float = 0.0
    how: str = ""
    notes: tuple[str, ...] = ()
    reason: str = ""
    seconds: float = 0.0
    band: Band | None = None          # leave-one-source-out band (banded kinds only)

    @property
    def mapped(self) -> bool:
        return self.predicted is not None

    @property
    def error(self) -> float:
        """``predicted / measured - 1``."""
        assert self.predicted is not None
        return self.predicted / self.row.value - 1.0

    @property
    def ratio(self) -> float:
        """``measured / predicted``: what a band multiplies the prediction by."""
        assert self.predicted is not None
        return self.row.value / self.predicted

    def residual(self) -> Residual:
        r = self.row
        return Residual(key=r.key, source=r.publisher, engine=r.engine_family, family=self.family,
                        model_class=self.model_class, kind=r.kind, regime=self.regime,
                        context_tokens=self.context_tokens, log_ratio=math.log(self.ratio))

    def query(self) -> Query:
        return Query(engine=self.row.engine_family, family=self.family, model_class=self.model_class,
                     kind=self.row.kind, regime=self.regime, context_tokens=self.context_tokens)

    def group(self, key: str) -> str:
        r = self.row
        return {"kind": r.kind, "engine": r.engine, "source": r.source, "hardware": r.hardware,
                "model_class": self.model_class}[key]

    def to_dict(self) -> dict[str, Any]:
        r = self.row
        d: dict[str, Any] = {"key": r.key, "source": r.source, "id": r.id, "kind": r.kind, "metric": r.metric,
                             "statistic": r.statistic, "unit": r.unit, "model": r.model, "hardware": r.hardware,
                             "engine": r.engine, "measured": r.value}
        if not self.mapped:
            return d | {"reason": self.reason}
        d |= {"predicted": self.predicted, "error": self.error, "regime": self.regime, "family": self.family,
              "model_class": self.model_class, "context_tokens": self.context_tokens, "how": self.how,
              "notes": list(self.notes), "seconds": self.seconds}
        if self.band is not None:
            d["band"] = self.band.of(self.predicted) | {"contains_measured": self.band.contains(self.ratio)}
        return d


def _run_one(row: MeasuredRow, sims: dict[str, Any] | None = None) -> Outcome:
    t0 = time.perf_counter()
    try:
        p = predict(row, sims=sims)
    except Unmappable as exc:
        return Outcome(row=row, reason=str(exc), seconds=time.perf_counter() - t0)
    except Exception as exc:  # the tool refused a mapped row: reported with the row, never dropped
        return Outcome(row=row, reason=f"the tool refused it: {type(exc).__name__}: {exc}"[:400],
                       seconds=time.perf_counter() - t0)
    return Outcome(row=row, predicted=p.value, regime=p.regime, family=p.family, model_class=p.model_class,
                   context_tokens=p.context_tokens, how=p.how, notes=p.notes, seconds=time.perf_counter() - t0)


def _run_group(rows: Sequence[MeasuredRow]) -> list[Outcome]:
    """Rows of one simulation (:func:`~serveplan.validate.mapping.simulation_key`), simulated once."""
    sims: dict[str, Any] = {}
    return [_run_one(r, sims) for r in rows]


def predict_rows(rows: Sequence[MeasuredRow], *, jobs: int | None = None,
                 on_progress: Callable[[int, int], None] | None = None) -> list[Outcome]:
    """Every row predicted, in order; ``jobs`` processes (default: the CPUs). Rows that share a simulation
    (:func:`~serveplan.validate.mapping.simulation_key`: the figures of one run) go to one process, which
    simulates once."""
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(rows) or 1))
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(simulation_key(r), []).append(i)
    order = list(groups.values())
    tasks = [[rows[i] for i in g] for g in order]
    placed: list[Outcome | None] = [None] * len(rows)
    done = 0

    def take(results: Iterable[list[Outcome]]) -> None:
        nonlocal done
        for idx, outcomes in zip(order, results, strict=True):
            for i, o in zip(idx, outcomes, strict=True):
                placed[i] = o
            done += len(idx)
            if on_progress:
                on_progress(done, len(rows))

    if jobs == 1:
        take(map(_run_group, tasks))
    else:
        with worker_pool(jobs) as ex:   # its workers end with this process, SIGKILL included
            take(ex.map(_run_group, tasks, chunksize=1))
    return [o for o in placed if o is not None]


def with_loso_bands(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """Each mapped row of a banded kind with its band from the other sources' rows (a source's group,
    :attr:`~serveplan.validate.rows.MeasuredRow.group`, is left out whole)."""
    residuals = [o.residual() for o in outcomes if o.mapped and o.row.kind in BANDED_KINDS]
    return [replace(o, band=band_for(o.query(), residuals, exclude_source=o.row.publisher))
            if o.mapped and o.row.kind in BANDED_KINDS else o for o in outcomes]


@dataclass(frozen=True, slots=True)
class Stats:
    """Accuracy of a group of rows."""

    rows: int
    sources: int
    median_abs_error: float
    bias: float                  # median of predicted / measured - 1
    within_25: float
    within_2x: float

    @staticmethod
    def of(outcomes: Sequence[Outcome]) -> Stats:
        errs = [o.error for o in outcomes]
        if not errs:
            return Stats(0, 0, math.nan, math.nan, math.nan, math.nan)
        groups = len({o.row.publisher for o in outcomes})
        return Stats(len(errs), groups, statistics.median(abs(e) for e in errs), statistics.median(errs),
                     sum(abs(e) <= 0.25 for e in errs) / len(errs),
                     sum(0.5 <= 1 + e <= 2.0 for e in errs) / len(errs))

    def to_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "sources": self.sources, "median_abs_error": self.median_abs_error,
                "bias": self.bias, "within_25pct": self.within_25, "within_2x": self.within_2x}


@dataclass(frozen=True, slots=True)
class Coverage:
    """Leave-one-source-out calibration of the bands of one kind."""

    kind: str
    banded: int          # rows with a band from other sources
    inside: int          # measured value inside its P10-P90 band
    extrapolated: int    # rows whose other sources give no comparable band

    @property
    def share(self) -> float:
        return self.inside / self.banded if self.banded else math.nan

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "banded": self.banded, "inside": self.inside, "coverage": self.share,
                "extrapolated": self.extrapolated}


def goodput_coverage() -> list[Coverage]:
    """The bands' leave-one-source-out coverage on the goodput check's bundled residuals, per kind
    (``goodput-residuals.json``, written by ``benchmarks/validate_goodput.py --write-residuals``:
    its highest SLO-bounded rates take minutes each, so ``validate`` reads their residuals rather
    than rerunning them; besides goodput, the TTFT and TPOT its MLPerf Server rows print at the
    measured rate); none when the table is absent."""
    out = []
    pairs = loso_bands(bundled_table(RESIDUAL_FILES[1]))
    for kind in BANDED_KINDS:
        mine = [(r, b) for r, b in pairs if r.kind == kind]
        if not mine:
            continue
        banded = [(r, b) for r, b in mine if not b.extrapolated]
        inside = sum(1 for r, b in banded if b.contains(math.exp(r.log_ratio)))
        out.append(Coverage(kind, len(banded), inside, len(mine) - len(banded)))
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationReport:
    """The validation's answer: every row's outcome, the grouped accuracy and the band coverage."""

    outcomes: tuple[Outcome, ...]
    seconds: float
    jobs: int
    filters: dict[str, Any] = field(default_factory=dict)

    @property
    def mapped(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.mapped]

    @property
    def unmapped(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.mapped]

    def overall(self) -> Stats:
        return Stats.of(self.mapped)

    def table(self, key: str) -> list[tuple[str, Stats]]:
        """Accuracy per value of ``key`` (``kind``, ``engine``, ``source``, ``hardware``, ``model_class``)."""
        groups: dict[str, list[Outcome]] = {}
        for o in self.mapped:
            groups.setdefault(o.group(key), []).append(o)
        return sorted(((k, Stats.of(v)) for k, v in groups.items()), key=lambda kv: (-kv[1].rows, kv[0]))

    def coverage(self) -> list[Coverage]:
        out = []
        for kind in BANDED_KINDS:
            rows = [o for o in self.mapped if o.row.kind == kind and o.band is not None]
            if not rows:
                continue
            banded = [o for o in rows if o.band is not None and not o.band.extrapolated]
            inside = sum(1 for o in banded if o.band is not None and o.band.contains(o.ratio))
            out.append(Coverage(kind, len(banded), inside, len(rows) - len(banded)))
        if not self.filters:   # the goodput check's rows (open loop) join their kind's count
            mine = {c.kind: c for c in out}
            for c in goodput_coverage():
                have = mine.get(c.kind)
                mine[c.kind] = c if have is None else Coverage(c.kind, have.banded + c.banded, have.inside + c.inside,
                                                               have.extrapolated + c.extrapolated)
            out = [mine[k] for k in BANDED_KINDS if k in mine]
        return out

    def residuals(self) -> list[Residual]:
        """The residual table the bands of ``simulate``, ``optimize`` and ``estimate`` read."""
        return [o.residual() for o in self.mapped if o.row.kind in BANDED_KINDS]

    def unmapped_reasons(self) -> list[tuple[str, int]]:
        counts: dict[str, int] = {}
        for o in self.unmapped:
            counts[o.reason] = counts.get(o.reason, 0) + 1
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))

    def to_dict(self) -> dict[str, Any]:
        return {"summary": {"rows": len(self.outcomes), "mapped": len(self.mapped), "unmapped": len(self.unmapped),
                            "accuracy": self.overall().to_dict(), "seconds": self.seconds, "jobs": self.jobs},
                "filters": self.filters, "held_out": HELD_OUT,
                "tables": {key: [{"group": k, **s.to_dict()} for k, s in self.table(key)] for key, _ in GROUPS},
                "band_coverage": [c.to_dict() for c in self.coverage()],
                "rows": [o.to_dict() for o in self.mapped],
                "unmapped": [o.to_dict() for o in self.unmapped]}


def select_rows(rows: Iterable[MeasuredRow], *, sources: Sequence[str] = (), engines: Sequence[str] = (),
                kinds: Sequence[str] = ()) -> list[MeasuredRow]:
    """The rows of the given sources, engines (``other`` for the unmodelled ones) and kinds (empty: all)."""
    return [r for r in rows if (not sources or r.source in sources) and (not engines or r.engine_family in engines)
            and (not kinds or r.kind in kinds)]


def run_validation(rows: Sequence[MeasuredRow] | None = None, *, jobs: int | None = None,
                   on_progress: Callable[[int, int], None] | None = None,
                   filters: dict[str, Any] | None = None) -> ValidationReport:
    """Predict ``rows`` (default: every bundled row), attach the leave-one-source-out bands and
    group the errors (module doc)."""
    rows = list(load_rows() if rows is None else rows)
    t0 = time.perf_counter()
    n_jobs = max(1, min(jobs or os.cpu_count() or 1, len(rows) or 1))
    outcomes = with_loso_bands(predict_rows(rows, jobs=n_jobs, on_progress=on_progress))
    return ValidationReport(outcomes=tuple(outcomes), seconds=time.perf_counter() - t0, jobs=n_jobs,
                            filters=dict(filters or {}))
