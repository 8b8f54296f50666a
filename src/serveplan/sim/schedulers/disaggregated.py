"""Role schedulers of a disaggregated fleet (BestServe §9, DistServe-style).

* ``prefill-only``: batches whole prompts (up to ``prefill_max_batch`` and the token budget),
  FCFS; the request leaves the instance after its prefill, its KV cache moving to a decode
  instance.
* ``decode-only``: admits requests whose KV arrived (``kv_ready``) while blocks and sequence
  slots allow, and decodes every running request each step. A request preempted here is
  recomputed here (vLLM recompute), which is a prefill step on the decode instance.
"""

from __future__ import annotations

from serveplan.sim.schedulers.base import BatchPlan, FastPaths, InstanceView, Scheduler, register_scheduler
from serveplan.sim.schedulers.continuous import PrefillFirstScheduler


@register_scheduler("prefill-only")
class PrefillOnlyScheduler(Scheduler):
    """Whole-prompt prefill batches; no decoding on this instance."""

    tag = "prefill-only"
    collocated = False
    fast_paths = FastPaths(lone_prompt=True)

    def plan_batch(self, view: InstanceView) -> BatchPlan | None:
        if not view.waiting:
            return None
        plan = BatchPlan()
        PrefillFirstScheduler._admit_prompts(view, plan)
        return plan if plan.prefill else None


@register_scheduler("decode-only")
class DecodeOnlyScheduler(PrefillFirstScheduler):
    """Admit transferred requests and decode; recompute preempted ones (prefill first)."""

    tag = "decode-only"
    collocated = False
    # a recomputed prompt alone takes the planned path (it is rare); transferred caches do not
    fast_paths = FastPaths(lone_transfer=True, all_decode=True)
