"""Per-request state of one simulation and the per-request records of its result.

The running state is kept as plain Python lists indexed by request id (scalar access in the
event loop is several times faster on lists than on numpy arrays); :meth:`RequestState.records`
turns them into numpy arrays at the end.

Token bookkeeping (consistent with :func:`serveplan.estimator.static.static_batch`):

* ``prompt_len`` tokens are prefilled (the input, or input + generated tokens after a
  recompute preemption); ``prefilled`` counts the part already done (chunked prefill).
* ``kv_len`` tokens are in the KV cache. A prefill of ``L`` tokens leaves ``kv_len = L`` and
  emits one token; a decode step attends ``kv_len + 1`` keys, writes one KV entry and emits one
  token. A request with ``output`` tokens therefore needs ``output - 1`` decode steps.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

NAN = math.nan


class RequestState:
    """Mutable per-request state shared by the instances of one run."""

    def __init__(self, arrival: np.ndarray, input_len: np.ndarray, output_len: np.ndarray) -> None:
        n = len(arrival)
        self.n = n
        self.arrival: list[float] = arrival.tolist()
        self.inp: list[int] = input_len.tolist()
        self.out: list[int] = output_len.tolist()
        self.prompt_len: list[int] = list(self.inp)
        self.prefilled = [0] * n
        self.kv_len = [0] * n
        self.gen = [0] * n
        self.blocks = [0] * n
        self.ready_at = [0.0] * n          # earliest time the request may join a step (pipeline exit)
        self.kv_ready = [False] * n        # KV present on arrival at the instance (disaggregated decode)
        self.first_token = [NAN] * n
        # latest first token and finish so far (whoever sets one keeps these up to date)
        self.last_first = -math.inf
        self.last_finish = -math.inf
        self.finish = [NAN] * n
        self.start = [NAN] * n             # first step that computes for the request
        self.decode_arrival = [NAN] * n    # KV arrives at the decode instance (disaggregation)
        self.decode_start = [NAN] * n      # admitted by the decode instance
        self.p_inst = [-1] * n
        self.d_inst = [-1] * n
        self.bubble = [0.0] * n
        self.preemptions = [0] * n

    #: the per-request lists (all indexed by request)
    SLOTS = ("arrival", "inp", "out", "prompt_len", "prefilled", "kv_len", "gen", "blocks", "ready_at", "kv_ready",
             "first_token", "finish", "start", "decode_arrival", "decode_start", "p_inst", "d_inst", "bubble",
             "preemptions")

    def add(self, arrival: list[float], inp: list[int], out: list[int]) -> None:
        """Append requests (a windowed run's next chunk, :mod:`serveplan.sim.stream`)."""
        k = len(arrival)
        self.arrival += arrival
        self.inp += inp
        self.out += out
        self.prompt_len += inp
        for name, zero in (("prefilled", 0), ("kv_len", 0), ("gen", 0), ("blocks", 0), ("ready_at", 0.0),
                           ("kv_ready", False), ("first_token", NAN), ("finish", NAN), ("start", NAN),
                           ("decode_arrival", NAN), ("decode_start", NAN), ("p_inst", -1), ("d_inst", -1),
                           ("bubble", 0.0), ("preemptions", 0)):
            getattr(self, name).extend([zero] * k)
        self.n += k

    def keep(self, slots: list[int]) -> None:
        """Keep only the requests ``slots`` (in that order), renumbered from 0; every list is
        changed in place (the KV cache and the schedulers hold references to them)."""
        for name in self.SLOTS:
            lst = getattr(self, name)
            lst[:] = [lst[q] for q in slots]
        self.n = len(slots)

    def apply_prefix_hit(self, share: float, start: int = 0) -> int:
        """Mark ``share`` of the prompt of every request from ``start`` on (at least one token left
        to compute) as found in the prefix cache: those tokens count as prefilled. Returns the
        prompt tokens saved."""
        saved = 0
        for q in range(start, self.n):
            hit = min(int(share * self.inp[q]), self.inp[q] - 1)
            self.prefilled[q] = hit
            saved += hit
        return saved

    def records(self) -> RequestRecords:
        def f(a: list[float]) -> np.ndarray:
            return np.asarray(a, dtype=float)

        arrival, first, finish = f(self.arrival), f(self.first_token), f(self.finish)
        out = np.asarray(self.out, dtype=np.int64)
        ttft = first - arrival
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.where(np.isfinite(finish), 0.0, NAN))
        start = f(self.start)
        dq = f(self.decode_start) - f(self.decode_arrival)
        return RequestRecords(
            arrival=arrival, first_token=first, finish=finish, ttft=ttft, tpot=tpot, e2e=finish - arrival,
            queue=start - arrival, decode_queue=np.where(np.isfinite(dq), dq, 0.0),
            input_len=np.asarray(self.inp, dtype=np.int64), output_len=out,
            prefill_instance=np.asarray(self.p_inst, dtype=np.int64),
            decode_instance=np.asarray(self.d_inst, dtype=np.int64),
            bubble=f(self.bubble), preemptions=np.asarray(self.preemptions, dtype=np.int64),
        )


@dataclass(frozen=True, slots=True, eq=False)
class RequestRecords:
    """Per-request arrays (seconds; NaN where a request did not get that far).

    ``queue`` is the wait from arrival to the first step that computes for the request;
    ``decode_queue`` the wait of a disaggregated request at its decode instance (0 when
    collocated); ``bubble`` the pipeline-bubble time summed over the request's micro-batches.
    """

    arrival: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    ttft: np.ndarray
    tpot: np.ndarray
    e2e: np.ndarray
    queue: np.ndarray
    decode_queue: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    prefill_instance: np.ndarray
    decode_instance: np.ndarray
    bubble: np.ndarray
    preemptions: np.ndarray

    FIELDS = ("arrival", "first_token", "finish", "ttft", "tpot", "e2e", "queue", "decode_queue", "input_len",
              "output_len", "prefill_instance", "decode_instance", "bubble", "preemptions")

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.FIELDS:
            raise KeyError(name)
        arr: np.ndarray = getattr(self, name)
        return arr

    def __len__(self) -> int:
        return len(self.arrival)

    def to_dict(self) -> dict[str, list[Any]]:
        return {k: [None if (isinstance(v, float) and not math.isfinite(v)) else v for v in getattr(self, k).tolist()]
                for k in self.FIELDS}

    def write_csv(self, path: str | Path) -> Path:
        """One row per request, seconds and token counts."""
        p = Path(path)
        cols = [getattr(self, k) for k in self.FIELDS]
        with p.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["id", *[k + ("_s" if k not in ("input_len", "output_len", "prefill_instance",
                                                       "decode_instance", "preemptions") else "")
                                for k in self.FIELDS]])
            for i in range(len(self)):
                w.writerow([i, *[_fmt(c[i]) for c in cols]])
        return p


def _fmt(v: Any) -> str:
    if isinstance(v, (float, np.floating)):
        return "" if not math.isfinite(v) else repr(float(v))
    return str(int(v))
