"""Request streams: lengths (fixed, distributions, empirical lists, traces) and arrival times.

A :class:`Workload` holds the *realized* per-request input and output lengths (numpy arrays,
drawn once from a seeded stream of their own) and how arrivals are generated. Arrival times are
drawn by :func:`arrival_times` at simulation time from ``np.random.default_rng(seed)`` with
common random numbers: a unit-rate base sequence divided by the rate, so the same seed at two
rates gives the same sequence rescaled (the goodput bisection compares rates on equal terms).

Built-in scenarios are BestServe's four operating points (BestServe §4.1):

=====  ======  ======
name   input   output
=====  ======  ======
op1    8192    512
op2    2048    64
op3    1024    64
op4    256     2048
=====  ======  ======
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from serveplan.errors import SpecError

#: BestServe §12 operating scenarios: (input tokens, output tokens).
SCENARIOS: dict[str, tuple[int, int]] = {
    "op1": (8192, 512),
    "op2": (2048, 64),
    "op3": (1024, 64),
    "op4": (256, 2048),
}

ARRIVALS = ("poisson", "gamma", "trace")
LENGTH_KINDS = ("fixed", "uniform", "normal", "lognormal", "empirical")

#: Entropy appended to the seed for the length stream, so lengths never share draws with arrivals.
_LENGTH_STREAM = 0x1E4


@dataclass(frozen=True, slots=True, kw_only=True)
class LengthDist:
    """A distribution of token counts; samples are rounded and clipped to ``[low, high]``.

    Kinds: ``fixed`` (``value``), ``uniform`` (integers in ``[low, high]``), ``normal``
    (``mean``, ``std``), ``lognormal`` (``mean`` and ``sigma`` of the underlying normal's
    exp: median ``mean``), ``empirical`` (``values`` drawn with replacement).
    """

    kind: str
    value: int = 0
    low: int = 1
    high: int = 1_000_000
    mean: float = 0.0
    std: float = 0.0
    sigma: float = 0.0
    values: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in LENGTH_KINDS:
            raise SpecError(f"length distribution kind={self.kind!r}; expected one of: {', '.join(LENGTH_KINDS)}")
        if self.low < 1 or self.high < self.low:
            raise SpecError(f"length bounds low={self.low}, high={self.high}: need 1 <= low <= high")
        if self.kind == "fixed" and self.value < 1:
            raise SpecError(f"fixed length value={self.value} must be a positive integer")
        if self.kind in ("normal", "lognormal") and not self.mean > 0:
            raise SpecError(f"{self.kind} length mean={self.mean} must be positive")
        if self.kind == "normal" and self.std < 0:
            raise SpecError(f"normal length std={self.std} must be >= 0")
        if self.kind == "lognormal" and self.sigma < 0:
            raise SpecError(f"lognormal length sigma={self.sigma} must be >= 0")
        if self.kind == "empirical" and (not self.values or min(self.values) < 1):
            raise SpecError("empirical length values must be a non-empty list of positive integers")

    @staticmethod
    def parse(text: str) -> LengthDist:
        """``"fixed:2048"``, ``"uniform:128,4096"``, ``"normal:2048,512"``, ``"lognormal:1024,0.8"``,
        ``"empirical:128,256,1024"``."""
        kind, _, rest = text.partition(":")
        kind = kind.strip().lower()
        try:
            nums = [float(v) for v in rest.split(",") if v.strip()]
        except ValueError:
            raise SpecError(f"length distribution {text!r}: parameters must be numbers, e.g. normal:2048,512") from None
        need = {"fixed": 1, "uniform": 2, "normal": 2, "lognormal": 2}
        if kind in need and len(nums) != need[kind]:
            raise SpecError(f"length distribution {text!r}: {kind} takes {need[kind]} parameter(s)")
        if kind == "fixed":
            return LengthDist(kind="fixed", value=int(nums[0]))
        if kind == "uniform":
            return LengthDist(kind="uniform", low=int(nums[0]), high=int(nums[1]))
        if kind == "normal":
            return LengthDist(kind="normal", mean=nums[0], std=nums[1])
        if kind == "lognormal":
            return LengthDist(kind="lognormal", mean=nums[0], sigma=nums[1])
        if kind == "empirical":
            return LengthDist(kind="empirical", values=tuple(int(v) for v in nums))
        raise SpecError(f"length distribution kind={kind!r} in {text!r}; expected one of: {', '.join(LENGTH_KINDS)}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            x = np.full(n, float(self.value))
        elif self.kind == "uniform":
            x = rng.integers(self.low, self.high + 1, size=n).astype(float)
        elif self.kind == "normal":
            x = rng.normal(self.mean, self.std, size=n)
        elif self.kind == "lognormal":
            x = self.mean * np.exp(rng.normal(0.0, self.sigma, size=n))
        else:
            x = rng.choice(np.asarray(self.values, dtype=float), size=n, replace=True)
        out: np.ndarray = np.clip(np.rint(x), self.low, self.high).astype(np.int64)
        return out


def _as_lengths(value: Any, n: int | None, name: str) -> np.ndarray:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if value < 1:
            raise SpecError(f"{name}={value} must be a positive integer number of tokens")
        if n is None:
            raise SpecError(f"{name}={value} is a single length: give num_requests too")
        return np.full(n, int(value), dtype=np.int64)
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.size == 0:
        raise SpecError(f"{name} must be a positive integer or a non-empty list of them, got {value!r:.80}")
    if not np.issubdtype(arr.dtype, np.number) or np.any(arr != np.rint(arr)) or np.any(arr < 1):
        raise SpecError(f"{name} must hold positive integers (tokens); got min {arr.min()!r}")
    if n is not None and arr.size != n:
        raise SpecError(f"{name} has {arr.size} entries but num_requests={n}; give one length per request")
    return arr.astype(np.int64)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Workload:
    """A stream of requests: per-request lengths plus the arrival process.

    Parameters
    ----------
    input_lengths, output_lengths:
        Tokens per request: one integer for all, or one per request (arrays are stored as
        read-only ``int64`` arrays). Use :meth:`from_distributions` to draw them.
    arrival:
        ``poisson`` (exponential gaps), ``gamma`` (gaps with mean ``1/rate`` and coefficient of
        variation ``cv``: bursty when ``cv > 1``) or ``trace`` (``trace_times`` as given).
    cv:
        Coefficient of variation of the Gamma inter-arrival gaps (1 = Poisson).
    trace_times:
        Arrival times (s) for ``arrival="trace"``, non-decreasing.
    num_requests:
        Number of requests (inferred from the length arrays when omitted).
    name:
        Label for reports (scenario name or file).
    """

    input_lengths: Any
    output_lengths: Any
    arrival: str = "poisson"
    cv: float = 1.0
    trace_times: Any = None
    num_requests: int | None = None
    name: str = ""
    _digest: str = field(default="", repr=False)
    #: multi-turn sessions (:func:`serveplan.sim.sessions.session_workload`): each request's
    #: session id and turn (0 first); its next turn is sent ``think_s`` after its answer ends
    session: Any = None
    turn: Any = None
    think_s: float = 0.0
    #: per request, the trace's prompt block hashes (Mooncake format), each of ``hash_block`` tokens
    hash_ids: Any = None
    hash_block: int = 512
    #: tokens of a system prompt every request starts with (counted in ``input_lengths``)
    system_prompt_len: int = 0

    def __post_init__(self) -> None:
        n = self.num_requests
        if n is not None and (not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1):
            raise SpecError(f"num_requests={n!r} must be a positive integer")
        if n is None:
            for v in (self.input_lengths, self.output_lengths, self.trace_times):
                if v is not None and not isinstance(v, (int, np.integer)):
                    n = len(v)
                    break
        inp = _as_lengths(self.input_lengths, n, "input_lengths")
        n = inp.size
        out = _as_lengths(self.output_lengths, n, "output_lengths")
        if self.arrival not in ARRIVALS:
            raise SpecError(f"arrival={self.arrival!r}; expected one of: {', '.join(ARRIVALS)}")
        if not (isinstance(self.cv, (int, float)) and math.isfinite(self.cv) and self.cv > 0):
            raise SpecError(f"cv={self.cv!r} must be a positive number (1 = Poisson)")
        tt = None
        if self.arrival == "trace":
            if self.trace_times is None:
                raise SpecError("arrival='trace' needs trace_times (or use Workload.from_trace(path))")
            tt = np.asarray(self.trace_times, dtype=float)
            if tt.ndim != 1 or tt.size != n:
                raise SpecError(f"trace_times has {tt.size} entries but there are {n} requests")
            if not np.all(np.isfinite(tt)) or np.any(tt < 0) or np.any(np.diff(tt) < 0):
                raise SpecError("trace_times must be finite, >= 0 and non-decreasing (seconds)")
            tt.setflags(write=False)
        for a in (inp, out):
            a.setflags(write=False)
        object.__setattr__(self, "input_lengths", inp)
        object.__setattr__(self, "output_lengths", out)
        object.__setattr__(self, "trace_times", tt)
        object.__setattr__(self, "num_requests", int(n))
        h = hashlib.sha1()
        for a in (inp, out) + ((tt,) if tt is not None else ()):
            h.update(a.tobytes())
        h.update(f"{self.arrival}|{self.cv!r}".encode())
        self._check_sessions(n, h)
        object.__setattr__(self, "_digest", h.hexdigest())

    # equality and hashing by content (arrays do not compare as scalars)
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Workload) and self._digest == other._digest

    def __hash__(self) -> int:
        return hash(self._digest)

    # ------------------------------------------------------------------ constructors
    @staticmethod
    def scenario(name: str, num_requests: int = 10000, *, arrival: str = "poisson", cv: float = 1.0) -> Workload:
        """BestServe operating scenario ``op1`` .. ``op4`` with fixed lengths."""
        key = name.lower()
        if key not in SCENARIOS:
            raise SpecError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
        s_in, s_out = SCENARIOS[key]
        return Workload(input_lengths=s_in, output_lengths=s_out, num_requests=num_requests,
                        arrival=arrival, cv=cv, name=key)

    @staticmethod
    def fixed(input_len: int, output_len: int, num_requests: int = 10000, *, arrival: str = "poisson",
              cv: float = 1.0) -> Workload:
        """Every request with ``input_len`` prompt and ``output_len`` output tokens."""
        return Workload(input_lengths=input_len, output_lengths=output_len, num_requests=num_requests,
                        arrival=arrival, cv=cv, name=f"{input_len}/{output_len}")

    @staticmethod
    def from_distributions(input_dist: LengthDist | int, output_dist: LengthDist | int, num_requests: int, *,
                           seed: int = 0, arrival: str = "poisson", cv: float = 1.0, name: str = "") -> Workload:
        """Draw ``num_requests`` lengths from the two distributions (a seeded stream separate
        from the arrival stream, so lengths never depend on the rate)."""
        if not isinstance(num_requests, int) or num_requests < 1:
            raise SpecError(f"num_requests={num_requests!r} must be a positive integer")
        rng = np.random.default_rng([int(seed), _LENGTH_STREAM])
        dists = [LengthDist(kind="fixed", value=d) if isinstance(d, int) else d for d in (input_dist, output_dist)]
        inp = dists[0].sample(rng, num_requests)
        out = dists[1].sample(rng, num_requests)
        return Workload(input_lengths=inp, output_lengths=out, num_requests=num_requests, arrival=arrival, cv=cv,
                        name=name or f"{dists[0].kind}/{dists[1].kind}")

    @staticmethod
    def from_dataset(name: str, num_requests: int, *, seed: int = 0, arrival: str = "poisson",
                     cv: float = 1.0) -> Workload:
        """``num_requests`` lengths drawn from a bundled dataset (``azure-conv``, ``azure-code``,
        ``arxiv-sum``; :mod:`serveplan.sim.datasets`), from the same seeded length stream as
        :meth:`from_distributions`."""
        from serveplan.sim.datasets import length_table

        if not isinstance(num_requests, int) or num_requests < 1:
            raise SpecError(f"num_requests={num_requests!r} must be a positive integer")
        table = length_table(name)
        inp, out = table.sample(np.random.default_rng([int(seed), _LENGTH_STREAM]), num_requests)
        return Workload(input_lengths=inp, output_lengths=out, num_requests=num_requests, arrival=arrival, cv=cv,
                        name=name)

    @staticmethod
    def from_trace(path: str | Path, num_requests: int | None = None) -> Workload:
        """Read a CSV (header row) or JSONL trace with an arrival time (s), input and output
        lengths per request. Accepted column names: ``arrival_s``/``arrival``/``timestamp``/``time``,
        ``input_len``/``input_length``/``input_tokens``/``prompt_len``,
        ``output_len``/``output_length``/``output_tokens``. Rows are sorted by arrival and shifted
        so the first arrives at 0; ``num_requests`` keeps the first rows."""
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as exc:
            raise SpecError(f"trace={str(path)!r} cannot be read ({exc.strerror or exc}); "
                            "expected a CSV or JSONL file") from None
        if '"hash_ids"' in text[:4096]:  # the Mooncake format: milliseconds and block hashes
            from serveplan.sim.sessions import mooncake_workload

            return mooncake_workload(text, num_requests=num_requests, name=p.name)
        rows: list[dict[str, Any]] = []
        if p.suffix.lower() in (".jsonl", ".json", ".ndjson") or text.lstrip().startswith("{"):
            for i, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    raise SpecError(f"trace={str(path)!r} line {i}: not valid JSON") from None
        else:
            rows = list(csv.DictReader(text.splitlines()))
        if not rows:
            raise SpecError(f"trace={str(path)!r} has no requests; "
                            "expected rows with arrival, input and output lengths")
        cols = {
            "arrival": ("arrival_s", "arrival", "arrival_time", "timestamp", "time"),
            "input": ("input_len", "input_length", "input_tokens", "prompt_len", "prompt_tokens"),
            "output": ("output_len", "output_length", "output_tokens", "completion_tokens"),
        }
        keys = {}
        for what, names in cols.items():
            found = next((k for k in names if k in rows[0]), None)
            if found is None:
                raise SpecError(f"trace={str(path)!r}: no {what} column; expected one of: {', '.join(names)}")
            keys[what] = found
        try:
            t = np.array([float(r[keys["arrival"]]) for r in rows])
            inp = np.array([float(r[keys["input"]]) for r in rows])
            out = np.array([float(r[keys["output"]]) for r in rows])
        except (TypeError, ValueError):
            raise SpecError(f"trace={str(path)!r}: arrival and lengths must be numbers") from None
        order = np.argsort(t, kind="stable")
        t, inp, out = t[order] - t[order][0], inp[order], out[order]
        if num_requests is not None:
            t, inp, out = t[:num_requests], inp[:num_requests], out[:num_requests]
        return Workload(input_lengths=inp, output_lengths=out, arrival="trace", trace_times=t,
                        num_requests=len(t), name=p.name)

    def _check_sessions(self, n: int, h: Any) -> None:
        if self.prefix_cached:
            from serveplan.sim.sessions import check_session_fields, digest_session_fields

            check_session_fields(self, n)
            digest_session_fields(self, h)

    # ------------------------------------------------------------------ helpers
    @property
    def prefix_cached(self) -> bool:
        """Whether requests share prompt blocks (sessions, trace hashes or a system prompt): the
        simulator then runs its prefix cache."""
        return self.session is not None or self.hash_ids is not None or self.system_prompt_len > 0

    @property
    def max_tokens(self) -> int:
        """Largest ``input + output`` of a request (KV tokens it needs at its last step)."""
        return int(np.max(self.input_lengths + self.output_lengths))

    def describe(self) -> str:
        inp, out = self.input_lengths, self.output_lengths
        if inp.min() == inp.max() and out.min() == out.max():
            lens = f"{int(inp[0])} in / {int(out[0])} out"
        else:
            lens = f"mean {inp.mean():.0f} in / {out.mean():.0f} out"
        arr = self.arrival + (f" cv {self.cv:g}" if self.arrival == "gamma" else "")
        return f"{self.name + ': ' if self.name else ''}{self.num_requests} requests, {lens}, {arr}"


def build_workload(*, scenario: str | None = None, input_len: int | None = None, output_len: int | None = None,
                   trace: str | Path | None = None, length_dist: str | None = None, num_requests: int = 10000,
                   arrival: str = "poisson", cv: float = 1.0, seed: int = 0, dataset: str | None = None) -> Workload:
    """A request stream from one source: a BestServe ``scenario`` (the default, ``op2``), fixed
    ``input_len`` / ``output_len``, a ``trace`` file, ``length_dist`` (``'INPUT;OUTPUT'``
    distributions, e.g. ``'normal:2048,512;uniform:16,128'``, drawn with ``seed``) or a bundled
    ``dataset`` (``azure-conv``, ``azure-code``, ``arxiv-sum``, drawn with ``seed``).

    Raises
    ------
    SpecError
        More than one source, half a fixed pair, a malformed distribution, or ``num_requests < 1``.
    """
    if isinstance(num_requests, bool) or not isinstance(num_requests, (int, np.integer)) or num_requests < 1:
        raise SpecError(f"num-requests={num_requests} must be a positive integer")
    given = [n for n, v in (("scenario", scenario), ("input-len/output-len", input_len or output_len),
                            ("trace", trace), ("length-dist", length_dist), ("dataset", dataset)) if v]
    if len(given) > 1:
        raise SpecError(f"give one request source; got {', '.join(given)}")
    if dataset:
        return Workload.from_dataset(dataset, num_requests, seed=seed, arrival=arrival, cv=cv)
    if trace:
        return Workload.from_trace(trace, num_requests=num_requests)
    if length_dist:
        parts = length_dist.split(";")
        if len(parts) != 2:
            raise SpecError(f"length-dist={length_dist!r}; expected 'INPUT;OUTPUT', "
                            "e.g. 'normal:2048,512;uniform:16,128'")
        return Workload.from_distributions(LengthDist.parse(parts[0]), LengthDist.parse(parts[1]), num_requests,
                                           seed=seed, arrival=arrival, cv=cv)
    if input_len is not None or output_len is not None:
        if input_len is None or output_len is None:
            raise SpecError("give both input-len and output-len (or a scenario)")
        return Workload.fixed(input_len, output_len, num_requests=num_requests, arrival=arrival, cv=cv)
    return Workload.scenario(scenario or "op2", num_requests=num_requests, arrival=arrival, cv=cv)


def build_workloads(*, scenarios: str | None = None, num_requests: int = 10000, **source: Any) -> list[Workload]:
    """One workload per comma-separated scenario (``"op1,op2"``), or the single stream of the
    other sources of :func:`build_workload` (``input_len``/``output_len``, ``trace``, ...)."""
    if scenarios is None:
        return [build_workload(num_requests=num_requests, **source)]
    names = [s.strip() for s in scenarios.split(",")]
    if not all(names):
        raise SpecError(f"scenario={scenarios!r} has an empty entry; expected a comma-separated list of "
                        f"{', '.join(SCENARIOS)}")
    return [build_workload(scenario=n, num_requests=num_requests, **source) for n in names]


def arrival_times(workload: Workload, rate: float | None, seed: int) -> np.ndarray:
    """Arrival times (s) with common random numbers.

    ``poisson``: unit-rate exponential gaps; ``gamma``: Gamma gaps of mean 1 and coefficient of
    variation ``cv`` (shape ``1/cv^2``, scale ``cv^2``); both cumulated and divided by ``rate``.
    ``trace``: the trace's own times (``rate`` unused).
    """
    n = workload.num_requests
    if workload.arrival == "trace":
        return np.array(workload.trace_times, dtype=float)
    if rate is None or not (math.isfinite(rate) and rate > 0):
        raise SpecError(f"rate={rate!r} must be a positive number of requests per second")
    rng = np.random.default_rng(seed)
    if workload.arrival == "poisson":
        gaps = rng.exponential(1.0, size=n)
    else:
        k = 1.0 / workload.cv**2
        gaps = rng.gamma(k, 1.0 / k, size=n)
    return np.cumsum(gaps) / rate
