"""BestServe's simulator (§3.4, Algorithms 2-7) for reproducing the paper.

Requests are not stepped token by token: a prefill batch occupies an instance for one
estimated prefill step, and a decode occupies one of the instance's ``max_batch`` *boxes* for its
whole decode, timed at the pseudo batch size of eq. (9),
``b_dagger = max(floor((b + 1) / tau), 1)`` with ``b`` the occupied boxes at insertion and
``tau = 2.5``.

Choices where the paper has gaps (``docs/simulator.md``):

* **Decode estimate** (§7 [gap]): the whole request's decode, ``(output - 1)`` steps (the first
  token comes from the prefill) times one step at ``b_dagger`` sequences attending
  ``input + output - 1`` keys, the context of the last step (Table 3(b)'s ``2048 + 63``). The
  box is busy for that time; the request's TPOT is ``(finish - first token) / (output - 1)``,
  which equals the step time when the request waited for no box and was never suspended.
* **Prefill estimate**: one step of the batch's prompts (the paper's ``s + s_plus = s + 1`` is an
  artefact of the oracle's signature; we use the prompt length).
* **Time advance** (Alg. 2/3/6/7 [note]): the next time is the earliest instant at which some
  instance can act on a pending request, never ``inf``; arrival tests use ``<=``.
* **Box index** (Alg. 3/7 [note]): the first free box.
* **Instance order**: the paper shuffles instances to mimic round robin; we rotate the starting
  instance each pass (deterministic round robin).
* **Collocation** (Alg. 4-7 [gaps]): at each instant, resumptions are processed first, then at
  most one prefill batch per pass (prefill priority), then decode insertions. A prefill on an
  instance pauses its running decodes: their boxes' finish times move later by the prefill time
  (``suspend_decode`` / ``delay_decode``), and no decode joins until the prefill is done.
* KV memory and KV transfer are not modelled, as in the paper (§12: "memory-insensitive").

Names: ``max_batch`` is BestServe's ``b_max`` (decode boxes per instance, the max batch) and
``prefill_max_batch`` its prefill batch (prompts per prefill step); serveplan's names for the
knobs are those of ``docs/glossary.md``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import numpy as np

from serveplan.estimator.batch import StepBatch
from serveplan.estimator.step import Estimator

INF = math.inf
#: eq. (9) balancing scalar, BestServe §9.3 default.
TAU = 2.5


def pseudo_batch(b: int, tau: float = TAU) -> int:
    """BestServe eq. (9): ``max(floor((b + 1) / tau), 1)``."""
    return max(int(math.floor((b + 1) / tau)), 1)


class Oracle:
    """Memoised prefill and decode estimates (BestServe §3.3.4 caches Algorithm 1)."""

    def __init__(self, est: Estimator) -> None:
        self.est = est
        self._p: dict[tuple[int, ...], float] = {}
        self._d: dict[tuple[int, int, int], float] = {}

    def prefill(self, lengths: tuple[int, ...]) -> float:
        t = self._p.get(lengths)
        if t is None:
            if len(set(lengths)) == 1:
                batch = StepBatch.prefill(len(lengths), lengths[0])
            else:
                batch = StepBatch.from_sequences((s, 0) for s in lengths)
            t = self._p[lengths] = self.est.time(batch)
        return t

    def decode_step(self, b: int, s: int, n: int) -> float:
        """One decode step of ``b`` sequences at the request's last context ``s + n - 1``."""
        key = (b, s, n)
        t = self._d.get(key)
        if t is None:
            t = self._d[key] = self.est.time(StepBatch.decode(b, s + n - 1))
        return t

    def decode(self, b: int, s: int, n: int) -> float:
        """Whole-request decode time: ``(n - 1)`` steps at pseudo batch ``b``."""
        return (n - 1) * self.decode_step(b, s, n) if n > 1 else 0.0


def _batch(order: list[int], i: int, A: list[float], cap: int, T: float) -> int:
    """Number of requests from position ``i`` that have arrived by ``T`` (at most ``cap``)."""
    k = 0
    n = len(order)
    while k < cap and i + k < n and A[order[i + k]] <= T:
        k += 1
    return k


def prefill_sim(order: list[int], A: list[float], inp: list[int], prefill_max_batch: int, n_inst: int, oracle: Oracle,
                D: list[float], inst_of: list[int], start: list[float]) -> None:
    """Algorithm 2 with the time-advance fix: fills ``D`` (prefill departure = first token)."""
    when_idle = [0.0] * n_inst
    T = 0.0
    i = 0
    n = len(order)
    rot = 0
    while i < n:
        for k in range(n_inst):
            j = (rot + k) % n_inst
            if when_idle[j] <= T:
                c = _batch(order, i, A, prefill_max_batch, T)
                if c:
                    reqs = order[i: i + c]
                    TB = oracle.prefill(tuple(inp[r] for r in reqs))
                    for r in reqs:
                        D[r] = T + TB
                        inst_of[r] = j
                        start[r] = T
                    when_idle[j] = T + TB
                    i += c
        rot = (rot + 1) % n_inst
        if i < n:
            T = max(min(max(w, T) for w in when_idle), A[order[i]])


def decode_sim(order: list[int], A: list[float], inp: list[int], out: list[int], max_batch: int, n_inst: int,
               oracle: Oracle, D: list[float], inst_of: list[int], start: list[float], tau: float = TAU,
               offset: int = 0) -> None:
    """Algorithm 3 (boxes, pseudo batch size) with the fixes of the module docstring."""
    boxes = [[0.0] * max_batch for _ in range(n_inst)]
    T = 0.0
    i = 0
    n = len(order)
    rot = 0
    while i < n:
        for k in range(n_inst):
            if i >= n:
                break
            j = (rot + k) % n_inst
            bx = boxes[j]
            free = next((m for m in range(max_batch) if bx[m] <= T), -1)
            if free >= 0 and A[order[i]] <= T:
                r = order[i]
                b = sum(1 for w in bx if w > T)
                Td = oracle.decode(pseudo_batch(b, tau), inp[r], out[r])
                D[r] = T + Td
                bx[free] = T + Td
                inst_of[r] = offset + j
                start[r] = T
                i += 1
        rot = (rot + 1) % n_inst
        if i < n:
            t_free = min(max(min(bx), T) for bx in boxes)
            T = max(t_free, A[order[i]])


def _next_instant(T: float, resume: list[float], wip: list[float], boxes: list[list[float]],
                  next_arrival: float | None, next_prefilled: float | None) -> float:
    """The next instant after ``T`` at which something can change in Algorithms 4-7: a resumption,
    the next arrival or the end of a prefill batch (while requests arrive), the next prefilled
    request's first token, a prefill batch's or a decode box's end (while requests wait for a box)."""
    cands = [t for t in resume if t > T]
    if next_arrival is not None:
        cands.append(next_arrival)
        cands.extend(w for w in wip if w > T)
    if next_prefilled is not None:
        cands.append(next_prefilled)
        cands.extend(w for w in wip if w > T)
        cands.extend(min((w for w in bx if w > T), default=INF) for bx in boxes)
    return min((t for t in cands if t > T), default=INF)


def collocated_sim(  # noqa: C901 - Algorithms 4-7 transcribed as one loop, step for step with the paper
        order: list[int], A: list[float], inp: list[int], out: list[int], max_batch: int, n_inst: int,
        prefill_max_batch: int, oracle: Oracle, D1: list[float], D2: list[float], inst_of: list[int],
        start: list[float], tau: float = TAU, on_time: Callable[[float], bool] | None = None) -> bool:
    """Algorithms 4-7 (vLLM-like collocation). Returns True when ``on_time`` asked to stop."""
    status = ["decode"] * n_inst
    wip = [0.0] * n_inst                        # when_idle_prefill
    boxes = [[0.0] * max_batch for _ in range(n_inst)]
    owner = [[-1] * max_batch for _ in range(n_inst)]
    resume = [INF] * n_inst                     # S: pending resume time per instance
    Q: deque[int] = deque()                     # prefilled, waiting for a decode box
    n = len(order)
    i = 0
    T = 0.0
    rot = 0
    checks = 0
    while i < n or Q:
        acted = False
        for j in range(n_inst):                 # Alg. 4 L15-17: resumptions first
            if resume[j] <= T:
                resume[j] = INF
                status[j] = "decode"
        # Alg. 6: one prefill batch per pass (prefill priority)
        if i < n and A[order[i]] <= T:
            for k in range(n_inst):
                j = (rot + k) % n_inst
                if status[j] == "decode" or wip[j] <= T:      # Alg. 5
                    c = _batch(order, i, A, prefill_max_batch, T)
                    reqs = order[i: i + c]
                    TB = oracle.prefill(tuple(inp[r] for r in reqs))
                    for r in reqs:
                        D1[r] = T + TB
                        inst_of[r] = j
                        start[r] = T
                        Q.append(r)
                    i += c
                    wip[j] = T + TB
                    # suspend (or further delay) the instance's running decodes by TB
                    bx, ow = boxes[j], owner[j]
                    for m in range(max_batch):
                        if bx[m] > T:
                            bx[m] += TB
                            D2[ow[m]] = bx[m]
                    status[j] = "prefill"
                    resume[j] = T + TB
                    acted = True
                    break
        # Alg. 7: one decode insertion per pass
        if not acted and Q and D1[Q[0]] <= T:
            for k in range(n_inst):
                j = (rot + k) % n_inst
                bx = boxes[j]
                free = next((m for m in range(max_batch) if bx[m] <= T), -1)
                if free < 0 or (status[j] == "prefill" and wip[j] > T):   # Alg. 5
                    continue
                r = Q.popleft()
                b = sum(1 for w in bx if w > T)
                Td = oracle.decode(pseudo_batch(b, tau), inp[r], out[r])
                D2[r] = T + Td
                bx[free] = T + Td
                owner[j][free] = r
                acted = True
                break
        rot = (rot + 1) % n_inst
        if acted:
            continue
        nxt = _next_instant(T, resume, wip, boxes, A[order[i]] if i < n else None, D1[Q[0]] if Q else None)
        if nxt == INF:  # pragma: no cover - every pending request has a future event
            break
        T = nxt
        checks += 1
        if on_time is not None and checks % 1000 == 0 and on_time(T):
            return True
    return False


def run_bestserve(A: np.ndarray, inp: np.ndarray, out: np.ndarray, *, disaggregated: bool, n_prefill: int,
                  n_decode: int, n_collocated: int, prefill_max_batch: int,
                  max_batch: int, oracle_p: Oracle, oracle_d: Oracle, tau: float = TAU) -> dict[str, np.ndarray]:
    """First-token and finish times of every request (arrays), plus instance ids.

    ``prefill_max_batch``: prompts per prefill step; ``max_batch``: decode boxes per decoding
    instance (BestServe's ``b_max``)."""
    n = len(A)
    order = list(np.argsort(A, kind="stable"))
    Al, il, ol = A.tolist(), inp.tolist(), out.tolist()
    D1 = [INF] * n
    D2 = [INF] * n
    p_inst = [-1] * n
    d_inst = [-1] * n
    start = [math.nan] * n
    dstart = [math.nan] * n
    if disaggregated:
        prefill_sim(order, Al, il, prefill_max_batch, n_prefill, oracle_p, D1, p_inst, start)
        # requests with a single output token finish at the prefill
        dorder = sorted((r for r in range(n) if ol[r] > 1), key=lambda r: (D1[r], r))
        decode_sim(dorder, D1, il, ol, max_batch, n_decode, oracle_d, D2, d_inst, dstart, tau, offset=n_prefill)
        for r in range(n):
            if ol[r] <= 1:
                D2[r] = D1[r]
        darr = np.array([D1[r] if ol[r] > 1 else math.nan for r in range(n)])
    else:
        collocated_sim(order, Al, il, ol, max_batch, n_collocated, prefill_max_batch, oracle_p, D1, D2, p_inst, start,
                       tau)
        for r in range(n):
            if ol[r] <= 1:
                D2[r] = D1[r]
        d_inst = list(p_inst)
        darr = np.full(n, math.nan)
    return {
        "first_token": np.asarray(D1), "finish": np.asarray(D2), "prefill_instance": np.asarray(p_inst),
        "decode_instance": np.asarray(d_inst), "start": np.asarray(start), "decode_arrival": darr,
        "decode_start": np.asarray(dstart),
    }
