"""Latency statistics and service-level objectives.

Definitions (per request ``r``; BestServe §11.1, the usual serving conventions):

* TTFT = first token time - arrival (the first output token comes out of the prefill step).
* TPOT = (finish - first token) / (output tokens - 1): mean gap between later tokens; 0 for a
  single-token output.
* E2E = finish - arrival.
* SLO attainment = fraction of *all* requests with TTFT <= target and TPOT <= target
  (unfinished requests count as misses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from serveplan.errors import SpecError


@dataclass(frozen=True, slots=True, kw_only=True)
class SLO:
    """Latency targets (s) and the percentile at which they must hold (BestServe Alg. 9: P90)."""

    ttft_s: float = 1.5   # BestServe §11.1 example: TTFT < 1500 ms
    tpot_s: float = 0.07  # BestServe §11.1 example: TPOT < 70 ms
    percentile: float = 90.0

    def __post_init__(self) -> None:
        for f in ("ttft_s", "tpot_s"):
            v = getattr(self, f)
            if not (isinstance(v, (int, float)) and v > 0):
                raise SpecError(f"slo {f}={v!r} must be a positive number of seconds")
        if not (isinstance(self.percentile, (int, float)) and 0 < self.percentile < 100):
            raise SpecError(f"slo percentile={self.percentile!r} must be in (0, 100)")

    def to_dict(self) -> dict[str, float]:
        return {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "percentile": self.percentile}


@dataclass(frozen=True, slots=True, kw_only=True)
class LatencyStats:
    """Mean and percentiles (s) of one latency over the completed requests (NaN when none)."""

    mean: float
    p50: float
    p90: float
    p99: float
    max: float = math.nan
    count: int = 0

    @staticmethod
    def of(values: Any) -> LatencyStats:
        v = np.asarray(values, dtype=float)
        v = v[np.isfinite(v)]
        if v.size == 0:
            return LatencyStats(mean=math.nan, p50=math.nan, p90=math.nan, p99=math.nan)
        p50, p90, p99 = np.percentile(v, [50, 90, 99])
        return LatencyStats(mean=float(v.mean()), p50=float(p50), p90=float(p90), p99=float(p99),
                            max=float(v.max()), count=int(v.size))

    def percentile_value(self, p: float) -> float:
        key = {50.0: self.p50, 90.0: self.p90, 99.0: self.p99}
        if float(p) in key:
            return key[float(p)]
        raise KeyError(p)

    def to_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "p50": self.p50, "p90": self.p90, "p99": self.p99, "max": self.max,
                "count": self.count}


class GapLog:
    """Inter-token latencies (ITL) of one instance, recorded step by step when a run asks for them
    (``simulate(..., itl=True)``): the gap before each step that gives decoding requests a token, with
    the number of those tokens as its weight. ITL is what ``vllm bench serve`` prints: one value per
    streamed chunk after the first, the time since the request's previous chunk
    (``vllm/benchmarks/lib/endpoint_request_func.py``: ``output.itl.append(timestamp -
    most_recent_timestamp)``), so its percentiles are over tokens, where TPOT's are over requests. A
    step's gap runs from the end of the instance's previous decoding step when the instance was busy
    in between (a prefill step that pauses decodes, as SGLang's, lies inside the gap), else from the
    step's own start."""

    __slots__ = ("_arrays", "_weights", "_one", "_one_w")

    def __init__(self) -> None:
        self._arrays: list[np.ndarray] = []
        self._weights: list[int] = []
        self._one: list[float] = []
        self._one_w: list[int] = []

    def add(self, gaps: np.ndarray, weight: int) -> None:
        """Gaps of several steps, each giving ``weight`` tokens; the log keeps ``gaps`` itself (pass a
        copy of an array that may change)."""
        self._arrays.append(gaps)
        self._weights.append(weight)

    def add_one(self, gap: float, weight: int) -> None:
        self._one.append(gap)
        self._one_w.append(weight)

    @staticmethod
    def stats(logs: list[GapLog]) -> LatencyStats:
        """Mean and percentiles over every token of ``logs`` (numpy's linear percentile over the tokens'
        gaps, one value per token, computed from the weighted steps without expanding them)."""
        vals = [np.asarray(lg._one, dtype=float) for lg in logs] + [a for lg in logs for a in lg._arrays]
        wts = [np.asarray(lg._one_w, dtype=float) for lg in logs] + \
            [np.full(len(a), w, dtype=float) for lg in logs for a, w in zip(lg._arrays, lg._weights, strict=True)]
        v = np.concatenate(vals) if vals else np.empty(0)
        w = np.concatenate(wts) if wts else np.empty(0)
        keep = np.isfinite(v) & (w > 0)
        v, w = v[keep], w[keep]
        total = float(w.sum())
        if total <= 0:
            return LatencyStats(mean=math.nan, p50=math.nan, p90=math.nan, p99=math.nan)
        order = np.argsort(v, kind="stable")
        v, w = v[order], w[order]
        upto = np.cumsum(w)    # tokens with a gap at most v[i]: positions [upto[i-1], upto[i]) of the sorted tokens

        def at(pos: float) -> float:
            return float(v[int(np.searchsorted(upto, pos, side="right"))])

        def pct(p: float) -> float:
            h = p / 100.0 * (total - 1.0)
            lo = math.floor(h)
            a, b = at(lo), at(min(lo + 1, total - 1.0))
            return a + (h - lo) * (b - a)

        return LatencyStats(mean=float(np.dot(v, w) / total), p50=pct(50), p90=pct(90), p99=pct(99),
                            max=float(v[-1]), count=int(total))


def certain_misses(n_total: int, percentile: float) -> int:
    """Smallest number of requests above a target that makes the ``percentile`` (numpy's linear
    interpolation over ``n_total`` values) certainly exceed it: the order statistic at
    ``floor(p/100 (n-1))`` is then above the target."""
    k = int(math.floor(percentile / 100.0 * (n_total - 1)))
    return n_total - k


#: Bins of the arrival span in which the backlog (arrived, not yet finished) is sampled.
BACKLOG_BINS = 100
#: Completions short of arrivals by more than this share, over the second half of the arrival
#: span, mean the queue grows (a stable queue's backlog has no trend: completions match arrivals).
OVERLOAD_DEFICIT = 0.02
#: ... and the growth must exceed this many standard deviations of a Poisson count of the mean
#: backlog (the noise of a stable queue near saturation, whose backlog wanders but does not trend)
OVERLOAD_NOISE_SIGMAS = 4.0
#: ... and this many of the half's arrival count (a short stream's arrivals alone vary by
#: sqrt(count): 20 Poisson arrivals can come 13 early without any trend in the service)
OVERLOAD_ARRIVAL_SIGMAS = 3.0
#: Fewest arrivals in the second half for a trend verdict: a shorter stream (a few dozen requests,
#: or a burst the fleet absorbs) never reaches a steady state whose trend could be told apart from
#: its start; such a run is overloaded only when requests were unfinished at the time cap.
OVERLOAD_MIN_ARRIVALS = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueGrowth:
    """The backlog's trend over the second half of the arrival span.

    ``backlog`` is sampled at ``BACKLOG_BINS + 1`` evenly spaced times from the first to the last
    arrival (arrivals up to the time minus completions up to it). Over the second half of the
    span a least-squares line through the samples gives the growth (requests over that half);
    the queue grows (``growing``) when that growth is above ``OVERLOAD_DEFICIT`` of the
    arrivals of the half (completions short of arrivals by more than 2%),
    ``OVERLOAD_NOISE_SIGMAS`` times the square root of the mean backlog (the wander of a stable
    queue) and ``OVERLOAD_ARRIVAL_SIGMAS`` times the square root of the half's arrivals (the
    noise of the arrival count of a short stream). A stream with fewer than
    ``OVERLOAD_MIN_ARRIVALS`` arrivals in the second half, or one that arrives at one instant
    (offline), gives no verdict (not growing).
    """

    growth: float            # requests the backlog gained over the second half (fitted line)
    arrivals: int            # requests that arrived in the second half
    mean_backlog: float      # over the second half
    last_backlog: int        # at the last arrival

    @property
    def threshold(self) -> float:
        return max(OVERLOAD_DEFICIT * self.arrivals, OVERLOAD_NOISE_SIGMAS * math.sqrt(self.mean_backlog + 1.0),
                   OVERLOAD_ARRIVAL_SIGMAS * math.sqrt(self.arrivals))

    @property
    def growing(self) -> bool:
        return self.arrivals >= OVERLOAD_MIN_ARRIVALS and self.growth > self.threshold

    @staticmethod
    def of_counts(arrived: np.ndarray, finished: np.ndarray, span_s: float) -> QueueGrowth:
        """From cumulative counts at the ``BACKLOG_BINS + 1`` sample times over a span of ``span_s``."""
        backlog = np.asarray(arrived, dtype=float) - np.asarray(finished, dtype=float)
        if not span_s > 0 or len(backlog) < 3:
            last = int(backlog[-1]) if len(backlog) else 0
            return QueueGrowth(growth=0.0, arrivals=0, mean_backlog=float(max(last, 0)), last_backlog=last)
        half = (len(backlog) - 1) // 2
        y = backlog[half:]
        x = np.linspace(0.0, 1.0, len(y))   # time as a share of the half span
        xm = x.mean()
        slope = float(((x - xm) * (y - y.mean())).sum() / ((x - xm) ** 2).sum())
        return QueueGrowth(growth=slope, arrivals=int(arrived[-1] - arrived[half]), mean_backlog=float(y.mean()),
                           last_backlog=int(backlog[-1]))

    @staticmethod
    def of(arrival: np.ndarray, finish: np.ndarray) -> QueueGrowth:
        """From per-request arrival and finish times (NaN: unfinished), in one pass each (no sort):
        every time is counted at the first sample time at or after it."""
        a = np.asarray(arrival, dtype=float)
        if a.size == 0:
            return QueueGrowth(growth=0.0, arrivals=0, mean_backlog=0.0, last_backlog=0)
        t0, t1 = float(a.min()), float(a.max())
        if not t1 > t0:
            return QueueGrowth.of_counts(np.array([a.size]), np.array([np.count_nonzero(finish <= t1)]), 0.0)
        f = np.asarray(finish, dtype=float)
        f = f[f <= t1]    # NaN (unfinished) and later completions do not count
        scale = BACKLOG_BINS / (t1 - t0)

        def counts(x: np.ndarray) -> np.ndarray:
            k = np.clip(np.ceil((x - t0) * scale), 0, BACKLOG_BINS).astype(np.int64)
            return np.cumsum(np.bincount(k, minlength=BACKLOG_BINS + 1))

        return QueueGrowth.of_counts(counts(a), counts(f), t1 - t0)

