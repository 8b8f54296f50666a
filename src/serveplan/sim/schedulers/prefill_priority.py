"""Prefill-priority batching with chunked prompts and reserved output room (SGLang's scheduler).

SGLang 0.5 (``managers/scheduler.py`` ``get_next_batch_to_run``, ``managers/schedule_policy.py``
``PrefillAdder``), as this policy reproduces it:

* A step is a **prefill step** whenever a prefill batch can be formed, else a **decode step** of
  every running request. Decodes join a prefill step only with mixing enabled
  (``--enable-mixed-chunk``; off by default).
* A prefill batch takes the prompt in progress first (the chunked request), then waiting prompts
  FCFS, while the step's new tokens stay within ``token_budget`` (``chunked_prefill_size``, which
  also caps the chunk of one prompt) and ``max_prefill_tokens``; a prompt that does not fit whole
  is cut to what is left and continues in the next prefill step.
* Admission keeps room for what running requests will still write: the KV pool must hold the
  new prompt plus its own remaining output (clipped at ``clip_tokens``) plus
  ``new_token_ratio x`` the remaining output of every running request. The ratio starts at
  ``init_ratio`` and decays linearly to ``init_ratio x min_ratio_factor`` over
  ``decay_steps`` decode steps; a retraction resets it.
* When a decode step does not fit, requests are retracted (recompute): their KV is freed and
  they return to the head of the queue (``ScheduleBatch.retract_decode``; here the most
  recently admitted first, as :meth:`Scheduler.fit_decodes` does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from serveplan.errors import SpecError
from serveplan.sim.schedulers.base import (
    BatchPlan,
    FastPaths,
    InstanceView,
    Options,
    Scheduler,
    blocks_for,
    register_scheduler,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefillPriorityOptions(Options):
    """SGLang's scheduler knobs, by its own names (defaults: SGLang 0.5, ``server_args.py``
    ``ServerArgs`` and ``environ.py``; the engine files give the values of each version).

    Attributes
    ----------
    enable_mixed_chunk:
        Decodes join prefill steps (``--enable-mixed-chunk``, off by default).
    max_prefill_tokens:
        New prompt tokens of one prefill step (``--max-prefill-tokens``; ``None``: no limit
        besides the token budget).
    init_new_token_ratio, min_new_token_ratio_factor, new_token_ratio_decay_steps:
        The reserve for the outputs still to come (``SGLANG_INIT_NEW_TOKEN_RATIO`` 0.7,
        ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`` 0.14, ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`` 600).
    clip_max_new_tokens:
        Each request's remaining output counted at most this many tokens
        (``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`` 4096; 0: unclipped).
    scheduler_recv_interval:
        ``--scheduler-recv-interval`` (1: requests taken in before every step;
        ``managers/scheduler_recv_skipper.py``): above 1, while requests run, the scheduler
        looks for new requests only when a counter reaches it, each decode step adding 1 and any
        step with prompt tokens 1000 (:class:`~serveplan.sim.instance.Instance`).
    attention_dp_ranks:
        Ranks of attention data parallelism: the layout's ``dp`` (:meth:`for_layout`), not a
        file's. Under DP attention every rank runs its own scheduler (``managers/
        data_parallel_controller.py``), each with its own ``max_prefill_tokens``, while
        ``--chunked-prefill-size`` is divided among them (``server_args.py``
        ``_handle_data_parallelism``: ``chunked_prefill_size // dp_size``); the instance's
        budget is its ranks' together, so the limit of one prefill step of the instance is
        ``max_prefill_tokens x attention_dp_ranks``.
    """

    from_layout = ("attention_dp_ranks",)

    enable_mixed_chunk: bool = False
    max_prefill_tokens: int | None = None
    init_new_token_ratio: float = 0.7
    min_new_token_ratio_factor: float = 0.14
    new_token_ratio_decay_steps: int = 600
    clip_max_new_tokens: int = 4096
    scheduler_recv_interval: int = 1
    attention_dp_ranks: int = 1

    def check(self, where: str) -> None:
        if not 0 < self.init_new_token_ratio <= 1:
            raise SpecError(f"{where}.init_new_token_ratio={self.init_new_token_ratio} must be in (0, 1]")
        if self.scheduler_recv_interval < 1:
            raise SpecError(f"{where}.scheduler_recv_interval={self.scheduler_recv_interval} must be >= 1 "
                            "(1: requests taken in before every step)")
        if self.max_prefill_tokens is not None and self.max_prefill_tokens < 1:
            raise SpecError(f"{where}.max_prefill_tokens={self.max_prefill_tokens} must be >= 1 (or null: no limit)")

    @property
    def recv_interval(self) -> int:
        return self.scheduler_recv_interval

    def notes(self) -> list[str]:
        if self.scheduler_recv_interval > 1:
            return [f"new requests taken in every {self.scheduler_recv_interval} decode steps "
                    "(--scheduler-recv-interval)"]
        return []


@register_scheduler("prefill-priority")
class PrefillPriorityScheduler(Scheduler):
    """SGLang-style: prefill steps first, chunked prompts, decodes alone unless mixing is on."""

    Options = PrefillPriorityOptions
    tag = "priority"
    chunked = True
    admission = "reserve-ratio"
    # every decode step updates the new-token ratio, so each step is planned; with nothing
    # waiting the plan is "all decode" and the instance runs it as a stretch
    fast_paths = FastPaths()
    # every running request decoding and fitting: planned from the instance's running sums
    reads_decode_all = True

    def __init__(self, options: PrefillPriorityOptions | None = None, **changes: Any) -> None:
        super().__init__(options, **changes)
        o = self.options
        assert isinstance(o, PrefillPriorityOptions)
        self.mixed = o.enable_mixed_chunk
        self.max_prefill_tokens = (math.inf if o.max_prefill_tokens is None
                                   else float(o.max_prefill_tokens * o.attention_dp_ranks))
        init = o.init_new_token_ratio
        self.init_ratio = init
        self.min_ratio = init * o.min_new_token_ratio_factor
        self.decay = (init - self.min_ratio) / max(o.new_token_ratio_decay_steps, 1)
        self.clip = o.clip_max_new_tokens if o.clip_max_new_tokens > 0 else 1 << 62
        self.ratio = init

    def reserved_tokens(self, view: InstanceView, all_decode: bool = False) -> float:
        """Tokens kept for the remaining output of the running requests (``ratio x`` each);
        ``all_decode``: from the view's running sum (``decode_all_left``, ``reads_decode_all``)."""
        clip = self.clip
        if all_decode:
            left: int = view.decode_all_left(clip)  # type: ignore[attr-defined]
            return self.ratio * left
        r = view.req
        return self.ratio * sum(min(r.out[q] - r.gen[q], clip) for q in view.running)

    def plan_batch(self, view: InstanceView) -> BatchPlan | None:
        plan = BatchPlan()
        if view.waiting:
            self.admit_kv_ready(view, plan)
            if plan.admit:
                return plan
        budget = min(view.token_budget, self.max_prefill_tokens)
        # every running request decodes and their blocks fit (the instance's aggregate,
        # ``reads_decode_all``): no prompt in progress, and ready_decodes / fit_decodes keep them all
        need_all: int | None = getattr(view, "decode_all_need", None)
        seqs = 0
        if need_all is None:
            budget, seqs = self._continue_prompts(view, plan, budget)
        if view.waiting and budget > 0:
            seqs = self._admit_prompts(view, plan, budget, seqs, need_all is not None)
        if plan.prefill and not self.mixed:
            return plan
        r = view.req
        decodes = self.ready_decodes(view) if need_all is None else list(view.running)
        if plan.prefill:  # mixed: the running decodes ride along when their blocks fit
            room = view.free_blocks - sum(blocks_for(r.prompt_len[q], view.block_size) for q in plan.admit)
            need = need_all if need_all is not None else sum(1 for q in decodes if r.kv_len[q] % view.block_size == 0)
            if need <= room:
                plan.decode = decodes[: max(view.max_batch - seqs, 0)]
            return plan
        if not decodes:
            return None
        kept = decodes if need_all is not None else self.fit_decodes(view, decodes, plan)[0]
        # the ratio decays on every decode step and jumps back when requests are retracted
        self.ratio = self.init_ratio if plan.preempt else max(self.ratio - self.decay, self.min_ratio)
        plan.decode = kept[: view.max_batch]
        return plan

    @staticmethod
    def _continue_prompts(view: InstanceView, plan: BatchPlan, budget: float) -> tuple[float, int]:
        """The prompt in progress (the chunked request) goes first."""
        r = view.req
        seqs = 0
        for q in view.running:
            if budget <= 0 or seqs >= view.max_batch:
                break
            if r.prefilled[q] >= r.prompt_len[q] or r.ready_at[q] > view.now:
                continue
            c = int(min(view.chunk_size, r.prompt_len[q] - r.prefilled[q], budget))
            plan.prefill.append((q, c))
            budget -= c
            seqs += 1
        return budget, seqs

    def _admit_prompts(self, view: InstanceView, plan: BatchPlan, budget: float, seqs: int,
                       all_decode: bool = False) -> int:
        """Waiting prompts FCFS while the pool keeps room for the outputs still to come."""
        r = view.req
        bs = view.block_size
        free_tokens = view.free_blocks * bs - self.reserved_tokens(view, all_decode)
        slots = view.max_running - len(view.running)
        new_prompts = 0
        for q in view.waiting:
            if slots <= 0 or seqs >= view.max_batch or budget <= 0 or r.kv_ready[q]:
                break
            if new_prompts >= view.max_prompts:
                break
            blocks, toks = self.admit_cost(view, q)
            need = blocks * bs + min(r.out[q] - r.gen[q], self.clip)
            if need > free_tokens:
                break
            c = int(min(view.chunk_size, toks, budget))
            plan.prefill.append((q, c))
            plan.admit.append(q)
            budget -= c
            free_tokens -= need
            slots -= 1
            seqs += 1
            new_prompts += 1
        return seqs
