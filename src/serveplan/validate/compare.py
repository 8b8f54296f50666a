"""Compare a real serving benchmark with the simulator (``serveplan compare``).

Reads the JSON that vLLM's serving benchmark saves (``vllm bench serve --save-result``, formerly
``benchmarks/benchmark_serving.py``; the keys are those of ``vllm/benchmarks/serve.py``, ``benchmark``
and ``main``), in either of its two forms:

* **detailed** (``--save-result --save-detailed``): per-request ``ttfts`` and inter-token latencies
  ``itls`` (seconds), ``input_lens`` and ``output_lens``. The same requests are simulated and TTFT
  and TPOT (mean, P50, P90, P99) are computed from both sides' requests.
* **summary only** (``--save-result`` alone: ``main`` deletes ``input_lens``, ``output_lens``,
  ``start_times``, ``ttfts``, ``itls``, ``generated_texts`` and ``errors`` unless
  ``--save-detailed``): the statistics vLLM wrote, ``mean_<m>_ms``, ``median_<m>_ms`` and
  ``p<P>_<m>_ms`` (``--metric-percentiles``, default 99) for ``m`` in ``ttft``, ``tpot``, ``itl``
  and ``e2el`` (those of ``--percentile-metrics``, default ``ttft,tpot,itl``), and the throughputs
  ``request_throughput`` (req/s) and ``output_throughput`` (tok/s). Lengths are not in the file:
  ``completed`` requests are simulated at the mean lengths ``total_input_tokens / completed`` and
  ``total_output_tokens / completed`` (exact for vLLM's ``random`` dataset at a range ratio of 0),
  and each statistic is compared with the same statistic of the simulated requests. ITL is
  compared with the simulated tokens' gaps (``simulate(itl=True)``: one per token after the first,
  as vLLM counts them): its mean, P50, P90 and P99 (other percentiles are left out, a note says so).

Both forms carry the run's ``request_rate``, ``burstiness``, ``completed``, ``duration`` and
``max_concurrency``, and the same arrival process and rate are simulated. The load is the
benchmark's:

* ``request_rate: inf`` without ``max_concurrency``: every request sent at t=0, run to completion
  (no simulated-time cap: a burst of thousands of requests drains for a long time);
* ``max_concurrency: C`` with ``request_rate: inf``: a closed loop of ``C`` clients, each sending
  its next request as soon as its previous one finished (``vllm bench serve --max-concurrency``);
* ``max_concurrency: C`` with a finite rate: requests arrive as the rate's process draws them and
  each then waits for one of ``C`` slots, first come first served (vLLM's semaphore); latencies
  count from the send, as vLLM's do.

TPOT per request follows vLLM's definition: ``(latency - ttft) / (output_len - 1)``, i.e. the
sum of its inter-token latencies over ``output_len - 1``; requests with one output token have
none. Failed requests (``output_lens`` of 0) are left out, as vLLM does.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from serveplan.errors import SpecError
from serveplan.sim import SimulationConfig, Workload, simulate
from serveplan.sim.workload import arrival_times

STATS = ("mean", "p50", "p90", "p99")
#: vLLM's names of the summary metrics (``vllm/benchmarks/serve.py`` ``process_one_metric``) -> ours.
SUMMARY_METRICS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E"}
#: ``mean_ttft_ms``, ``median_tpot_ms``, ``p99_itl_ms``, ``p99.9_e2el_ms``: statistic, metric.
_SUMMARY_KEY = re.compile(r"^(mean|median|p(\d+(?:\.\d+)?))_(ttft|tpot|itl|e2el)_ms$")
#: vLLM's throughputs (``request_throughput``: completed / duration; ``output_throughput``: output
#: tokens / duration) -> (label, unit).
SUMMARY_RATES = {"request_throughput": ("request throughput", "req/s"),
                 "output_throughput": ("output throughput", "tok/s")}
#: The per-request fields of a detailed result; without them the file is a summary.
DETAILED_FIELDS = ("ttfts", "itls", "input_lens", "output_lens")


@dataclass(frozen=True, slots=True)
class ServingRun:
    """A measured serving benchmark: per-request latencies (s) and lengths."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray            # NaN for requests with a single output token
    input_lens: np.ndarray
    output_lens: np.ndarray
    request_rate: float           # inf: every request sent at time 0
    burstiness: float             # Gamma shape of the arrival gaps (1 = Poisson)
    duration_s: float
    completed: int
    source: str = ""
    max_concurrency: int | None = None   # vllm bench serve --max-concurrency (None: no cap)
    #: False for a summary-only file (no --save-detailed): ``ttft_s``/``tpot_s`` are empty, the
    #: lengths are the means, and ``summary`` holds the statistics vLLM wrote
    detailed: bool = True
    #: metric (TTFT, TPOT, ITL, E2E) -> statistic (mean, p50, p99, ...) -> seconds
    summary: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    #: vLLM's throughputs as written: ``request_throughput`` (req/s), ``output_throughput`` (tok/s)
    rates: Mapping[str, float] = dataclasses.field(default_factory=dict)


def _num_list(raw: Mapping[str, Any], key: str, where: str) -> list[Any]:
    v = raw.get(key)
    if not isinstance(v, list):
        raise SpecError(f"{where}: field {key!r} is missing or not a list (vLLM benchmark result format)")
    return v


def _tpot(raw: Mapping[str, Any], itls: Any, ok: np.ndarray, o_len: np.ndarray, where: str) -> np.ndarray:
    """TPOT per request (s): its inter-token latencies summed over ``output_len - 1`` (vLLM's
    definition), or the result's own ``tpots`` when it has no ``itls``; NaN below two tokens."""
    tpot = np.full(len(o_len), np.nan)
    if itls is not None:
        for k, row in enumerate(itls):
            if not ok[k] or o_len[k] < 2:
                continue
            try:
                gaps = np.array(row, dtype=float)
            except (TypeError, ValueError):
                raise SpecError(f"{where}: itls[{k}] must be a list of seconds") from None
            if np.any(gaps < 0):
                raise SpecError(f"{where}: itls[{k}] has a negative inter-token latency")
            tpot[k] = float(gaps.sum()) / (o_len[k] - 1)
        return tpot
    if isinstance(raw.get("tpots"), list) and len(raw["tpots"]) == len(o_len):
        return np.array(raw["tpots"], dtype=float)
    raise SpecError(f"{where}: field 'itls' is missing (per-request inter-token latencies are needed for TPOT)")


def parse_vllm_result(raw: Mapping[str, Any], where: str = "result") -> ServingRun:
    """Validate a vLLM serving-benchmark result mapping.

    Raises
    ------
    SpecError
        Missing or inconsistent fields, negative latencies, no completed request.
    """
    if not isinstance(raw, Mapping):
        raise SpecError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    if not any(k in raw for k in DETAILED_FIELDS):
        return _parse_summary(raw, where)
    ttfts = _num_list(raw, "ttfts", where)
    inp = _num_list(raw, "input_lens", where)
    out = _num_list(raw, "output_lens", where)
    itls = raw.get("itls")
    if not (len(ttfts) == len(inp) == len(out)):
        raise SpecError(f"{where}: ttfts, input_lens and output_lens must have one entry per request "
                        f"(got {len(ttfts)}, {len(inp)}, {len(out)})")
    if itls is not None and (not isinstance(itls, list) or len(itls) != len(ttfts)):
        raise SpecError(f"{where}: itls must be a list with one list of inter-token latencies per request")
    try:
        t = np.array(ttfts, dtype=float)
        i_len = np.array(inp, dtype=float)
        o_len = np.array(out, dtype=float)
    except (TypeError, ValueError):
        raise SpecError(f"{where}: ttfts, input_lens and output_lens must be numbers") from None
    ok = o_len > 0
    if not np.any(ok):
        raise SpecError(f"{where}: no completed request (every output_lens entry is 0)")
    if np.any(t[ok] < 0) or np.any(i_len < 0) or not np.all(np.isfinite(t[ok])):
        raise SpecError(f"{where}: ttfts and input_lens must be finite and >= 0")
    tpot = _tpot(raw, itls, ok, o_len, where)
    rate_f, burst, mc = _load(raw, where)
    sel = ok
    return ServingRun(
        ttft_s=t[sel], tpot_s=tpot[sel], input_lens=i_len[sel].astype(int), output_lens=o_len[sel].astype(int),
        request_rate=rate_f, burstiness=burst, duration_s=float(raw.get("duration", math.nan) or math.nan),
        completed=int(raw.get("completed", int(sel.sum())) or int(sel.sum())), source=where,
        max_concurrency=mc, rates=_rates(raw, where),
    )


def _load(raw: Mapping[str, Any], where: str) -> tuple[float, float, int | None]:
    """The run's ``request_rate``, ``burstiness`` and ``max_concurrency``, checked."""
    rate = raw.get("request_rate", "inf")
    try:
        rate_f = float(rate)
    except (TypeError, ValueError):
        raise SpecError(f"{where}: request_rate={rate!r} must be a number or 'inf'") from None
    if not rate_f > 0:
        raise SpecError(f"{where}: request_rate={rate!r} must be positive (or inf)")
    burst = float(raw.get("burstiness", 1.0) or 1.0)
    if not burst > 0:
        raise SpecError(f"{where}: burstiness={burst!r} must be positive")
    mc = raw.get("max_concurrency")
    if mc is not None and (isinstance(mc, bool) or not isinstance(mc, (int, float)) or mc != int(mc) or mc < 1):
        raise SpecError(f"{where}: max_concurrency={mc!r} must be a positive integer (or null: no cap)")
    return rate_f, burst, None if mc is None else int(mc)


def _rates(raw: Mapping[str, Any], where: str) -> dict[str, float]:
    out = {}
    for key in SUMMARY_RATES:
        v = raw.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise SpecError(f"{where}: {key}={v!r} must be a finite number >= 0")
        out[key] = float(v)
    return out


def _parse_summary(raw: Mapping[str, Any], where: str) -> ServingRun:
    """A result saved without ``--save-detailed``: vLLM's statistics, and the mean lengths."""
    summary: dict[str, dict[str, float]] = {}
    for key, value in raw.items():
        m = _SUMMARY_KEY.match(str(key))
        if not m or value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise SpecError(f"{where}: {key}={value!r} must be a finite number of milliseconds >= 0")
        stat = "mean" if m.group(1) == "mean" else "p50" if m.group(1) == "median" else f"p{m.group(2)}"
        summary.setdefault(SUMMARY_METRICS[m.group(3)], {})[stat] = float(value) / 1e3  # ms -> s
    if not summary:
        raise SpecError(
            f"{where}: neither per-request latencies ({', '.join(DETAILED_FIELDS)}) nor summary statistics "
            "(mean_ttft_ms, median_tpot_ms, p99_itl_ms, ...); expected a vLLM serving-benchmark result "
            "(vllm bench serve --save-result; add --save-detailed to compare request by request)")
    counts = {}
    for key in ("completed", "total_input_tokens", "total_output_tokens"):
        v = raw.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise SpecError(f"{where}: {key}={v!r} must be a count >= 0; a summary-only result (saved without "
                            "--save-detailed) is simulated at its mean lengths, total tokens / completed")
        counts[key] = float(v)
    n = int(counts["completed"])
    if n < 1:
        raise SpecError(f"{where}: completed=0: no completed request to compare")
    in_len = max(1, round(counts["total_input_tokens"] / n))
    out_len = max(1, round(counts["total_output_tokens"] / n))
    rate_f, burst, mc = _load(raw, where)
    return ServingRun(
        ttft_s=np.zeros(0), tpot_s=np.zeros(0), input_lens=np.full(n, in_len, dtype=int),
        output_lens=np.full(n, out_len, dtype=int), request_rate=rate_f, burstiness=burst,
        duration_s=float(raw.get("duration", math.nan) or math.nan), completed=n, source=where,
        max_concurrency=mc, detailed=False, summary=summary, rates=_rates(raw, where))


def read_vllm_result(path: str | Path) -> ServingRun:
    """Read a vLLM serving-benchmark result JSON file."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"benchmark result file {str(path)!r} does not exist")
    try:
        raw = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(f"benchmark result file {str(path)!r} is not valid JSON: {exc}") from None
    return parse_vllm_result(raw, where=str(path))


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    metric: str          # "TTFT" or "TPOT"
    stat: str            # mean, p50, p90, p99
    measured_s: float
    simulated_s: float

    @property
    def error(self) -> float:
        return self.simulated_s / self.measured_s - 1.0 if self.measured_s > 0 else math.nan


@dataclass(frozen=True, slots=True)
class RateRow:
    """A measured throughput against the simulated one, in ``unit`` (req/s or tok/s)."""

    metric: str          # "request throughput", "output throughput"
    unit: str
    measured: float
    simulated: float

    @property
    def error(self) -> float:
        return self.simulated / self.measured - 1.0 if self.measured > 0 else math.nan


@dataclass(frozen=True, slots=True)
class Comparison:
    """Measured against simulated latencies (and throughputs) for one benchmark run.

    ``detailed`` is False for a summary-only result: ``rows`` then pair the statistics vLLM wrote
    (TTFT, TPOT, ITL mean, E2E) with the same statistics of the simulated requests, and ``notes``
    say what could not be compared.
    """

    rows: tuple[ComparisonRow, ...]
    num_requests: int
    request_rate: float
    simulated_completed: int
    load: str = ""                                   # how the benchmark's load was simulated
    max_concurrency: int | None = None
    config: dict[str, Any] = dataclasses.field(default_factory=dict)   # the simulation's configuration
    rates: tuple[RateRow, ...] = ()
    detailed: bool = True
    notes: tuple[str, ...] = ()

    def to_records(self) -> list[dict[str, Any]]:
        return [{"metric": r.metric, "stat": r.stat, "measured_s": r.measured_s, "simulated_s": r.simulated_s,
                 "error": r.error} for r in self.rows]

    def to_dict(self) -> dict[str, Any]:
        return {"num_requests": self.num_requests, "request_rate": self.request_rate,
                "max_concurrency": self.max_concurrency, "load": self.load, "detailed": self.detailed,
                "simulated_completed": self.simulated_completed, "config": self.config, "rows": self.to_records(),
                "rates": [{"metric": r.metric, "unit": r.unit, "measured": r.measured, "simulated": r.simulated,
                           "error": r.error} for r in self.rates],
                "notes": list(self.notes)}


def _stats(v: np.ndarray) -> dict[str, float]:
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {s: math.nan for s in STATS}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {"mean": float(v.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def workload_of(run: ServingRun) -> Workload:
    """The simulator workload of a run: its lengths, with its arrival process.

    vLLM draws inter-arrival gaps from a Gamma distribution with shape ``burstiness`` and mean
    ``1/rate`` (Poisson when 1), so the coefficient of variation is ``1/sqrt(burstiness)``; an
    infinite rate sends every request at time 0.
    """
    n = len(run.input_lens)
    if math.isinf(run.request_rate):
        return Workload(input_lengths=run.input_lens, output_lengths=run.output_lens, arrival="trace",
                        trace_times=np.zeros(n), name=Path(run.source).name or "vllm")
    if run.burstiness == 1.0:
        return Workload(input_lengths=run.input_lens, output_lengths=run.output_lens, arrival="poisson",
                        name=Path(run.source).name or "vllm")
    return Workload(input_lengths=run.input_lens, output_lengths=run.output_lens, arrival="gamma",
                    cv=1.0 / math.sqrt(run.burstiness), name=Path(run.source).name or "vllm")


def compare(run: ServingRun, config: SimulationConfig) -> Comparison:
    """Simulate ``run``'s workload with ``config`` (a :class:`~serveplan.sim.SimulationConfig`
    whose workload and rate are replaced) under the benchmark's load (module doc) and pair the
    statistics."""
    burst = math.isinf(run.request_rate)
    wl = workload_of(run)
    c = run.max_concurrency
    if c is None:
        rate = None if burst else run.request_rate
        # a burst has no arrival span to scale a time cap by: it runs until the last request is out
        cfg = dataclasses.replace(config, workload=wl, rate=rate, max_time_s=math.inf if burst else None)
        res = simulate(cfg, itl=True)
        load = "every request sent at t=0" if burst else f"open loop at {run.request_rate:g} req/s"
    else:
        n = len(run.input_lens)
        lengths = Workload(input_lengths=run.input_lens, output_lengths=run.output_lens, arrival="trace",
                           trace_times=np.zeros(n), name=wl.name)
        cfg = dataclasses.replace(config, workload=lengths, rate=None, max_time_s=None)
        if burst:
            res = simulate(cfg, clients=c, itl=True)
            load = f"closed loop of {c} clients (max_concurrency {c}, request_rate inf)"
        else:
            sends = arrival_times(wl, run.request_rate, config.seed)
            res = simulate(cfg, clients=c, not_before=sends, itl=True)
            load = f"arrivals at {run.request_rate:g} req/s, at most {c} in flight (max_concurrency)"
    notes: list[str] = []
    if run.detailed:
        meas = {"TTFT": _stats(run.ttft_s), "TPOT": _stats(run.tpot_s)}
        sim = {"TTFT": res.ttft_s, "TPOT": res.tpot_s}
        rows = [ComparisonRow(metric, s, meas[metric][s], float(getattr(sim[metric], s)))
                for metric in ("TTFT", "TPOT") for s in STATS]
    else:
        rows, notes = _summary_rows(run, res)
        notes.insert(0, f"summary-only result (saved without --save-detailed): {run.completed} requests simulated "
                        f"at the mean lengths, {int(run.input_lens[0])} input and {int(run.output_lens[0])} output "
                        "tokens")
    sim_rates = {"request_throughput": res.throughput_rps, "output_throughput": res.output_tokens_per_s}
    rates = tuple(RateRow(SUMMARY_RATES[k][0], SUMMARY_RATES[k][1], v, float(sim_rates[k]))
                  for k, v in run.rates.items())
    return Comparison(tuple(rows), len(run.input_lens), run.request_rate, int(res.num_completed), load=load,
                      max_concurrency=c, config=cfg.to_dict(), rates=rates, detailed=run.detailed,
                      notes=tuple(notes))


def _stat(values: np.ndarray, stat: str) -> float:
    """``mean`` or ``p<P>`` of the finite ``values`` (NaN when none)."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return math.nan
    return float(v.mean()) if stat == "mean" else float(np.percentile(v, float(stat[1:])))


def _summary_rows(run: ServingRun, res: Any) -> tuple[list[ComparisonRow], list[str]]:
    """The summary's statistics against the same statistics of the simulated requests (ITL: of the
    simulated tokens, :attr:`~serveplan.sim.engine.SimulationResult.itl_s`)."""
    rec = res.requests
    done = np.isfinite(rec.finish)
    per_request = {"TTFT": rec.ttft[done], "TPOT": rec.tpot[done], "E2E": rec.e2e[done]}
    rows, notes = [], []
    for metric in ("TTFT", "TPOT", "ITL", "E2E"):
        stats = run.summary.get(metric, {})
        for stat in sorted(stats, key=lambda s: (s != "mean", float(s[1:]) if s != "mean" else 0.0)):
            if metric == "ITL":
                if stat not in ("mean", "p50", "p90", "p99"):
                    continue
                sim = float(getattr(res.itl_s, stat))
            else:
                sim = _stat(per_request[metric], stat)
            rows.append(ComparisonRow(metric, stat, stats[stat], sim))
        skipped = [s for s in stats if metric == "ITL" and s not in ("mean", "p50", "p90", "p99")]
        if skipped:
            notes.append(f"ITL {', '.join(sorted(skipped))} not compared: the simulator keeps the mean, P50, P90 "
                         "and P99 of its inter-token gaps")
    return rows, notes
