"""Long open-loop runs in bounded memory: a window of requests in flight, records kept compact.

A simulation keeps its running per-request state in Python lists indexed by request
(:class:`~serveplan.sim.request.RequestState`): fast in the event loop, but about 300 bytes per
request, so 10^7 requests would need several GB. Above :data:`WINDOW_MIN_REQUESTS` requests an
open-loop stream through a collocated fleet runs *windowed* instead:

* the requests enter in chunks of :data:`CHUNK` (their arrival times and lengths read from the
  compact arrays of the workload and the arrival process); after routing a chunk, every instance
  runs the steps that start before the next chunk's first arrival (nothing of the next chunk can
  join them: the same boundary an early-stop checkpoint uses);
* then the window is compacted: every finished request's record goes into a
  :class:`RecordStore` (compact numpy arrays, 76 bytes per request, the same float arithmetic as
  :meth:`RequestState.records`, so percentiles are exact), and the requests still in flight are
  renumbered in order (relative order, and so every tie-break, is kept);
* the instances' queues, running sets and inboxes are renumbered the same way; the KV block list
  is shared and compacted in place.

The running state thus grows with the requests in flight, not with the requests simulated. The
result is the same simulation: scheduling decisions are identical; a decode stretch cut at a
chunk boundary continues from its end time, so later step end times may differ from an
unwindowed run in the last bits (relative 1e-15), as with early-stop checkpoints. Runs of at most
:data:`WINDOW_MIN_REQUESTS` requests (every test and golden number) take the unwindowed path.

Not windowed (state grows with the stream): closed loops, offline runs (every request is in
flight from t=0), disaggregated fleets (the decode stage runs after the whole prefill stage) and
early-stop runs (optimizer probes, a few thousand requests). A simulation holds at most
:data:`MAX_REQUESTS` requests (records are exact: 2^24 x ~100 bytes is the bound).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from serveplan.errors import SpecError
from serveplan.sim.cluster import Stage
from serveplan.sim.request import NAN, RequestRecords, RequestState
from serveplan.sim.workload import MAX_REQUESTS  # requests one simulation may hold: one limit, the workload's

#: Runs with more requests than this are windowed (when their kind allows it).
WINDOW_MIN_REQUESTS = 1 << 15
#: Requests entering per chunk (a compaction per chunk).
CHUNK = 1 << 14


class RecordStore:
    """Exact per-request records of a windowed run, by request id, filled as requests leave the window."""

    def __init__(self, arrival: np.ndarray, input_len: np.ndarray, output_len: np.ndarray) -> None:
        n = len(arrival)
        self.n = n
        self.arrival = arrival
        self.input_len = np.asarray(input_len)
        self.output_len = np.asarray(output_len)
        self.first_token = np.full(n, NAN)
        self.finish = np.full(n, NAN)
        self.ttft = np.full(n, NAN)
        self.tpot = np.full(n, NAN)
        self.e2e = np.full(n, NAN)
        self.queue = np.full(n, NAN)
        self.decode_queue = np.zeros(n)
        self.bubble = np.zeros(n)
        self.prefill_instance = np.full(n, -1, dtype=np.int32)
        self.decode_instance = np.full(n, -1, dtype=np.int32)
        self.preemptions = np.zeros(n, dtype=np.int32)
        self.stored = 0

    def absorb(self, req: RequestState, rids: Sequence[int], slots: Sequence[int]) -> None:
        """Record the requests in window ``slots`` (request ids ``rids``)."""
        if not slots:
            return
        idx = np.asarray(rids, dtype=np.int64)
        s = np.asarray(slots, dtype=np.int64)

        def f(values: list[float]) -> np.ndarray:
            return np.asarray(values, dtype=float)[s]

        # the arithmetic of RequestState.records, element for element
        arrival, first, finish = f(req.arrival), f(req.first_token), f(req.finish)
        out = np.asarray(req.out, dtype=np.int64)[s]
        ttft = first - arrival
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.where(np.isfinite(finish), 0.0, NAN))
        dq = f(req.decode_start) - f(req.decode_arrival)
        self.first_token[idx] = first
        self.finish[idx] = finish
        self.ttft[idx] = ttft
        self.tpot[idx] = tpot
        self.e2e[idx] = finish - arrival
        self.queue[idx] = f(req.start) - arrival
        self.decode_queue[idx] = np.where(np.isfinite(dq), dq, 0.0)
        self.bubble[idx] = f(req.bubble)
        self.prefill_instance[idx] = np.asarray(req.p_inst, dtype=np.int64)[s]
        self.decode_instance[idx] = np.asarray(req.d_inst, dtype=np.int64)[s]
        self.preemptions[idx] = np.asarray(req.preemptions, dtype=np.int64)[s]
        self.stored += len(slots)

    def records(self) -> RequestRecords:
        return RequestRecords(
            arrival=self.arrival, first_token=self.first_token, finish=self.finish, ttft=self.ttft, tpot=self.tpot,
            e2e=self.e2e, queue=self.queue, decode_queue=self.decode_queue, input_len=self.input_len,
            output_len=self.output_len, prefill_instance=self.prefill_instance,
            decode_instance=self.decode_instance, bubble=self.bubble, preemptions=self.preemptions)


def _compact(req: RequestState, rids: list[int], stage: Stage, store: RecordStore) -> None:
    """Move the finished requests of the window into ``store`` and renumber the rest in order."""
    stage.settle()   # the running requests' lengths move with them
    fin = req.finish
    keep = [q for q in range(req.n) if fin[q] != fin[q]]
    if len(keep) == req.n:
        return
    kept = set(keep)
    done = [q for q in range(req.n) if q not in kept]
    store.absorb(req, [rids[q] for q in done], done)
    new = {q: i for i, q in enumerate(keep)}
    req.keep(keep)
    rids[:] = [rids[q] for q in keep]
    for inst in stage.instances:
        inst.renumber(new)


def run_windowed(stage: Stage, req: RequestState, arrival: np.ndarray, input_len: np.ndarray,
                 output_len: np.ndarray, *, prefix_hit: float = 0.0,
                 on_progress: Callable[[int], None] | None = None) -> tuple[RecordStore, int]:
    """Run an open-loop stream (non-decreasing ``arrival``) through one collocated stage in a
    window (module doc). ``req`` starts empty. Returns the records and the prompt tokens found in
    the prefix cache; ``on_progress(requests finished)`` is called once per chunk."""
    n = len(arrival)
    store = RecordStore(arrival, input_len, output_len)
    rids: list[int] = []
    insts, router, assign, cap = stage.instances, stage.router, stage.assign, stage.cap
    saved = 0
    j = 0
    while j < n:
        j1 = min(n, j + CHUNK)
        base = req.n
        times = arrival[j:j1].tolist()
        req.add(times, input_len[j:j1].tolist(), output_len[j:j1].tolist())
        rids.extend(range(j, j1))
        if prefix_hit:
            saved += req.apply_prefix_hit(prefix_hit, base)
        ids = range(base, base + (j1 - j))
        if router.reads_load:   # one request at a time, as the fleet's Arrive events route them
            if times[-1] >= cap:
                ids = range(base, base + sum(1 for t in times if t < cap))
                times = times[: len(ids)]
                j1 = n   # what arrives after the cap is never routed
            for t, q in zip(times, ids, strict=True):
                stage.route(t, q)
        else:
            for i, t, q in zip(router.picks(insts, len(ids)), times, ids, strict=True):
                stage.deliver(i, t, q)
                assign(q, i)
        if j1 < n:
            stage.advance(min(float(arrival[j1]), cap))   # the steps that start before the next chunk
            _compact(req, rids, stage, store)
        if on_progress is not None:
            on_progress(store.stored)
        j = j1
    stage.advance(cap)
    stage.settle()
    store.absorb(req, rids, list(range(req.n)))
    if on_progress is not None:
        on_progress(int(np.count_nonzero(np.isfinite(store.finish))))
    return store, saved


def windowed(n: int, *, offline: bool, closed: bool, disaggregated: bool, early_stop: bool, iteration: bool) -> bool:
    """Whether a run of ``n`` requests of this kind runs windowed (module doc)."""
    return (n > WINDOW_MIN_REQUESTS and iteration and not (offline or closed or disaggregated or early_stop))


def check_size(n: int) -> None:
    """Refuse a stream longer than :data:`MAX_REQUESTS` (with the limit and the reason)."""
    if n > MAX_REQUESTS:
        raise SpecError(f"num_requests={n:,}: a simulation holds at most {MAX_REQUESTS:,} requests (each keeps an "
                        f"exact record, ~100 bytes: {MAX_REQUESTS * 100 / 1e9:.1f} GB at the limit); simulate fewer "
                        "requests, which estimate the same percentiles to well within their noise")


__all__ = ["CHUNK", "MAX_REQUESTS", "WINDOW_MIN_REQUESTS", "RecordStore", "check_size", "run_windowed", "windowed"]
