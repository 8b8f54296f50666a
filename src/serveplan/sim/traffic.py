"""Traffic over time: a request rate per interval, and Poisson arrivals that follow it.

A :class:`RateSeries` is a piecewise-constant rate: ``rates[i]`` requests per second over
``[i * interval_s, (i + 1) * interval_s)``. It comes from one of three sources
(:func:`load_traffic`):

* a file: a CSV with a header ``time_s,rate_rps`` (the rate of row ``k`` holds from its
  ``time_s`` to the next row's; the last row for as long as the row before it), or request
  timestamps in seconds, one per line (counted per interval);
* a bundled public trace's arrival process (``azure-conv-2023``, ``azure-code-2023``: requests
  per minute of the Azure LLM inference trace 2023; ``servegen-m-large-week``: requests per 600 s
  window of ServeGen's model m-large over a week; ``specs/data/traffic``);
* the named shape ``diurnal``: ``rate(t) = trough + (peak - trough) * (1 + cos(2 pi (t - t_peak)
  / 24 h)) / 2``, the rate at each interval's midpoint (one smooth daily cycle, highest at
  ``peak_hour``, lowest twelve hours away).

Any source is averaged onto the plan's intervals (time-weighted: the integral of the step function
over each interval, divided by its length); whole intervals only, so a partial last interval is
dropped.

Arrivals: :func:`poisson_arrivals` draws a non-homogeneous Poisson process whose rate is constant
on each piece of a partition: on each piece, a Poisson number of requests with mean rate x length,
placed uniformly (exact for a piecewise-constant rate, so no thinning is needed), seeded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from serveplan.errors import SpecError, check_int, check_number
from serveplan.specs.catalog import get_traffic, list_traffic

#: the named shapes of :func:`load_traffic`
SHAPES = ("diurnal",)
DAY_S = 86400.0


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class RateSeries:
    """Requests per second per interval (module doc)."""

    interval_s: float
    rates: np.ndarray
    name: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        check_number("interval", self.interval_s, low=0, low_open=True, unit="seconds")
        r = np.asarray(self.rates, dtype=float)
        if r.ndim != 1 or r.size == 0:
            raise SpecError(f"traffic {self.name!r}: expected at least one interval of rates, got {r.size}")
        bad = ~np.isfinite(r) | (r < 0)
        if np.any(bad):
            i = int(np.argmax(bad))
            raise SpecError(f"traffic {self.name!r}: rate[{i}]={r[i]!r} must be a finite number >= 0 (req/s)")
        r.setflags(write=False)
        object.__setattr__(self, "rates", r)

    @property
    def num_intervals(self) -> int:
        return int(self.rates.size)

    @property
    def edges(self) -> np.ndarray:
        """Interval boundaries (s), ``num_intervals + 1`` of them."""
        return np.arange(self.num_intervals + 1, dtype=float) * self.interval_s

    @property
    def duration_s(self) -> float:
        return self.num_intervals * self.interval_s

    @property
    def peak_rps(self) -> float:
        return float(self.rates.max())

    @property
    def mean_rps(self) -> float:
        return float(self.rates.mean())

    def scaled(self, factor: float) -> RateSeries:
        """Every rate times ``factor``."""
        check_number("traffic-scale", factor, low=0, low_open=True)
        if factor == 1.0:
            return self
        return RateSeries(interval_s=self.interval_s, rates=self.rates * factor, name=f"{self.name} x{factor:g}",
                          source=self.source)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "interval_s": self.interval_s,
                "num_intervals": self.num_intervals, "duration_s": self.duration_s, "peak_rps": self.peak_rps,
                "mean_rps": self.mean_rps, "rates_rps": self.rates.tolist()}


def step_average(edges: np.ndarray, rates: np.ndarray, interval_s: float, *, name: str = "",
                 source: str = "") -> RateSeries:
    """The step function ``rates[k]`` on ``[edges[k], edges[k+1])`` averaged onto whole intervals of
    ``interval_s`` from ``edges[0]`` (module doc)."""
    e = np.asarray(edges, dtype=float) - float(edges[0])
    span = float(e[-1])
    n = int(math.floor(span / interval_s + 1e-9))
    if n < 1:
        raise SpecError(f"traffic {name!r} spans {span:g} s, shorter than one interval of {interval_s:g} s; "
                        "give a shorter --interval or a longer trace")
    cum = np.concatenate([[0.0], np.cumsum(np.asarray(rates, dtype=float) * np.diff(e))])
    new = np.arange(n + 1, dtype=float) * interval_s
    integral = np.interp(new, e, cum)
    return RateSeries(interval_s=interval_s, rates=np.diff(integral) / interval_s, name=name, source=source)


def diurnal(peak: float, trough: float, *, interval_s: float = 300.0, days: int = 1,
            peak_hour: float = 14.0) -> RateSeries:
    """The ``diurnal`` shape (module doc): ``days`` days at ``interval_s``, highest at ``peak_hour``."""
    check_number("peak", peak, low=0, low_open=True, unit="requests per second")
    check_number("trough", trough, low=0, high=peak, unit="requests per second", why="at most the peak")
    check_int("days", days, low=1, high=366)
    check_number("peak-hour", peak_hour, low=0, high=24, high_open=True, unit="hours")
    check_number("interval", interval_s, low=0, low_open=True, high=DAY_S * days, unit="seconds")
    n = int(math.floor(DAY_S * days / interval_s + 1e-9))
    mid = (np.arange(n) + 0.5) * interval_s
    rates = trough + (peak - trough) * (1.0 + np.cos(2.0 * np.pi * (mid - peak_hour * 3600.0) / DAY_S)) / 2.0
    return RateSeries(interval_s=interval_s, rates=rates, name=f"diurnal {trough:g}-{peak:g} req/s",
                      source=f"trough + (peak - trough) (1 + cos(2 pi (t - {peak_hour:g} h) / 24 h)) / 2")


def read_traffic(path: str | Path, interval_s: float) -> RateSeries:
    """A rate file (``time_s,rate_rps`` with a header) or request timestamps (s, one per line),
    averaged onto ``interval_s`` (module doc)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise SpecError(f"traffic={str(path)!r} cannot be read ({exc.strerror or exc}); expected a CSV of "
                        "time_s,rate_rps or request timestamps one per line") from None
    except UnicodeDecodeError:
        raise SpecError(f"traffic={str(path)!r} is not text; expected a CSV of time_s,rate_rps") from None
    lines = [(i, ln.strip()) for i, ln in enumerate(text.splitlines(), 1) if ln.strip() and not ln.startswith("#")]
    if not lines:
        raise SpecError(f"traffic={str(path)!r} is empty; expected time_s,rate_rps rows or timestamps")
    head = [c.strip().lower() for c in lines[0][1].split(",")]
    if "rate_rps" in head or "time_s" in head:
        if head[:2] != ["time_s", "rate_rps"]:
            raise SpecError(f"traffic={str(path)!r} header {lines[0][1]!r}; expected 'time_s,rate_rps'")
        rows = [_numbers(str(path), i, ln, 2) for i, ln in lines[1:]]
        if len(rows) < 2:
            raise SpecError(f"traffic={str(path)!r} has {len(rows)} rate row(s); expected at least two")
        t = np.array([r[0] for r in rows])
        rate = np.array([r[1] for r in rows])
        if np.any(np.diff(t) <= 0):
            k = int(np.argmax(np.diff(t) <= 0)) + 1
            raise SpecError(f"traffic={str(path)!r} row {k + 1}: time_s={t[k]:g} must be greater than the previous "
                            f"row's {t[k - 1]:g}")
        if np.any(rate < 0):
            k = int(np.argmax(rate < 0))
            raise SpecError(f"traffic={str(path)!r} row {k + 1}: rate_rps={rate[k]:g} must be >= 0")
        edges = np.append(t, t[-1] + (t[-1] - t[-2]))
        return step_average(edges, rate, interval_s, name=p.name, source=str(path))
    stamps = np.sort(np.array([_numbers(str(path), i, ln, 1)[0] for i, ln in lines]))
    stamps -= stamps[0]
    n = int(math.floor(float(stamps[-1]) / interval_s + 1e-9))
    if n < 1:
        raise SpecError(f"traffic={str(path)!r}: timestamps span {float(stamps[-1]):g} s, shorter than one interval "
                        f"of {interval_s:g} s")
    counts = np.bincount(np.minimum((stamps // interval_s).astype(np.int64), n), minlength=n + 1)[:n]
    return RateSeries(interval_s=interval_s, rates=counts / interval_s, name=p.name, source=str(path))


def _numbers(path: str, line: int, text: str, k: int) -> list[float]:
    cells = [c.strip() for c in text.split(",")]
    if len(cells) != k:
        raise SpecError(f"traffic={path!r} line {line}: {text!r} has {len(cells)} field(s); expected {k}")
    try:
        vals = [float(c) for c in cells]
    except ValueError:
        raise SpecError(f"traffic={path!r} line {line}: {text!r} is not {k} number(s)") from None
    if not all(math.isfinite(v) for v in vals) or vals[0] < 0:
        raise SpecError(f"traffic={path!r} line {line}: {text!r}: times must be finite numbers >= 0 (seconds)")
    return vals


def bundled_traffic(name: str, interval_s: float) -> RateSeries:
    """A bundled trace's requests per minute (``specs/data/traffic``) averaged onto ``interval_s``."""
    raw = get_traffic(name)
    counts = np.asarray(raw["counts"], dtype=float)
    step = float(raw["interval_s"])
    edges = np.arange(counts.size + 1) * step
    return step_average(edges, counts / step, interval_s, name=name, source=str(raw.get("source", "")))


def load_traffic(traffic: str, *, interval_s: float, peak: float | None = None, trough: float | None = None,
                 days: int = 1, peak_hour: float = 14.0) -> RateSeries:
    """The rate series named by ``traffic``: ``diurnal`` (with ``peak`` and ``trough``), a bundled
    trace id, or a file path (module doc).

    Raises
    ------
    SpecError
        An unknown name, a missing peak, a malformed file.
    """
    name = str(traffic).strip()
    if not name:
        raise SpecError("traffic='' is empty; expected diurnal, a bundled trace "
                        f"({', '.join(list_traffic())}) or a CSV file")
    if name in SHAPES:
        if peak is None or trough is None:
            raise SpecError("traffic=diurnal needs --peak and --trough (requests per second)")
        return diurnal(peak, trough, interval_s=interval_s, days=days, peak_hour=peak_hour)
    if name in list_traffic():
        return bundled_traffic(name, interval_s)
    if not Path(name).exists():
        raise SpecError(f"traffic={name!r} is neither a file nor a known name; expected one of: "
                        f"{', '.join((*SHAPES, *list_traffic()))}, or a CSV of time_s,rate_rps")
    return read_traffic(name, interval_s)


def poisson_arrivals(edges: np.ndarray, rates: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sorted arrival times (s) of a Poisson process of rate ``rates[k]`` on ``[edges[k],
    edges[k+1])`` (module doc)."""
    e = np.asarray(edges, dtype=float)
    width = np.diff(e)
    counts = rng.poisson(np.asarray(rates, dtype=float) * width)
    total = int(counts.sum())
    start = np.repeat(e[:-1], counts)
    t = start + rng.random(total) * np.repeat(width, counts)
    return np.sort(t)


__all__ = ["DAY_S", "SHAPES", "RateSeries", "bundled_traffic", "diurnal", "load_traffic", "poisson_arrivals",
           "read_traffic", "step_average"]
