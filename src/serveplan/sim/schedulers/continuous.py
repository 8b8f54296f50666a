"""Prefill-first continuous batching without mixing (vLLM v0 default scheduler).

Each step is either a prefill step or a decode step, never both (BestServe §10: "prefills are
prioritized; prefill and decode are never batched together"): when waiting prompts fit (free
sequence slots, KV blocks for the whole prompt, the token budget), the step prefills as many of
them as fit, FCFS, and the running decodes pause; otherwise every running request decodes one
token, preempting the most recently admitted ones when the KV cache is full.
"""

from __future__ import annotations

from serveplan.sim.schedulers.base import BatchPlan, FastPaths, InstanceView, Scheduler, register_scheduler


@register_scheduler("prefill-first")
class PrefillFirstScheduler(Scheduler):
    """Prefill-prioritising iteration-level scheduler (vLLM v0, BestServe's collocated model)."""

    tag = "prefill-first"
    # a lone fresh prompt fits the token budget alone and is prefilled whole; with nothing
    # waiting every ready request decodes (the plan below)
    fast_paths = FastPaths(lone_prompt=True, all_decode=True)

    def plan_batch(self, view: InstanceView) -> BatchPlan | None:
        plan = BatchPlan()
        if view.waiting:
            self.admit_kv_ready(view, plan)
            if plan.admit:  # transferred requests join without compute; plan again after
                return plan
            self._admit_prompts(view, plan)
            if plan.prefill:
                return plan
        decodes = self.ready_decodes(view)
        if not decodes:
            return None
        kept, _ = self.fit_decodes(view, decodes, plan)
        plan.decode = kept[: view.max_batch]
        return plan

    @staticmethod
    def _admit_prompts(view: InstanceView, plan: BatchPlan) -> None:
        free = view.free_blocks
        slots = view.max_running - len(view.running)
        new_prompts = 0
        tokens = 0
        for q in view.waiting:
            if slots <= 0 or view.req.kv_ready[q]:
                break
            blocks, toks = Scheduler.admit_cost(view, q)
            if blocks > free:
                break
            if new_prompts >= min(view.max_prompts, view.max_batch):
                break
            if new_prompts and tokens + toks > view.token_budget:
                break
            plan.prefill.append((q, toks))
            new_prompts += 1
            tokens += toks
            plan.admit.append(q)
            free -= blocks
            slots -= 1
