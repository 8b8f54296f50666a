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


def certain_misses(n_total: int, percentile: float) -> int:
    """Smallest number of requests above a target that makes the ``percentile`` (numpy's linear
    interpolation over ``n_total`` values) certainly exceed it: the order statistic at
    ``floor(p/100 (n-1))`` is then above the target."""
    k = int(math.floor(percentile / 100.0 * (n_total - 1)))
    return n_total - k
