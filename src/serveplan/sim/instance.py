"""One serving instance in iteration mode: KV blocks, waiting and running requests, its steps.

The instance owns its clock. :meth:`Instance.run_until` executes every step that *starts* before
``until`` (a step is atomic: work arriving mid-step waits for the next boundary). Each step is
planned by the scheduler (:mod:`serveplan.sim.schedulers`) and timed by the estimator.

Speed: a step whose plan is "every running request decodes one token" is the common case, and
such steps repeat unchanged until the next event (a completion, an arrival the scheduler could
admit, KV exhaustion). :meth:`_decode_stretch` advances the whole run of steps at once: the
context sum grows by the batch size per step, and the step times come from a table of
step times read through the estimator's columnar API (:func:`serveplan.estimator.columns.step_times`)
into a table indexed by that sum (:class:`~serveplan.sim.clock.StepClock`). Pipelined instances (``pp > 1``) take the
per-step path. The shortcuts a policy declares (:class:`~serveplan.sim.schedulers.FastPaths`) are
taken without asking the scheduler, with the decisions it guarantees: nothing waiting and every
running request ready (all decode), one request alone on an empty instance (admit, prefill,
decode stretch; :meth:`Instance._lone`), a chunked prompt beside the running decodes
(:meth:`Instance._chunk_stretch`). The running sum of a stretch is taken in growing segments,
so a stretch cut short by an arrival sums only its steps.

KV memory has one owner, :class:`~serveplan.sim.kv.KVCache` (vLLM PagedAttention accounting);
when a decode step does not fit, the policy preempts the most recently admitted requests, which
are later recomputed (vLLM recompute preemption).

Pipeline parallelism: up to ``pp`` micro-batches are in flight. Every stage takes
``Estimator.stage_time`` of its micro-batch; a micro-batch enters stage ``s`` when stage ``s-1``
is done with it and stage ``s`` is done with the previous one. The time stage ``s`` idles,
after the micro-batch entered the pipeline, before it arrives is that micro-batch's *bubble*
(Sarathi §3.2, PB1-PB3), added to every request in it. A request may join a new micro-batch only
after its previous one left the last stage.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from serveplan.estimator import columns
from serveplan.estimator.batch import StepBatch, step_sums, step_sums_of
from serveplan.sim.clock import MAX_MEMO_STEPS, StepClock
from serveplan.sim.cohort import DecodeCohort
from serveplan.sim.fleet import Batching, Role
from serveplan.sim.kv import KVCache, Prefix
from serveplan.sim.metrics import GapLog
from serveplan.sim.request import RequestState
from serveplan.sim.schedulers.base import BatchPlan, Scheduler
from serveplan.specs.speculative import SpecDecodeConfig

INF = math.inf
INF_INT = 1 << 62  # larger than any token count
#: SGLang's recv-skipper weight of a step with prompt tokens (``scheduler_recv_skipper.py``
#: ``_DEFAULT_WEIGHT``: any forward mode but decode, target-verify and idle): above any interval, so
#: the requests that arrived during a prefill step are taken in before the next step
RECV_WEIGHT_EXTEND = 1000
_SHORT = 24  # stretches of at most this many steps are summed in Python (cheaper than numpy calls)


def _steps_before(times: np.ndarray, now: float, wake: float) -> tuple[int, float]:
    """Steps of durations ``times`` run back to back from ``now`` that start before ``wake`` (at
    least one, at most all), and the end of the last: ``ends = now + times.cumsum()``, ``k = 1 +``
    the number of ``ends[:-1]`` before ``wake``. The running sum is taken in growing segments,
    each continuing the previous total (the same sequential float additions as one ``cumsum``),
    so a stretch cut short by ``wake`` does not sum the steps it never runs."""
    k_max = len(times)
    if k_max <= _SHORT:
        # a short stretch in Python floats: the same sequential additions as ``cumsum`` (numpy
        # accumulates in order), without the fixed cost of four numpy calls
        acc = 0.0
        final = k_max - 1
        for i, t in enumerate(times.tolist()):
            acc += t
            e = acc + now
            if i == final or not e < wake:   # the next step would start at or after ``wake``
                return i + 1, e
    pos = 0
    m = 128  # first segment; each next one 4x longer (a 2,048-step decode takes at most 4 segments)
    last = None
    while True:
        hi = min(k_max, pos + m)
        if last is None:
            c = times[:hi].cumsum()
        else:
            buf = np.empty(hi - pos + 1)
            buf[0] = last
            buf[1:] = times[pos:hi]
            c = buf.cumsum()[1:]
        lim = min(hi, k_max - 1) - pos  # steps of this segment that are not the last one
        if lim > 0 and wake < INF and not float(c[lim - 1]) + now < wake:
            j = int((c[:lim] + now).searchsorted(wake, side="left"))
            return pos + j + 1, float(c[j]) + now
        if hi == k_max:
            return k_max, float(c[-1]) + now
        last = c[-1]
        pos = hi
        m *= 4


@dataclass(frozen=True, slots=True)
class Intake:
    """How an instance takes the requests delivered to it in, before each step.

    Attributes
    ----------
    recv_interval:
        SGLang's ``--scheduler-recv-interval`` (the policy's options,
        :attr:`~serveplan.sim.schedulers.base.Options.recv_interval`; 1: arrivals taken in before
        every step). Above 1, while requests run, arrivals are taken in only when a counter
        reaches it: each decode step adds 1, any step with prompt tokens
        :data:`RECV_WEIGHT_EXTEND` (SGLang ``SchedulerRecvSkipper``); an idle instance takes
        them at once (its loop spins, adding 1 per empty pass).
    overlap:
        Overlap scheduling (:attr:`~serveplan.specs.engine.EngineSpec.overlap_scheduling`:
        vLLM's asynchronous scheduling, SGLang's and TensorRT-LLM's overlap schedulers; modelled
        with one pipeline stage): step ``k + 1`` is planned when step ``k`` starts, from the queue
        as it stood then, so while the engine is busy a step takes in only the arrivals that
        came before the previous step began; an engine that was idle (no step ended now) takes
        them at once.
    """

    recv_interval: int = 1
    overlap: bool = False

    @property
    def is_plain(self) -> bool:
        """Every delivered request is taken in before the next step."""
        return self.recv_interval <= 1 and not self.overlap


#: arrivals taken in before every step
PLAIN_INTAKE = Intake()
#: what held delivered requests back at the last intake (:meth:`Instance._take_in`)
_HELD_NONE, _HELD_RECV, _HELD_OVERLAP = 0, 1, 2


class Instance:
    """One instance (``tp * pp * dp`` devices) running its scheduler over its requests.

    Parameters
    ----------
    index, role:
        Position in the fleet and :class:`Role`.
    clock:
        :class:`StepClock` of the instance's estimator.
    scheduler:
        The batching policy.
    req:
        Shared :class:`RequestState`.
    batching:
        Max batch (sequences per step, per micro-batch), prompts per step, token budget and
        chunk size.
    handoff:
        For ``prefill`` instances: called as ``handoff(request, time)`` when a prompt is done;
        returns the time at which its KV leaves this instance (transfer end).
    on_finish:
        Called as ``on_finish(request, time)`` when a request's last token is out (the event
        loop's completion hook: closed-loop clients, backpressure).
    intake:
        How delivered requests are taken in before each step (:class:`Intake`).
    keep_prefix:
        Tokens a preempted request computed stay in the prefix cache and are not recomputed on
        its return (engines with prefix caching on by default: vLLM V1, SGLang's radix cache).
    spec:
        Speculative decoding of this instance's decodes (``None``: plain decoding).
    """

    #: Take the declared shortcuts and stretches (False: one planned step at a time, for cross-checks).
    fast_decode = True
    #: Tokens one decode takes of a step's token budget: ``K + 1`` with speculative decoding (vLLM
    #: V1 schedules ``num_tokens_with_spec - num_computed_tokens`` per running request), else 1
    decode_tokens = 1
    #: Speculative decoding: expected tokens per verify step ``E`` (0: off). A decode-only step is
    #: timed per token by the estimator (one token per step); a step mixing prompt chunks and
    #: decodes keeps its full time and advances its decodes ``E`` tokens on average
    #: (:meth:`_spec_mixed_decode`)
    spec_expected_tokens = 0.0
    _spec_carry = 0.0

    def __init__(self, index: int, role: Role, clock: StepClock, scheduler: Scheduler, req: RequestState, *,
                 batching: Batching, block_size: int = 16, handoff: Callable[[int, float], float] | None = None,
                 on_finish: Callable[[int, float], None] | None = None, intake: Intake = PLAIN_INTAKE,
                 keep_prefix: bool = False, spec: SpecDecodeConfig | None = None) -> None:
        self.index = index
        self.role = role
        self.clock = clock
        self.scheduler = scheduler
        self.req = req
        self.pp = clock.pp
        self.block_size = block_size
        est = clock.est
        self.kv = KVCache(est.kv_capacity_tokens(batching.max_batch * self.pp), block_size, req.blocks,
                          est.kv_equivalent_tokens_fn() if est.kv_is_bounded else None)
        self.max_batch = batching.max_batch
        self.max_running = batching.max_batch * self.pp
        self.max_prompts = batching.max_prompts
        self.token_budget = batching.step_token_budget
        self.chunk_size = batching.chunk_size
        self.handoff = handoff
        self._hands_off = role is Role.PREFILL  # prompts leave after their prefill
        self.on_finish = on_finish
        #: tokens a preempted request computed stay in the prefix cache (``keep_prefix``)
        self.keep_prefix_on_preempt = keep_prefix
        #: seconds of KV load of admitted requests' lower-tier hits, taken by their first prefill step
        #: (the prefix cache's ``loads``; None: no prefix cache)
        self.kv_loads: dict[int, float] | None = None
        #: set by a completion with an ``on_finish`` hook: ``run_until`` returns at that boundary
        #: so the loop can handle what the completion caused before this instance goes on
        self.interrupted = False
        self.intake = intake
        #: :attr:`Intake.recv_interval`; every step adds to ``_recv_count``, read only above 1
        self.recv_interval = intake.recv_interval
        self._recv_count = 0
        #: :attr:`Intake.overlap`, with one pipeline stage only
        self.overlap_lag = intake.overlap and self.pp == 1
        self._step_start = 0.0
        self._step_end = -1.0
        #: inter-token gaps, when the run records them (:class:`~serveplan.sim.metrics.GapLog`; None: not)
        self.itl: GapLog | None = None
        #: end of the last step that gave decoding requests a token (the ITL gaps' origin)
        self._dec_end = -1.0
        #: (ITL) requests whose previous token came after that, by its time: their first token here, or
        #: the one a prefill instance gave before the hand-off; their first decoding gap counts from it
        self._joined: dict[int, float] = {}
        self.waiting: deque[int] = deque()
        self.running: list[int] = []
        self.inbox_t: list[float] = []
        self.inbox_r: list[int] = []
        self.ptr = 0
        self.now = 0.0
        self.stage_free = [0.0] * self.pp
        self.assigned = 0
        self.completed = 0
        self.num_steps = 0
        self.num_preemptions = 0
        fp = scheduler.fast_paths if self.pp == 1 else None
        self._lone_prompt = fp is not None and fp.lone_prompt
        self._lone_transfer = fp is not None and fp.lone_transfer
        self._all_decode = fp is not None and fp.all_decode
        self._repeat_chunk = fp is not None and fp.repeat_chunk
        self._prefill_t = clock.prefill_times
        if spec is not None:  # each decode takes K + 1 tokens of the step's budget
            self.decode_tokens = spec.verify_tokens
            self.spec_expected_tokens = spec.expected_tokens
            self._repeat_chunk = False  # mixed steps one by one: their decodes advance E tokens
        #: the decoding requests advanced together (:mod:`serveplan.sim.cohort`): one pipeline stage,
        #: full attention, plain decoding (and, checked per run, no prefix cache)
        #: (its owed-output and future-block sums for the policies that admit by them: SGLang's
        #: reserve, ``reserve-ratio``, and TensorRT-LLM's reservation, ``full``)
        self.cohort = DecodeCohort(req, self.kv, sums=getattr(scheduler, "admission", None) != "prompt")
        self._lazy = self.pp == 1 and not est.kv_is_bounded and spec is None
        self._lazy_now = False
        #: the policy plans from :attr:`decode_all_need` when given (``Scheduler.reads_decode_all``)
        self._agg_plan = bool(getattr(scheduler, "reads_decode_all", False))

    @property
    def free_blocks(self) -> int:
        """Free KV blocks (what a policy reads): ``KVCache.free`` less the blocks the decode
        cohort's unwritten steps took (``KVCache.pending``)."""
        return self.kv.free - self.kv.pending

    @property
    def decode_all_need(self) -> int | None:
        """Blocks one decode step of every running request appends, when every running request is
        in the decode cohort (past its prompt and ready), there are at most ``max_batch`` and those
        blocks fit; None otherwise. A policy given it may plan without reading the running
        requests' lengths (which the cohort may not have written yet)."""
        c = self.cohort
        n = len(self.running)
        if len(c) != n or n > self.max_batch:
            return None
        need = c.grow(1)
        return need if need <= self.kv.free - self.kv.pending else None

    def decode_all_left(self, clip: int) -> int:
        """``sum(min(out - gen, clip))`` over the running requests, when :attr:`decode_all_need` is
        given (every running request is a cohort member; SGLang's reserve, ``reads_decode_all``)."""
        return self.cohort.left_sum(clip)

    def decode_all_future(self) -> int:
        """``sum(max(ceil((inp + out - 1) / b) - blocks, 0))`` over the running requests, when
        :attr:`decode_all_need` is given (TensorRT-LLM's reservation, ``reads_decode_all``); the
        cohort's sum, or the members' lengths written and summed one by one when it has none."""
        f = self.cohort.future_blocks()
        if f is not None:
            return f
        self.cohort.flush()
        R, bs = self.req, self.block_size
        return sum(max(-(-(R.inp[q] + R.out[q] - 1) // bs) - R.blocks[q], 0) for q in self.running)

    def _plan(self) -> BatchPlan | None:
        """The policy's plan, the cohort's lag written out first unless the policy plans from its
        aggregate (:attr:`decode_all_need`). Members stay: a plan that preempts dissolves the cohort
        (:meth:`_apply_admission`), and a step whose decodes are not the cohort writes it out."""
        c = self.cohort
        if c.dirty and (not self._agg_plan or self.decode_all_need is None):
            c.flush()
        return self.scheduler.plan_batch(self)

    def use_prefix_cache(self, cache: Prefix) -> None:
        """Serve with ``cache`` as the KV cache's prefix cache: what a preempted request computed
        is then found there (as far as not evicted) rather than kept aside, and the loads of
        lower-tier hits are paid by the first prefill step of the requests admitted."""
        self.kv.prefix = cache
        self.keep_prefix_on_preempt = False
        self.kv_loads = cache.loads

    def set_hooks(self, *, on_finish: Callable[[int, float], None] | None = None,
                  handoff: Callable[[int, float], float] | None = None) -> None:
        """Replace the completion hook and/or the hand-off (the event loop's, for closed loops)."""
        if on_finish is not None:
            self.on_finish = on_finish
        if handoff is not None:
            self.handoff = handoff

    def renumber(self, new: dict[int, int]) -> None:
        """Requests renumbered ``old -> new`` (a windowed run compacting its finished requests);
        the delivered requests already taken in are dropped from the inbox."""
        # members are numbered by request: their values are written first (settle), the cohort dissolved
        assert not self.cohort.dirty, "renumbered before settle"
        self.cohort.disband()
        p = self.ptr
        self.inbox_t = self.inbox_t[p:]
        self.inbox_r = [new[q] for q in self.inbox_r[p:]]
        self.ptr = 0
        self._joined = {new[q]: t for q, t in self._joined.items() if q in new}
        self.waiting = deque(new[q] for q in self.waiting)
        self.running[:] = [new[q] for q in self.running]

    # ---------------------------------------------------------------- intake
    def deliver(self, t: float, q: int) -> None:
        """Request ``q`` reaches this instance at time ``t`` (non-decreasing per instance)."""
        self.inbox_t.append(t)
        self.inbox_r.append(q)
        self.assigned += 1
        if self.itl is not None:
            ft = self.req.first_token[q]
            if ft == ft:    # handed off with its first token: its next one comes from here
                self._joined[q] = ft

    @property
    def outstanding(self) -> int:
        return self.assigned - self.completed

    @property
    def is_idle(self) -> bool:
        """Nothing running, waiting or delivered but not yet taken in."""
        return not self.running and not self.waiting and self.ptr == len(self.inbox_t)

    @property
    def next_arrival(self) -> float:
        """Time of the next delivered request not yet taken in (``inf``: none)."""
        return self.inbox_t[self.ptr] if self.ptr < len(self.inbox_t) else INF

    # ---------------------------------------------------------------- main loop
    def run_until(self, until: float) -> None:
        """Execute the steps that start before ``until``. The decode cohort stays as it is on
        return, its members' lengths possibly lagging (:meth:`settle` writes them): the next call
        goes on with it (a decode instance of a disaggregated fleet runs once per transferred
        request, a closed loop's once per completion)."""
        self._lazy_now = self._lazy and self.kv.prefix is None
        if not self._lazy_now:
            self.cohort.disband()
        self._run(until)

    def settle(self) -> None:
        """Write every running request's lengths and blocks (the cohort's lag; members stay)."""
        self.cohort.flush()

    def _run(self, until: float) -> None:  # noqa: C901 - the hot loop: the plain intake and shortcuts inline
        """Execute the steps that start before ``until``."""
        it, ir = self.inbox_t, self.inbox_r
        kv = self.kv
        rel = kv.releases
        plain = self.intake.is_plain and kv.prefix is None  # arrivals go straight to the queue
        fast = self.fast_decode
        lone = (self._lone_prompt or self._lone_transfer) and fast
        all_decode = self._all_decode and fast
        stretch = fast and self.pp == 1
        self.interrupted = False
        hooked = self.on_finish is not None   # only a completion hook interrupts
        held = _HELD_NONE
        while self.now < until:
            if hooked and self.interrupted:
                self.interrupted = False
                return
            now = self.now
            if plain:
                p = self.ptr
                n_in = len(it)
                while p < n_in and it[p] <= now:
                    self.waiting.append(ir[p])
                    p += 1
                self.ptr = p
            else:
                held = self._take_in(now)
            if rel and rel[0][0] <= now:
                kv.release_due(now)
            if lone and not self.running:
                if not self.waiting:
                    plan = None  # nothing to plan: the policies return no plan
                elif len(self.waiting) == 1 and self._lone(until):
                    continue
                else:
                    plan = self._plan()
            elif all_decode and self.running and not self.waiting and self._all_ready(now):
                self._decode_stretch(list(self.running), until)
                continue
            else:
                plan = self._plan()
            if plan is None or not (plan.prefill or plan.decode):
                if plan is not None and (plan.admit or plan.preempt):
                    self._apply_admission(plan)
                    continue  # admitted without compute (transferred caches): plan again
                if self._idle(until, held):
                    return
                continue
            if plan.admit or plan.preempt:
                self._apply_admission(plan)
            if not (stretch and self._stretched(plan, until)):
                self._step(plan)

    def _stretched(self, plan: BatchPlan, until: float) -> bool:
        """Run ``plan`` as the first of a stretch of steps that repeat it (``pp == 1``), when it
        takes every running request: all decodes (:meth:`_decode_stretch`) or the decodes beside
        one prompt's chunk (:meth:`_chunk_stretch`). False: nothing done, the plan is one step."""
        if len(plan.decode) + len(plan.prefill) != len(self.running):
            return False
        if not plan.prefill:
            self._decode_stretch(plan.decode, until, plan.hold_steps)
            return True
        return (self._repeat_chunk and len(plan.prefill) == 1 and not plan.admit
                and self._chunk_stretch(plan, until))

    def _take_in(self, now: float) -> int:
        """Move the requests delivered by ``now`` to the queue as the :class:`Intake` allows (and
        each past the prefix cache, when there is one); what held some back: ``_HELD_RECV`` (the
        receive interval), ``_HELD_OVERLAP`` (this step was planned when the previous one began),
        or ``_HELD_NONE``."""
        it, ir = self.inbox_t, self.inbox_r
        p = self.ptr
        n_in = len(it)
        held = _HELD_NONE
        if self.recv_interval > 1 and self.running:
            # SGLang's recv skipper: requests are taken in every recv_interval decode steps
            if self._recv_count < self.recv_interval:
                n_in = p    # nothing taken in before this step
                held = _HELD_RECV
            else:
                self._recv_count = 0
        # overlap scheduling: a busy engine planned this step when the previous one started
        cut = now
        if self.overlap_lag and self._step_end == now and self.running:
            cut = self._step_start
            if held == _HELD_NONE and cut < now:
                held = _HELD_OVERLAP
        if self.kv.prefix is None:
            while p < n_in and it[p] <= cut:
                self.waiting.append(ir[p])
                p += 1
        else:
            while p < n_in and it[p] <= cut:
                self._queue_cached(ir[p])
                p += 1
        self.ptr = p
        return held

    def _all_ready(self, now: float) -> bool:
        """The policy's plan for a view with nothing waiting (``FastPaths.all_decode``): every
        running request decodes, when there are at most ``max_batch``, each is past its prompt
        and ready, and the blocks they append fit (no preemption)."""
        if len(self.running) > self.max_batch:
            return False
        c = self.cohort
        if len(c):
            if len(c) == len(self.running):  # members are past their prompt and ready
                return c.grow(1) <= self.kv.free - self.kv.pending
            c.disband()
        R = self.req
        pf, pl, ra, kvl = R.prefilled, R.prompt_len, R.ready_at, R.kv_len
        bs = self.block_size
        need = 0
        for q in self.running:
            if pf[q] < pl[q] or ra[q] > now:
                return False
            if kvl[q] % bs == 0:
                need += 1
        return need <= self.kv.free

    def _idle(self, until: float, held: int) -> bool:
        """No step to run now: let in the arrivals the intake held back (the engine is idle, so
        it takes them at once), or move the clock to the next arrival, KV release or ready
        request. True when that is at or past ``until`` (``run_until`` returns)."""
        it = self.inbox_t
        p = self.ptr
        now = self.now
        if held != _HELD_NONE and p < len(it) and it[p] <= now:
            if held == _HELD_RECV:
                # arrivals held by the recv skipper while no step can run: SGLang's loop spins
                # (an idle pass adds 1) until it takes them in
                self._recv_count = self.recv_interval
            else:
                # arrivals held by the overlap lag while no step can run: the engine is idle
                # and takes them in at once
                self._step_end = -1.0
            return False
        rel = self.kv.releases
        nxt = min(it[p] if p < len(it) else INF, rel[0][0] if rel else INF)
        if self.pp > 1:
            nxt = min(nxt, self._next_ready())
        if nxt >= until:
            if until < INF:
                self.now = until
            return True
        self.now = nxt
        return False

    # ---------------------------------------------------------------- a request alone (pp == 1)
    def _lone(self, until: float) -> bool:
        """The one waiting request of an otherwise empty instance, without planning: admission and
        prefill step of a fresh prompt (``FastPaths.lone_prompt``) or admission of a transferred
        cache (``FastPaths.lone_transfer``), then its decode stretch when nothing else arrived.
        The same arithmetic as the planned path (:meth:`_apply_admission`, :meth:`_step`, the
        policy's decision for a one-request view); returns False, changing nothing, when the
        policy declared no shortcut for this view or another decision could differ (KV short, a
        partial or recomputed prompt)."""
        R = self.req
        q = self.waiting[0]
        kv = self.kv
        now = self.now
        if R.kv_ready[q]:
            if not self._lone_transfer or R.ready_at[q] > now or R.prefilled[q] < R.prompt_len[q]:
                return False
            if not kv.try_allocate(q, R.kv_len[q]):
                return False
            self.waiting.popleft()
            self.running.append(q)
            R.decode_start[q] = now
        else:
            if not self._lone_prompt or R.prefilled[q]:
                return False
            c = R.prompt_len[q]
            if not kv.try_allocate(q, c):
                return False
            self.waiting.popleft()
            self.running.append(q)
            t = self._prefill_t.get(c)
            if t is None:
                if len(self._prefill_t) >= MAX_MEMO_STEPS:
                    self._prefill_t.clear()
                t = self._prefill_t[c] = self.clock.time(StepBatch.of(((c, 0),), ()))
            exit_t = now + t
            self.now = exit_t
            self._step_start, self._step_end = now, exit_t
            self.num_steps += 1
            self._recv_count += RECV_WEIGHT_EXTEND
            R.start[q] = now
            R.prefilled[q] = c
            R.kv_len[q] = c
            R.ready_at[q] = exit_t
            if self._emit_token(q, exit_t):
                self._finish(q, exit_t)
                return True
            if self._hands_off:
                self._hand_off(q, exit_t)
                return True
            now = exit_t
            if now >= until:
                return True
            p = self.ptr
            if p < len(self.inbox_t) and self.inbox_t[p] <= now:
                return True
            if kv.releases and kv.releases[0][0] <= now:
                return True
        if R.kv_len[q] % self.block_size == 0 and kv.free < 1:
            return True  # the decode needs a block: the planned path decides
        self._decode_stretch([q], until)
        return True

    def _queue_cached(self, q: int) -> None:
        """``q`` joins the queue with the prefix its prompt finds cached (prefix cache on)."""
        R = self.req
        pc = self.kv.prefix
        assert pc is not None
        if not R.kv_ready[q] and not R.prefilled[q]:
            R.prefilled[q] = pc.peek(q, R.prompt_len[q])
        self.waiting.append(q)

    def _next_ready(self) -> float:
        if self.pp == 1:
            return INF
        now = self.now
        ra = self.req.ready_at
        return min((ra[q] for q in self.running if ra[q] > now), default=INF)

    # ---------------------------------------------------------------- plan application
    def _apply_admission(self, plan: BatchPlan) -> None:
        R = self.req
        kv = self.kv
        if plan.preempt:
            self.cohort.disband()
            for q in plan.preempt:
                self.running.remove(q)
                kv.free_request(q, R.kv_len[q])
                cached = R.kv_len[q] if self.keep_prefix_on_preempt else 0
                R.kv_len[q] = 0
                R.kv_ready[q] = False
                R.prompt_len[q] = R.inp[q] + R.gen[q]
                R.prefilled[q] = min(cached, R.prompt_len[q] - 1)
                if kv.prefix is not None:  # what it computed stays cached as far as not evicted
                    R.prefilled[q] = kv.prefix.peek(q, R.prompt_len[q])
                R.preemptions[q] += 1
                if self.itl is not None and R.gen[q]:   # (ITL) its last token: the next comes from its recompute
                    self._joined[q] = self._joined.get(q, self._dec_end)
            self.num_preemptions += len(plan.preempt)
            # back to the front of the queue, earliest arrival first (vLLM recompute preemption)
            self.waiting.extendleft(sorted(plan.preempt, key=lambda q: (R.arrival[q], q), reverse=True))
        for q in plan.admit:
            head = self.waiting.popleft()
            assert head == q, "a plan admits from the head of the queue"
            late = kv.allocate(q, R.kv_len[q] if R.kv_ready[q] else R.prompt_len[q])
            if late:  # cached blocks its plan counted on were evicted since: computed in this step
                R.prefilled[q] -= late
                plan.prefill[:] = [(r, c + late if r == q else c) for r, c in plan.prefill]
            self.running.append(q)
            if R.kv_ready[q]:
                R.decode_start[q] = self.now
                if self._lazy_now and R.prefilled[q] >= R.prompt_len[q] and R.ready_at[q] <= self.now:
                    self.cohort.join(q)   # a transferred cache decodes from the next step on

    def _emit_token(self, q: int, t: float) -> bool:
        """Request ``q`` produced a token at ``t`` (its first when its prompt just completed);
        True when that was its last."""
        R = self.req
        if R.first_token[q] != R.first_token[q]:  # NaN: no token yet
            R.first_token[q] = t
            if t > R.last_first:
                R.last_first = t
            R.gen[q] = 1
            if self.itl is not None:
                self._joined[q] = t
        else:   # a preempted request's recompute gives its next token
            R.gen[q] += 1
            if self.itl is not None:
                prev = self._joined.pop(q, None)
                if prev is not None:
                    self.itl.add_one(t - prev, 1)
                self._joined[q] = t
        return R.gen[q] >= R.out[q]

    def _finish(self, q: int, t: float) -> None:
        R = self.req
        if self._joined:
            self._joined.pop(q, None)
        R.finish[q] = t
        if t > R.last_finish:
            R.last_finish = t
        self.running.remove(q)
        self.completed += 1
        self.kv.free_at(q, t, self.now, R.kv_len[q])
        if self.on_finish is not None:
            self.on_finish(q, t)
            self.interrupted = True

    def _hand_off(self, q: int, t: float) -> None:
        """A prefill instance is done with ``q``: its cache leaves when the transfer ends."""
        if self._joined:
            self._joined.pop(q, None)
        self.running.remove(q)
        self.completed += 1
        assert self.handoff is not None
        self.kv.free_at(q, self.handoff(q, t), self.now, self.req.kv_len[q])

    # ---------------------------------------------------------------- one step (any pp)
    def _gap_origin(self, start: float) -> float:
        """Where the ITL gap of a decoding step starting at ``start`` begins (:class:`GapLog`): the end
        of the previous decoding step when the instance was busy since (read before this step sets
        ``_step_end``), else this step's start."""
        busy = self._dec_end >= 0 and start <= self._step_end
        return self._dec_end if busy else start

    def _record_gaps(self, log: GapLog, dec: list[int], exit_t: float, origin: float) -> None:
        """The ITL gaps of one step's decodes ending at ``exit_t`` (before their ``ready_at`` moves)."""
        if self.pp == 1:
            n = len(dec)
            if self._joined:
                for q in dec:
                    t_q = self._joined.pop(q, None)
                    if t_q is not None:
                        log.add_one(exit_t - t_q, 1)
                        n -= 1
            log.add_one(exit_t - origin, n)
        else:   # micro-batches interleave: each decode's gap from its own previous token
            ra = self.req.ready_at
            for q in dec:
                log.add_one(exit_t - ra[q], 1)

    def _decode_gaps(self, log: GapLog, run: list[int], now: float, k: int, ends: np.ndarray | None,
                     times: np.ndarray | None) -> None:
        """The ITL gaps of a decode-only stretch of ``k`` steps from ``now``: its step ends (one
        sequence) or its step times."""
        if ends is not None:
            self._record_stretch(log, ends, run, now)
            return
        assert times is not None
        self._record_gaps(log, run, now + float(times[0]), self._gap_origin(now))
        if k > 1:
            log.add(times[1:k].copy(), len(run))   # a view of the clock's tables

    def _record_stretch(self, log: GapLog, ends: np.ndarray, run: list[int], now: float) -> None:
        """The ITL gaps of a stretch of steps from ``now`` ending at ``ends``, each decoding ``run``."""
        self._record_gaps(log, run, float(ends[0]), self._gap_origin(now))
        if len(ends) > 1:
            log.add(np.diff(ends), len(run))

    def _step(self, plan: BatchPlan) -> None:
        R = self.req
        now = self.now
        pf = R.prefilled
        chunks = []
        st = R.start
        for q, c in plan.prefill:
            chunks.append((c, pf[q]))
            if st[q] != st[q]:  # NaN: first computation for the request
                st[q] = now
        dec = plan.decode
        origin = self._gap_origin(now) if self.itl is not None and dec and self.pp == 1 else 0.0
        key, lag = self._step_key(chunks, dec)
        t = self.clock.by_sums.get(key)
        if t is None:
            t = self.clock.time_of(key)
        if self.kv_loads:
            pc = self.kv.prefix
            assert pc is not None
            t = pc.step_with_loads(t, plan.prefill)
        if self.pp == 1:
            exit_t = now + t
            self.now = exit_t
            self._step_start, self._step_end = now, exit_t
            bubble = 0.0
        else:
            exit_t, bubble = self._through_pipeline(now, t)
        if dec:
            if self.itl is not None:
                self._record_gaps(self.itl, dec, exit_t, origin)
            self._dec_end = exit_t
        self.num_steps += 1
        self._recv_count += RECV_WEIGHT_EXTEND if plan.prefill else 1
        done, joined = self._apply_chunks(plan.prefill, exit_t, bubble)
        if dec:
            last = self._decode_one(dec, lag, bool(chunks))
            if last:
                done += last
            if self.pp > 1:  # (with one stage a decode is ready again when its step ends, which is now)
                ra, bub = R.ready_at, R.bubble
                for q in dec:
                    ra[q] = exit_t
                    bub[q] += bubble
        for q in joined:   # decoding from the next step on
            self.cohort.join(q)
        for q in done:
            self._finish(q, exit_t)

    def _apply_chunks(self, prefill: list[tuple[int, int]], exit_t: float,
                      bubble: float) -> tuple[list[int], list[int]]:
        """The prompt chunks of a step ending at ``exit_t`` are computed: the prompts they complete
        emit their first token; returns those that were also their last and those that decode from
        the next step on (with the cohort; a prefill instance hands the others off)."""
        R = self.req
        pf, kv = R.prefilled, R.kv_len
        done: list[int] = []
        joined: list[int] = []
        for q, c in prefill:
            pf[q] += c
            kv[q] = pf[q]
            R.ready_at[q] = exit_t
            R.bubble[q] += bubble
            if pf[q] >= R.prompt_len[q]:
                if self._emit_token(q, exit_t):
                    done.append(q)
                elif self._hands_off:
                    self._hand_off(q, exit_t)
                elif self._lazy_now:
                    joined.append(q)
        return done, joined

    def _step_key(self, chunks: list[tuple[int, int]], dec: list[int]) -> tuple[tuple[float, ...], bool]:
        """The step's aggregates (:func:`step_sums`), and whether its decodes are the cohort (their
        context sum is then its aggregate, and they advance together); otherwise the cohort is
        written out first when they would be read."""
        coh = self.cohort
        n = len(dec)
        # the cohort's members are running requests, and so are a step's decodes (each once): as
        # many of each as running requests are the same requests, without a membership test
        if n and n == len(coh) and (n == len(self.running) or all(map(coh.t0.__contains__, dec))):
            return step_sums_of(chunks, n, coh.context_sum), True
        if dec and len(coh):
            coh.disband()
        kv = self.req.kv_len
        return step_sums(chunks, [kv[q] for q in dec] if dec else ()), False

    def _decode_one(self, dec: list[int], lag: bool, mixed: bool) -> list[int]:
        """The decodes of a step take one token each (a KV entry, a generated token, blocks; the
        cohort's when ``lag``), or speculative tokens beside prompt chunks (``mixed``); returns
        those that reached their last token."""
        R = self.req
        if lag:
            return self.cohort.advance(1, dec)
        if self.spec_expected_tokens and mixed:
            return self._spec_mixed_decode(dec, R.kv_len, R.gen, R.out)
        return self.kv.decode(dec, 1, R.kv_len, R.gen, R.out)

    def _spec_mixed_decode(self, dec: list[int], kv: list[int], gen: list[int], out: list[int]) -> list[int]:
        """The decodes of a step that also computed prompt chunks, under speculative decoding: each
        advances ``n`` tokens, ``n`` the whole part of a running sum of ``E`` per such step (so
        ``E`` on average, deterministically), at most what the free KV blocks hold (the policy made
        room for one) and what each request has left."""
        c = self._spec_carry + self.spec_expected_tokens
        n = int(c)
        self._spec_carry = c - n
        if n > 1:
            n = self.kv.steps_that_fit(dec, kv, n)
        if n <= 1:
            return self.kv.decode(dec, 1, kv, gen, out)
        short = [q for q in dec if out[q] - gen[q] < n]  # finishing with fewer than n tokens left
        if not short:
            return self.kv.decode(dec, n, kv, gen, out)
        self.kv.decode([q for q in dec if out[q] - gen[q] >= n], n, kv, gen)
        for q in short:
            self.kv.decode([q], out[q] - gen[q], kv, gen)
        return [q for q in dec if gen[q] >= out[q]]

    def _through_pipeline(self, now: float, t: float) -> tuple[float, float]:
        """A micro-batch of stage time ``t`` enters the pipeline at ``now``: when it leaves the
        last stage, and the time stages idled waiting for it (its bubble). The instance may start
        its next micro-batch when the first stage is free."""
        sf = self.stage_free
        end = now + t
        sf[0] = end
        bubble = 0.0
        for s in range(1, self.pp):
            idle_from = sf[s] if sf[s] > now else now
            if end > idle_from:
                bubble += end - idle_from
            end = (end if end > sf[s] else sf[s]) + t
            sf[s] = end
        self.now = sf[0]
        return end, bubble

    # ---------------------------------------------------------------- decode-only stretch (pp == 1)
    def _decode_stretch(self, run: list[int], until: float, hold_steps: int = 0) -> None:
        """Decode ``run`` for as many steps as nothing changes the plan; ``hold_steps`` (a plan
        holding waiting prompts back, :attr:`BatchPlan.hold_steps`) bounds the steps and wakes
        the policy at the next arrival too."""
        R = self.req
        kv = R.kv_len
        nd = len(run)
        now = self.now
        kvc = self.kv
        coh = self.cohort
        if self._lazy_now:
            if len(coh) != nd:   # run is every running request: the cohort is run
                coh.disband()
                coh.form(run)
            kvd0, k_max = coh.context_sum + nd, coh.tokens_left()
        else:
            kvd0, k_max = self._run_bound(run)
        # as long as the fewest tokens any request has left, or as the free blocks allow
        if nd * -(-k_max // kvc.block_size) > kvc.free - kvc.pending:
            coh.flush()
            k_max = kvc.steps_that_fit(run, kv, k_max)
        if 0 < hold_steps < k_max:
            k_max = hold_steps
        recv = self.recv_interval > 1
        if recv:   # up to the step after which the recv skipper takes arrivals in
            k_max = min(k_max, max(1, self.recv_interval - self._recv_count))
        wake = until
        if self.waiting:
            rel = kvc.releases
            if rel and rel[0][0] < wake:
                wake = rel[0][0]
        if not recv and (not self.waiting or hold_steps) and self.ptr < len(self.inbox_t):
            t_in = self.inbox_t[self.ptr]
            if t_in < wake:
                wake = t_in
        if nd == 1:
            # step i ends at now + cum[i] (one float addition, as ``cum + now`` elementwise)
            cum = self.clock.decode_ends(1, kvd0, k_max)
            k = k_max
            if wake < INF and k_max > 1 and not float(cum[k_max - 2]) + now < wake:
                # steps that start before ``wake``: the first always does (now < wake)
                ends = cum[: k_max - 1] + now
                k = min(k_max, int(ends.searchsorted(wake, side="left")) + 1)
            end = float(cum[k - 1]) + now
            start = float(cum[k - 2]) + now if k > 1 else now
            times = None
        else:
            times = self.clock.decode_times(nd, kvd0, k_max)
            k, end = _steps_before(times, now, wake)
            start = end - float(times[k - 1]) if k > 1 else now
        if self.itl is not None:
            self._decode_gaps(self.itl, run, now, k, cum[:k] + now if times is None else None, times)
        self._dec_end = end
        self._step_start, self._step_end = start, end
        done = coh.advance(k, run) if self._lazy_now else kvc.decode(run, k, kv, R.gen, R.out)
        self.num_steps += k
        self._recv_count += k
        self.now = end
        for r in done:  # when the stretch ended with completions (k == d_min)
            self._finish(r, end)

    def _run_bound(self, run: list[int]) -> tuple[int, int]:
        """Keys the decodes of ``run`` attend in their first step (each context plus its new token)
        and the fewest tokens any of them has left (:meth:`_stretch_bound` without the KV bound)."""
        R = self.req
        kv, gen, out = R.kv_len, R.gen, R.out
        kvd0 = len(run)
        k_max = INF_INT
        for r in run:
            kvd0 += kv[r]
            d = out[r] - gen[r]
            if d < k_max:
                k_max = d
        return kvd0, k_max

    # ---------------------------------------------------------------- chunked-prefill stretch (pp == 1)
    def _chunk_stretch(self, plan: BatchPlan, until: float) -> bool:
        """Advance the steps that repeat "every running decode + the next equal chunk of the one
        prompt in progress" (``FastPaths.repeat_chunk``, Sarathi decode-maximal batching) until a
        chunk would finish the prompt, a decode finishes, KV runs short or an admissible arrival
        comes. The steps are timed by one columnar estimator call (context sums grow by the
        batch, the chunk's context by the chunk). Returns False (nothing done) when the plan is
        the prompt's last chunk."""
        R = self.req
        q, c = plan.prefill[0]
        rem = R.prompt_len[q] - R.prefilled[q]
        if c >= rem or (self.kv_loads and q in self.kv_loads):
            return False
        k_chunks = (rem - 1) // c          # steps whose chunk leaves at least one prompt token
        self.cohort.disband()              # the decodes' lengths are read and written one by one here
        run = plan.decode
        kv, gen, out = R.kv_len, R.gen, R.out
        nd = len(run)
        kvd0, k_max, _ = self._stretch_bound(run, k_chunks)
        if k_max < 2:
            return False
        now = self.now
        ctx0 = R.prefilled[q]
        j = np.arange(k_max, dtype=float)
        ctx = ctx0 + c * j
        base = StepBatch(prefill_tokens=float(c), decode_tokens=float(nd), prefill_seqs=1.0)
        times = columns.step_times(self.clock.est, base, "prefill", length=k_max, prefill_keys=ctx + c,
                                   prefill_scores=c * (ctx + c), prefill_causal_scores=c * (ctx + (c + 1) / 2),
                                   decode_keys=kvd0 + nd * j)
        wake = until
        leftover = self.token_budget - nd * self.decode_tokens - c
        if leftover > 0 and not self.waiting and self.ptr < len(self.inbox_t):
            wake = min(wake, self.inbox_t[self.ptr])
        ends = times.cumsum()
        ends += now
        k = k_max
        if wake < INF:
            k = min(k_max, int(ends[: k_max - 1].searchsorted(wake, side="left")) + 1)
        end = float(ends[k - 1])
        if self.itl is not None:
            self._record_stretch(self.itl, ends[:k], run, now)
        self._dec_end = end
        self._step_start, self._step_end = (float(ends[k - 2]) if k > 1 else now), end
        if R.start[q] != R.start[q]:
            R.start[q] = now
        R.prefilled[q] += k * c
        kv[q] = R.prefilled[q]
        R.ready_at[q] = end
        done = self.kv.decode(run, k, kv, gen, out)
        ra = R.ready_at
        for r in run:
            ra[r] = end
        self.num_steps += k
        self._recv_count += RECV_WEIGHT_EXTEND
        self.now = end
        for r in done:
            self._finish(r, end)
        return True

    def _stretch_bound(self, run: list[int], k_max: int) -> tuple[int, int, int]:
        """Keys attended by the decodes of ``run`` in the first step (each context plus its new
        token), how many steps they can take together (at most ``k_max``, no request past its
        last token, no more than the free KV blocks allow), and the fewest tokens any of them has
        left (the stretch that runs that many steps ends with completions)."""
        kvd0, d_min = self._run_bound(run)
        if d_min < k_max:
            k_max = d_min
        cache = self.kv
        kv = self.req.kv_len
        # the owner's search only when the stretch's new blocks may not fit (its own first test, inlined:
        # this runs per stretch)
        if run and len(run) * -(-k_max // cache.block_size) > cache.free:
            k_max = cache.steps_that_fit(run, kv, k_max)
        return kvd0, k_max, d_min
