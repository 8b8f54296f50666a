"""Request streams: lengths (fixed, distributions, empirical lists, traces) and arrival times.

Traces in the Mooncake format (:func:`mooncake_workload`, read by :meth:`Workload.from_trace`)
carry per-request prompt block hashes for the prefix cache; multi-turn sessions are drawn by
:func:`serveplan.sim.sessions.session_workload`. A workload whose requests share prompt blocks
(sessions, block hashes, a system prompt: :attr:`Workload.prefix_cached`) has those fields checked
here, with the rest of the workload.

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
import dataclasses
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from serveplan.errors import SpecError, check_int, check_number

#: BestServe §12 operating scenarios: (input tokens, output tokens).
SCENARIOS: dict[str, tuple[int, int]] = {
    "op1": (8192, 512),
    "op2": (2048, 64),
    "op3": (1024, 64),
    "op4": (256, 2048),
}

class Arrival(str, Enum):
    """How requests arrive: a ``str`` enum (``arrival == "poisson"`` holds, records keep the string)."""

    POISSON = "poisson"   # exponential gaps at the rate
    GAMMA = "gamma"       # gamma gaps of coefficient of variation ``cv`` (1: Poisson)
    TRACE = "trace"       # the trace's own times

    def __str__(self) -> str:
        return self.value


ARRIVALS = tuple(a.value for a in Arrival)
#: Most requests one workload may hold: arrival times and lengths are drawn up front (24 bytes a
#: request) and the simulator keeps a record per request, so a larger stream is refused rather
#: than exhausting memory (10^8 requests grew past 18 GB). 10^7 is the stream the memory
#: benchmark runs; raise it here once per-request records are summarised as they complete.
MAX_REQUESTS = 1 << 24
#: Largest tokens of one request (input or output): 2**31, a 32-bit position index. A model's own
#: ``max_position_embeddings`` is checked where the model is known (SimulationConfig).
MAX_LENGTH = 2**31
#: Largest coefficient of variation of Gamma gaps: shape 1/cv^2 = 1e-4 at the limit; beyond it
#: nearly every gap underflows to zero and the stream is a handful of bursts.
MAX_CV = 100.0
_REQUESTS_WHY = ("arrival times and lengths are drawn up front and every request keeps an exact record, "
                 "about 100 bytes a request (sim/stream.py)")
LENGTH_KINDS = ("fixed", "uniform", "normal", "lognormal", "empirical")

#: Entropy appended to the seed for the length stream, so lengths never share draws with arrivals
#: (every generator of lengths draws from ``np.random.default_rng([seed, LENGTH_STREAM])``: these
#: constructors, the bundled datasets and :func:`~serveplan.sim.sessions.session_workload`).
LENGTH_STREAM = 0x1E4
#: tokens per Mooncake trace block (FAST25-release README)
MOONCAKE_BLOCK = 512


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
        check_int(name, value, low=1, high=MAX_LENGTH, why="tokens of one request")
        if n is None:
            raise SpecError(f"{name}={value} is a single length: give num_requests too")
        return np.full(n, int(value), dtype=np.int64)
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.size == 0:
        raise SpecError(f"{name} must be a positive integer or a non-empty list of them, got {value!r:.80}")
    if not np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_:
        raise SpecError(f"{name} must hold positive integers (tokens); got {arr.dtype} values")
    bad = ~np.isfinite(arr) | (arr != np.rint(arr)) | (arr < 1) | (arr > MAX_LENGTH)
    if np.any(bad):
        i = int(np.argmax(bad))
        raise SpecError(f"{name}[{i}]={arr[i]!r} must be a positive integer number of tokens <= {MAX_LENGTH:,}")
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
    arrival: Arrival | str = Arrival.POISSON
    cv: float = 1.0
    trace_times: Any = None
    num_requests: int | None = None
    name: str = ""
    _digest: str = field(default="", repr=False)
    #: multi-turn sessions (:func:`serveplan.sim.sessions.session_workload`): each request's
    #: session id and turn (0 first); its next turn is sent ``think_s`` after its answer ends
    session: np.ndarray | None = None
    turn: np.ndarray | None = None
    think_s: float = 0.0
    #: per request, the trace's prompt block hashes (Mooncake format, :func:`mooncake_workload`),
    #: each of ``hash_block`` tokens
    hash_ids: Sequence[Sequence[int]] | None = None
    hash_block: int = MOONCAKE_BLOCK
    #: tokens of a system prompt every request starts with (counted in ``input_lengths``)
    system_prompt_len: int = 0
    #: sessions kept within the model's context: per request, the first turn of its session its prompt
    #: still holds (None: every turn), and how many turns dropped older ones
    context_start: np.ndarray | None = None
    dropped_turns: int = 0

    def __post_init__(self) -> None:
        n = self.num_requests
        if n is not None:
            check_int("num_requests", n, low=1, high=MAX_REQUESTS, why=_REQUESTS_WHY)
        if n is None:
            for v in (self.input_lengths, self.output_lengths, self.trace_times):
                if v is not None and not isinstance(v, (int, np.integer)):
                    n = len(v)
                    break
        inp = _as_lengths(self.input_lengths, n, "input_lengths")
        n = inp.size
        out = _as_lengths(self.output_lengths, n, "output_lengths")
        try:
            object.__setattr__(self, "arrival", Arrival(self.arrival))
        except ValueError:
            raise SpecError(f"arrival={self.arrival!r}; expected one of: {', '.join(ARRIVALS)}") from None
        check_number("cv", self.cv, low=0, high=MAX_CV, low_open=True,
                     why="coefficient of variation of gamma gaps, 1 = Poisson; above 100 nearly every gap is 0")
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
        check_int("num_requests", num_requests, low=1, high=MAX_REQUESTS, why=_REQUESTS_WHY)
        rng = np.random.default_rng([int(seed), LENGTH_STREAM])
        dists = [LengthDist(kind="fixed", value=d) if isinstance(d, int) else d for d in (input_dist, output_dist)]
        inp = dists[0].sample(rng, num_requests)
        out = dists[1].sample(rng, num_requests)
        return Workload(input_lengths=inp, output_lengths=out, num_requests=num_requests, arrival=arrival, cv=cv,
                        name=name or f"{dists[0].kind}/{dists[1].kind}")

    @staticmethod
    def from_dataset(name: str, num_requests: int, *, seed: int = 0, arrival: str = "poisson",
                     cv: float = 1.0) -> Workload:
        """``num_requests`` lengths drawn from a bundled dataset (``azure-conv``, ``azure-code``,
        ``arxiv-sum``, ``sharegpt``; :mod:`serveplan.sim.datasets`), from the same seeded length stream as
        :meth:`from_distributions`."""
        from serveplan.sim.datasets import length_table

        check_int("num_requests", num_requests, low=1, high=MAX_REQUESTS, why=_REQUESTS_WHY)
        table = length_table(name)
        inp, out = table.sample(np.random.default_rng([int(seed), LENGTH_STREAM]), num_requests)
        return Workload(input_lengths=inp, output_lengths=out, num_requests=num_requests, arrival=arrival, cv=cv,
                        name=name)

    def scaled_to(self, mean_input: float | None = None, mean_output: float | None = None, *,
                  name: str | None = None) -> Workload:
        """Each length scaled by a stated mean over this stream's (rounded, at least one token);
        ``None`` leaves that side as it is: a bundled table's spread at a source's printed means."""
        def scale(x: np.ndarray, mean: float | None) -> np.ndarray:
            if mean is None:
                return x
            return np.maximum(1, np.rint(x * (mean / float(np.mean(x))))).astype(np.int64)
        return dataclasses.replace(self, input_lengths=scale(self.input_lengths, mean_input),
                                   output_lengths=scale(self.output_lengths, mean_output),
                                   name=self.name if name is None else name)

    def tiled(self, k: int) -> Workload:
        """This stream's lengths ``k`` times over (``k`` times as many requests, same mix; the
        arrivals are drawn afresh for the longer stream): a longer run of the same traffic."""
        check_int("k", k, low=1)
        if k == 1:
            return self
        if self.arrival == "trace" or self.session is not None or self.hash_ids is not None:
            raise SpecError("a trace, sessions or block hashes cannot be repeated request by request")
        return dataclasses.replace(self, input_lengths=np.tile(self.input_lengths, k),
                                   output_lengths=np.tile(self.output_lengths, k),
                                   num_requests=len(self.input_lengths) * k, name=f"{self.name} x{k}")

    def within_context(self, max_tokens: int) -> Workload:
        """This stream with every request cut to ``max_tokens`` (prompt plus output), as chat
        clients cut what they send to the model's context: the output is kept (up to
        ``max_tokens - 1``) and the prompt keeps its newest tokens. The name says how many requests
        were cut; ``self`` when none is too long. Sessions keep their own rule
        (:func:`~serveplan.sim.sessions.session_workload` ``max_context``)."""
        check_int("max_tokens", max_tokens, low=2)
        total = self.input_lengths + self.output_lengths
        over = total > max_tokens
        n_over = int(np.count_nonzero(over))
        if not n_over:
            return self
        if self.session is not None or self.hash_ids is not None:
            raise SpecError(f"{n_over} requests exceed the {max_tokens:,}-token context; sessions and traces with "
                            "block hashes cannot be cut request by request (give --allow-long-context)")
        out = np.minimum(self.output_lengths, max_tokens - 1 - self.system_prompt_len)
        inp = np.where(over, np.maximum(max_tokens - out, self.system_prompt_len + 1), self.input_lengths)
        return dataclasses.replace(self, input_lengths=inp, output_lengths=out,
                                   name=f"{self.name} ({n_over} of {self.num_requests} requests cut to the "
                                        f"{max_tokens:,}-token context, newest prompt tokens kept)")

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
        except UnicodeDecodeError:
            raise SpecError(f"trace={str(path)!r} is not text (binary content); expected a CSV or JSONL file") from None
        if '"hash_ids"' in text[:4096]:  # the Mooncake format: milliseconds and block hashes
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
            try:
                rows = list(csv.DictReader(text.splitlines()))
            except csv.Error as exc:
                raise SpecError(f"trace={str(path)!r} is not a valid CSV file ({exc}); expected a header row "
                                "and one row per request") from None
        if not rows:
            raise SpecError(f"trace={str(path)!r} has no requests; "
                            "expected rows with arrival, input and output lengths")
        cols = {
            "arrival": ("arrival_s", "arrival", "arrival_time", "timestamp", "time"),
            "input": ("input_len", "input_length", "input_tokens", "prompt_len", "prompt_tokens"),
            "output": ("output_len", "output_length", "output_tokens", "completion_tokens"),
        }
        if not isinstance(rows[0], dict):
            raise SpecError(f"trace={str(path)!r} row 1: expected a record with arrival, input and output lengths, "
                            f"got {rows[0]!r:.60}")
        keys = {}
        for what, names in cols.items():
            found = next((k for k in names if k in rows[0]), None)
            if found is None:
                raise SpecError(f"trace={str(path)!r}: no {what} column; expected one of: {', '.join(names)}")
            keys[what] = found
        t, inp, out = _trace_columns(rows, keys, str(path))
        order = np.argsort(t, kind="stable")
        t, inp, out = t[order] - t[order][0], inp[order], out[order]
        if num_requests is not None:
            t, inp, out = t[:num_requests], inp[:num_requests], out[:num_requests]
        return Workload(input_lengths=inp, output_lengths=out, arrival="trace", trace_times=t,
                        num_requests=len(t), name=p.name)

    def _check_sessions(self, n: int, h: Any) -> None:
        """Check the session / trace-hash fields (arrays stored as such) and feed them to the
        content digest ``h``."""
        if not self.prefix_cached:
            return
        for name in ("session", "turn", "context_start"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, np.asarray(v))
        self._check_session_fields(n)
        if self.hash_ids is not None:
            self._check_hash_fields(n)
        h.update(f"|{self.think_s!r}|{self.system_prompt_len}|{self.hash_block}".encode())
        for arr in (self.session, self.turn, self.context_start):
            if arr is not None:
                h.update(arr.tobytes())
        if self.hash_ids is not None:
            h.update(repr(self.hash_ids).encode())

    def _check_session_fields(self, n: int) -> None:
        if not (isinstance(self.think_s, (int, float)) and math.isfinite(self.think_s) and self.think_s >= 0):
            raise SpecError(f"think_time={self.think_s!r} must be a non-negative number of seconds")
        L = self.system_prompt_len
        if isinstance(L, bool) or not isinstance(L, (int, np.integer)) or L < 0:
            raise SpecError(f"system_prompt_len={L!r} must be a non-negative integer number of tokens")
        if L and int(np.min(self.input_lengths)) <= L:
            raise SpecError(f"system_prompt_len={L} must be shorter than every prompt (shortest "
                            f"{int(np.min(self.input_lengths))} tokens)")
        if (self.session is None) != (self.turn is None):
            raise SpecError("session and turn must be given together (one session id and turn per request)")
        if self.context_start is not None:
            a = self.context_start
            if (self.session is None or a.shape != (n,)
                    or (a.size and (a.min() < 0 or np.any(a > np.asarray(self.turn))))):
                raise SpecError(f"context_start must hold, per request of a session, its first kept turn ({n} "
                                "values, each at most the request's turn)")
        if self.session is not None:
            for name in ("session", "turn"):
                a = getattr(self, name)
                if a.shape != (n,) or not np.issubdtype(a.dtype, np.integer) or (a.size and a.min() < 0):
                    raise SpecError(f"{name} must hold one non-negative integer per request ({n})")

    def _check_hash_fields(self, n: int) -> None:
        assert self.hash_ids is not None
        if self.system_prompt_len or self.session is not None:
            raise SpecError("a trace's hash_ids already say which prompt blocks are shared; "
                            "drop system_prompt_len and sessions")
        if len(self.hash_ids) != n:
            raise SpecError(f"hash_ids has {len(self.hash_ids)} entries but there are {n} requests")
        if isinstance(self.hash_block, bool) or not isinstance(self.hash_block, int) or self.hash_block < 1:
            raise SpecError(f"hash_block={self.hash_block!r} must be a positive number of tokens")

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



def _trace_columns(rows: list[Any], keys: dict[str, str], path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrival times and lengths of every trace row, each checked (present, finite, lengths
    positive integers) with an error naming the row and the column."""
    cells: dict[str, list[float]] = {k: [] for k in keys}
    for i, r in enumerate(rows, 1):
        if not isinstance(r, dict):
            raise SpecError(f"trace={path!r} row {i}: expected a record with "
                            f"{', '.join(keys.values())}, got {r!r:.60}")
        for what, key in keys.items():
            v = r.get(key)
            if v is None or v == "" or isinstance(v, bool):
                raise SpecError(f"trace={path!r} row {i}: {key} is missing; every row needs "
                                f"{', '.join(keys.values())}")
            try:
                x = float(v)
            except (TypeError, ValueError, OverflowError):
                x = math.nan
            if not math.isfinite(x) or (what != "arrival" and (x < 1 or x != int(x) or x > MAX_LENGTH)):
                expected = ("a finite time in seconds" if what == "arrival"
                            else f"a positive integer number of tokens <= {MAX_LENGTH:,}")
                raise SpecError(f"trace={path!r} row {i}: {key}={v!r} must be {expected}")
            cells[what].append(x)
    return np.array(cells["arrival"]), np.array(cells["input"]), np.array(cells["output"])


def mooncake_workload(text: str, *, num_requests: int | None = None, name: str = "mooncake") -> Workload:
    """A Mooncake-format trace (JSONL rows ``{"timestamp": ms, "input_length",
    "output_length", "hash_ids": [...]}``, one hash per 512-token prompt block chaining its prefix,
    kvcache-ai/Mooncake ``FAST25-release/README.md``): arrivals in seconds from the first,
    the prompt block hashes kept for the prefix cache."""
    t: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    hashes: list[tuple[int, ...]] = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            ti, a, b = float(r["timestamp"]), int(r["input_length"]), int(r["output_length"])
            h = tuple(int(x) for x in r["hash_ids"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise SpecError(f"trace {name!r} line {i}: expected a Mooncake row {{\"timestamp\": ms, "
                            "\"input_length\": int, \"output_length\": int, \"hash_ids\": [int, ...]}") from None
        if a < 1 or b < 1 or not math.isfinite(ti):
            raise SpecError(f"trace {name!r} line {i}: input_length={a}, output_length={b} must be positive")
        if len(h) < math.ceil(a / MOONCAKE_BLOCK):
            raise SpecError(f"trace {name!r} line {i}: {len(h)} hash_ids for {a} input tokens; "
                            f"expected one per {MOONCAKE_BLOCK}-token block ({math.ceil(a / MOONCAKE_BLOCK)})")
        t.append(ti / 1000.0)  # milliseconds
        inp.append(a)
        out.append(b)
        hashes.append(h)
    if not t:
        raise SpecError(f"trace {name!r} has no requests")
    order = np.argsort(np.asarray(t), kind="stable")
    if num_requests is not None:
        order = order[:num_requests]
    ts = np.asarray(t)[order]
    return Workload(input_lengths=np.asarray(inp)[order], output_lengths=np.asarray(out)[order], arrival="trace",
                    trace_times=ts - ts[0], name=name, hash_ids=tuple(hashes[i] for i in order.tolist()),
                    hash_block=MOONCAKE_BLOCK)


def build_workload(*, scenario: str | None = None, input_len: int | None = None, output_len: int | None = None,
                   trace: str | Path | None = None, length_dist: str | None = None, num_requests: int = 10000,
                   arrival: str = "poisson", cv: float = 1.0, seed: int = 0, dataset: str | None = None) -> Workload:
    """A request stream from one source: a BestServe ``scenario`` (the default, ``op2``), fixed
    ``input_len`` / ``output_len``, a ``trace`` file, ``length_dist`` (``'INPUT;OUTPUT'``
    distributions, e.g. ``'normal:2048,512;uniform:16,128'``, drawn with ``seed``) or a bundled
    ``dataset`` (``azure-conv``, ``azure-code``, ``arxiv-sum``, ``sharegpt``, drawn with ``seed``).

    Raises
    ------
    SpecError
        More than one source, half a fixed pair, a malformed distribution, or ``num_requests < 1``.
    """
    check_int("num-requests", num_requests, low=1, high=MAX_REQUESTS, why=_REQUESTS_WHY)
    check_int("seed", seed, low=0)
    for flag, text in (("scenario", scenario), ("trace", trace), ("length-dist", length_dist), ("dataset", dataset)):
        if text is not None and not str(text).strip():
            raise SpecError(f"{flag}={text!r} is empty; give a value or leave the option out")
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
