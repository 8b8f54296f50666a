"""Fleets of instances: collocated ``Nm`` and disaggregated ``PpDd`` strategies, KV transfer.

* Collocated: every instance prefills and decodes its own requests (scheduler ``vllm`` or
  ``sarathi``).
* Disaggregated: prefill instances (``prefill-only``) emit the first token; the request's KV
  cache then moves to a decode instance over the link between them and joins that instance's
  queue; the decode instance (``decode-only``) admits it when its KV fits.

KV transfer time (BestServe mentions the cost, §1, but does not model it
[gap]): every prefill device sends its shard of the cache to its peer in parallel,
``latency + tokens * kv_bytes_per_token_per_device / (e_+ * link bandwidth)``, on the intra-node
link when both instances fit in one node, else the inter-node link, with the prefill phase's
communication efficiency ``e_+``. Links are not shared between transfers (no contention). The
prefill instance frees the cache when the transfer ends. A transferred cache that waits for room
at its decode instance sits in a staging buffer there, not in device KV (the decode instance's
blocks are reserved only at admission).

Because the prefill stage never waits on the decode stage in this model, a disaggregated fleet
is simulated stage by stage: all prefill instances, then all decode instances.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from serveplan.errors import SpecError
from serveplan.estimator.step import Estimator
from serveplan.sim.instance import Instance
from serveplan.sim.metrics import SLO, certain_misses
from serveplan.sim.request import RequestState
from serveplan.sim.router import least_outstanding

INF = math.inf
_STRATEGY = re.compile(r"^\s*(?:(\d+)\s*m|(\d+)\s*p\s*(\d+)\s*d)\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True, kw_only=True)
class Strategy:
    """A serving strategy: ``num_collocated`` instances, or ``num_prefill`` + ``num_decode``."""

    num_collocated: int = 0
    num_prefill: int = 0
    num_decode: int = 0

    def __post_init__(self) -> None:
        for f in ("num_collocated", "num_prefill", "num_decode"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise SpecError(f"strategy {f}={v!r} must be a non-negative integer")
        if self.num_collocated and (self.num_prefill or self.num_decode):
            raise SpecError("a strategy is either collocated (Nm) or disaggregated (PpDd), not both")
        if not self.num_collocated and (self.num_prefill < 1 or self.num_decode < 1):
            raise SpecError(
                f"strategy needs num_collocated >= 1, or num_prefill >= 1 and num_decode >= 1; got "
                f"{self.num_collocated}m / {self.num_prefill}p{self.num_decode}d")

    @staticmethod
    def parse(text: str | Strategy) -> Strategy:
        """``"2m"`` (2 collocated instances) or ``"1p1d"`` (1 prefill, 1 decode instance)."""
        if isinstance(text, Strategy):
            return text
        m = _STRATEGY.match(str(text))
        if not m:
            raise SpecError(f"strategy={text!r} does not parse; expected Nm (e.g. 2m) or PpDd (e.g. 1p1d)")
        if m.group(1):
            return Strategy(num_collocated=int(m.group(1)))
        return Strategy(num_prefill=int(m.group(2)), num_decode=int(m.group(3)))

    @property
    def is_disaggregated(self) -> bool:
        return self.num_collocated == 0

    @property
    def num_instances(self) -> int:
        return self.num_collocated + self.num_prefill + self.num_decode

    def __str__(self) -> str:
        return f"{self.num_prefill}p{self.num_decode}d" if self.is_disaggregated else f"{self.num_collocated}m"


def kv_transfer_time(est_prefill: Estimator, est_decode: Estimator, tokens: int) -> float:
    """Seconds to move ``tokens`` of KV cache from a prefill to a decode instance (module doc)."""
    hw = est_prefill.hardware
    link = hw.link_for(est_prefill.parallel.num_devices + est_decode.parallel.num_devices)
    per_device = tokens * est_prefill.memory.kv_bytes_per_token
    return link.latency_s + per_device / (est_prefill.profile.prefill.comm * link.bandwidth)


class EarlyStop:
    """Decides when the SLO at its percentile can no longer be met (``SimulationConfig.early_stop``).

    A request certainly misses TTFT when its first token came late, or it still waits and has
    waited longer than the target; it certainly misses TPOT when, with its tokens so far,
    ``(t - first token) / (output - 1)`` already exceeds the target, ``t`` being its finish or the
    time every instance has reached. When either count reaches :func:`certain_misses`, the
    percentile is above the target whatever happens next.
    """

    def __init__(self, req: RequestState, slo: SLO) -> None:
        self.req = req
        self.slo = slo
        self.limit = certain_misses(req.n, slo.percentile)
        # requests in arrival order; the counts of the settled prefix (first token, resp. finish,
        # known: their TTFT, resp. TPOT, no longer changes) are kept between checks
        self.order: list[int] = np.argsort(np.asarray(req.arrival), kind="stable").tolist()
        self._i_first = self._late_first = 0
        self._i_fin = self._late_fin = 0
        self._d_min = max(min(req.out, default=1) - 1, 1)  # smallest TPOT divisor
        # off while a disaggregated fleet runs only its prefill stage: decodes have not started,
        # so the TPOT of a request waiting for its decode instance is not yet known
        self.check_tpot = True

    def missed(self, t: float) -> bool:
        """Whether either count of certain misses at time ``t`` reaches the limit.

        The same float arithmetic per request as the definitions above. Requests are visited in
        arrival order: the prefix whose first token (for TTFT) or finish (for TPOT) is known is
        counted once and remembered. Beyond it the scan stops at the first request that arrived
        too late to miss: with ``h`` the latest of ``t`` and every first token (finish) so far, a
        request arriving at ``a`` has TTFT at most ``h - a`` and TPOT at most
        ``(h - a) / (min output - 1)``, and so have the later ones (float subtraction and division
        are monotone). A check thus costs the requests in flight, not the whole stream."""
        R, slo, limit, order, n = self.req, self.slo, self.limit, self.order, self.req.n
        first, arrival = R.first_token, R.arrival
        target = slo.ttft_s
        i, late = self._i_first, self._late_first
        while i < n:
            q = order[i]
            f = first[q]
            if f != f:
                break
            if f - arrival[q] > target:
                late += 1
            i += 1
        self._i_first, self._late_first = i, late
        count = late
        h = t if t > R.last_first else R.last_first
        for j in range(i, n):
            if count >= limit:
                break
            q = order[j]
            a = arrival[q]
            if not h - a > target:
                break
            f = first[q]
            if f == f:
                if f - a > target:
                    count += 1
            elif a <= t and t - a > target:
                count += 1
        if count >= limit:
            return True
        if not self.check_tpot:
            return False
        fin, out = R.finish, R.out
        target = slo.tpot_s
        i, late = self._i_fin, self._late_fin
        while i < n:
            q = order[i]
            e = fin[q]
            if e != e:
                break
            o = out[q]
            if o > 1 and (e - first[q]) / max(o - 1, 1) > target:
                late += 1
            i += 1
        self._i_fin, self._late_fin = i, late
        count = late
        h = t if t > R.last_finish else R.last_finish
        d_min = self._d_min
        for j in range(i, n):
            if count >= limit:
                break
            q = order[j]
            if not (h - arrival[q]) / d_min > target:
                break
            f = first[q]
            o = out[q]
            if f == f and o > 1:
                e = fin[q]
                if ((e if e == e else t) - f) / max(o - 1, 1) > target:
                    count += 1
        return count >= limit


@dataclass
class FleetRun:
    """What a fleet run leaves besides the per-request state."""

    instances: list[Instance]
    stopped_early: bool = False
    stopped_at: float = INF


def _run_stage(instances: Sequence[Instance], times: Sequence[float], ids: Sequence[int], router: str,
               cap: float, stop: EarlyStop | None, on_assign: Callable[[int, int], None]) -> tuple[bool, float]:
    """Route requests (in time order) to ``instances`` and run them up to ``cap``."""
    n = len(ids)
    checkpoints = 50  # early-stop checks per stage
    if router == "round_robin":
        k = len(instances)
        for j in range(n):
            i = j % k
            instances[i].deliver(times[j], ids[j])
            on_assign(ids[j], i)
        if stop is None:
            for inst in instances:
                inst.run_until(cap)
            return False, INF
        t_last = times[-1] if n else 0.0
        step = max(t_last, 1e-9) / checkpoints
        t = 0.0
        while True:
            t = min(t + step, cap)
            for inst in instances:
                inst.run_until(t)
            if stop.missed(min(inst.now for inst in instances)):
                return True, t
            if t >= cap or (t >= t_last and all(not inst.running and not inst.waiting
                                                and inst.ptr == len(inst.inbox_t) for inst in instances)):
                break
        for inst in instances:
            inst.run_until(cap)
        return False, INF
    every = max(1, n // checkpoints)
    for j in range(n):
        t = times[j]
        if t >= cap:
            break
        for inst in instances:
            inst.run_until(t)
        i = least_outstanding(instances)
        instances[i].deliver(t, ids[j])
        on_assign(ids[j], i)
        if stop is not None and (j + 1) % every == 0 and stop.missed(t):
            return True, t
    if stop is not None:
        t_last = times[-1] if n else 0.0
        step = max(t_last, 1e-9) / checkpoints
        t = t_last
        while t < cap:
            t = min(t + step, cap)
            for inst in instances:
                inst.run_until(t)
            if stop.missed(min(inst.now for inst in instances)):
                return True, t
            if all(not inst.running and not inst.waiting and inst.ptr == len(inst.inbox_t) for inst in instances):
                break
    for inst in instances:
        inst.run_until(cap)
    return False, INF


def run_collocated(make: Callable[[int], Instance], n_inst: int, req: RequestState, router: str, cap: float,
                   stop: EarlyStop | None) -> FleetRun:
    insts = [make(i) for i in range(n_inst)]

    def assign(q: int, i: int) -> None:
        req.p_inst[q] = i
        req.d_inst[q] = i

    stopped, at = _run_stage(insts, req.arrival, list(range(req.n)), router, cap, stop, assign)
    return FleetRun(insts, stopped, at)


def run_disaggregated(make_prefill: Callable[[int, Callable[[int, float], float]], Instance],
                      make_decode: Callable[[int], Instance], n_prefill: int, n_decode: int, req: RequestState,
                      transfer: Callable[[int], float], router: str, cap: float,
                      stop: EarlyStop | None) -> FleetRun:
    handed: list[tuple[float, int]] = []

    def handoff(q: int, t: float) -> float:
        t_arrive = t + transfer(q)
        handed.append((t_arrive, q))
        return t_arrive

    pre = [make_prefill(i, handoff) for i in range(n_prefill)]

    def assign_p(q: int, i: int) -> None:
        req.p_inst[q] = i

    if stop is not None:
        stop.check_tpot = False
    stopped, at = _run_stage(pre, req.arrival, list(range(req.n)), router, cap, stop, assign_p)
    if stop is not None:
        stop.check_tpot = True
    dec = [make_decode(i) for i in range(n_decode)]
    if stopped:
        return FleetRun(pre + dec, True, at)
    handed.sort()
    for t, q in handed:  # the KV cache is in place: the request continues with its first token
        req.kv_ready[q] = True
        req.kv_len[q] = req.prompt_len[q]
        req.decode_arrival[q] = t

    def assign_d(q: int, i: int) -> None:
        req.d_inst[q] = n_prefill + i

    stopped, at = _run_stage(dec, [t for t, _ in handed], [q for _, q in handed], router, cap, stop, assign_d)
    return FleetRun(pre + dec, stopped, at)
