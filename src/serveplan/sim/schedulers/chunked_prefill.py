"""Chunked prefill with decode-maximal batching (Sarathi §4.2-4.3; vLLM's default since v0.6).

Each step first takes every running decode (one token each), then fills the remaining token
budget with prefill chunks, FCFS: partially prefilled running prompts first, then newly admitted
ones, each chunk at most ``chunk_size`` tokens. ``token_budget`` defaults to ``chunk_size``
(Sarathi: one chunk plus the piggybacked decodes per step; with ``B`` decodes the chunk is
``chunk_size - B`` tokens, the paper's tile-aligned choice §4.4).
"""

from __future__ import annotations

from serveplan.sim.schedulers.base import BatchPlan, FastPaths, InstanceView, Scheduler, register_scheduler


@register_scheduler("chunked-prefill", "sarathi")
class ChunkedPrefillScheduler(Scheduler):
    """Decode-maximal batching: decodes first, then prefill chunks up to the token budget."""

    tag = "chunked"
    chunked = True
    # running decodes first, then the partial prompt's next chunk: the plan repeats while nothing
    # new can be admitted
    fast_paths = FastPaths(repeat_chunk=True, all_decode=True)
    reads_decode_all = True

    def plan_batch(self, view: InstanceView) -> BatchPlan | None:
        plan = BatchPlan()
        r = view.req
        if view.waiting:
            self.admit_kv_ready(view, plan)
            if plan.admit:  # transferred requests join without compute; plan again after
                return plan
        need_all: int | None = getattr(view, "decode_all_need", None)
        if need_all is not None:
            # every running request decodes and their blocks fit (the instance's aggregate): what
            # ready_decodes and fit_decodes give, and no partial prompt below
            decodes = list(view.running)
            free = view.free_blocks - need_all
        else:
            decodes = self.ready_decodes(view)
            if decodes:
                decodes, free = self.fit_decodes(view, decodes, plan)
                decodes = decodes[: view.max_batch]
            else:
                free = view.free_blocks
        plan.decode = decodes
        # a decode takes K + 1 tokens with speculative decoding (InstanceView.decode_tokens)
        budget = view.token_budget - len(decodes) * getattr(view, "decode_tokens", 1)
        seqs = len(decodes)
        now = view.now
        preempted = set(plan.preempt)
        # partially prefilled running prompts
        for q in view.running if need_all is None else ():
            if budget <= 0 or seqs >= view.max_batch:
                break
            if q in preempted or r.prefilled[q] >= r.prompt_len[q] or r.ready_at[q] > now:
                continue
            c = int(min(view.chunk_size, r.prompt_len[q] - r.prefilled[q], budget))
            plan.prefill.append((q, c))
            budget -= c
            seqs += 1
        # new prompts FCFS (none in a step that had to preempt: memory is short, vLLM does the same)
        if plan.preempt:
            return plan
        slots = view.max_running - (len(view.running) - len(plan.preempt))
        new_prompts = 0
        for q in view.waiting:
            if slots <= 0 or seqs >= view.max_batch or r.kv_ready[q]:
                break
            blocks, toks = self.admit_cost(view, q)
            if blocks > free or budget <= 0 or new_prompts >= view.max_prompts:
                break
            c = int(min(view.chunk_size, toks, budget))
            plan.prefill.append((q, c))
            budget -= c
            new_prompts += 1
            plan.admit.append(q)
            free -= blocks
            slots -= 1
            seqs += 1
        if plan.is_empty and not plan.preempt:
            return None
        return plan
