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

from serveplan.sim.schedulers.base import BatchPlan, FastPaths, InstanceView, Scheduler, blocks_for, register_scheduler


@register_scheduler("prefill-priority")
class PrefillPriorityScheduler(Scheduler):
    """SGLang-style: prefill steps first, chunked prompts, decodes alone unless ``mixed``."""

    tag = "priority"
    chunked = True
    # every decode step updates the new-token ratio, so each step is planned; with nothing
    # waiting the plan is "all decode" and the instance runs it as a stretch
    fast_paths = FastPaths()

    def __init__(self, *, mixed: bool = False, max_prefill_tokens: float = float("inf"), init_ratio: float = 0.7,
                 min_ratio_factor: float = 0.14, decay_steps: int = 600, clip_tokens: int = 4096) -> None:
        self.mixed = mixed
        self.max_prefill_tokens = max_prefill_tokens
        self.init_ratio = init_ratio
        self.min_ratio = init_ratio * min_ratio_factor
        self.decay = (init_ratio - self.min_ratio) / max(decay_steps, 1)
        self.clip = clip_tokens if clip_tokens > 0 else 1 << 62
        self.ratio = init_ratio

    def reserved_tokens(self, view: InstanceView) -> float:
        """Tokens kept for the remaining output of the running requests (``ratio x`` each)."""
        r = view.req
        clip = self.clip
        return self.ratio * sum(min(r.out[q] - r.gen[q], clip) for q in view.running)

    def plan_batch(self, view: InstanceView) -> BatchPlan | None:
        plan = BatchPlan()
        if view.waiting:
            self.admit_kv_ready(view, plan)
            if plan.admit:
                return plan
        budget = min(view.token_budget, self.max_prefill_tokens)
        budget, seqs = self._continue_prompts(view, plan, budget)
        if view.waiting and budget > 0:
            seqs = self._admit_prompts(view, plan, budget, seqs)
        if plan.prefill and not self.mixed:
            return plan
        r = view.req
        decodes = self.ready_decodes(view)
        if plan.prefill:  # mixed: the running decodes ride along when their blocks fit
            room = view.free_blocks - sum(blocks_for(r.prompt_len[q], view.block_size) for q in plan.admit)
            need = sum(1 for q in decodes if r.kv_len[q] % view.block_size == 0)
            if need <= room:
                plan.decode = decodes[: max(view.max_batch - seqs, 0)]
            return plan
        if not decodes:
            return None
        kept, _ = self.fit_decodes(view, decodes, plan)
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

    def _admit_prompts(self, view: InstanceView, plan: BatchPlan, budget: float, seqs: int) -> int:
        """Waiting prompts FCFS while the pool keeps room for the outputs still to come."""
        r = view.req
        bs = view.block_size
        free_tokens = view.free_blocks * bs - self.reserved_tokens(view)
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
