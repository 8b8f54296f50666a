"""In-flight batching with whole-sequence KV reservation (TensorRT-LLM, GUARANTEED_NO_EVICT).

TensorRT-LLM 1.2 (PyTorch backend; ``SchedulerConfig.capacity_scheduler_policy =
GUARANTEED_NO_EVICT``, ``enable_chunked_prefill = False``), as this policy reproduces it:

* Every step decodes all running requests and adds waiting prompts FCFS, each whole, while the
  step's tokens stay within ``token_budget`` (``max_num_tokens`` 8192) and its sequences within
  ``max_batch`` (``max_batch_size``): context and generation requests share the step.
* A request is admitted only when the KV cache can hold its whole sequence (prompt plus every
  output token) on top of what the running requests will still grow to; so no request is ever
  preempted.
* The step's first prompt runs whole even when the decodes took part of the budget (so a prompt
  close to ``max_num_tokens`` does not starve behind a steady decode batch; the silicon rows of
  8192-token prompts show it does not); a prompt longer than the whole budget (which the engine
  refuses unless chunking is on) runs in budget-sized chunks.
* Batch waiting (off by default; ``batch_wait_timeout_iters`` and ``batch_wait_max_tokens_ratio``
  of the LLM API, both 0 in ``llm_args.py``): while generation requests run, the prompts a step
  would take are held back until the step's tokens (those prompts plus one per decode) reach
  ``ratio x max_num_tokens`` or the prompts have waited ``timeout_iters`` steps; prompts arriving
  meanwhile join the same wait, so they are released together
  (``_torch/pyexecutor/py_executor.py`` ``PyExecutor._waiting_requests``, applied in ``_schedule``
  without attention DP; with nothing decoding nothing waits).
* Attention-DP balance (``attention_dp_config.enable_balance``, off by default; ``timeout_iters``
  50 and ``batching_wait_iters`` 10 when on, ``llm_args.py`` ``AttentionDpConfig``;
  ``PyExecutor._balance_adp_requests``): with attention data parallelism over ``adp_ranks`` ranks,
  the prompts of a step are held back until every rank has one to run, every rank decoding; a
  counter of the steps without that (steps with no prompt at all included) releases them when it
  reaches ``timeout_iters`` and starts again, and a rank without a decode releases them at once.
  When every rank has a prompt and a decode they wait ``batching_wait_iters`` more steps. The ranks
  are pooled in one instance here: "every rank has a prompt" reads as at least ``adp_ranks``
  prompts in the step, "every rank decodes" as at least ``adp_ranks`` decodes. Batch waiting
  applies only without attention DP (``PyExecutor._schedule``).
"""

from __future__ import annotations

from serveplan.sim.schedulers.base import BatchPlan, FastPaths, InstanceView, Scheduler, blocks_for, register_scheduler


@register_scheduler("inflight-no-evict")
class InflightNoEvictScheduler(Scheduler):
    """Decodes plus whole prompts each step; admission reserves the full sequence."""

    tag = "inflight"
    # nothing waiting and every running request decoding: all decode, and the reservation
    # guarantees their blocks fit (the instance's shortcut checks it again)
    fast_paths = FastPaths(all_decode=True)

    @staticmethod
    def future_blocks(view: InstanceView) -> int:
        """Blocks the running requests still need to reach their last token."""
        r = view.req
        bs = view.block_size
        # a request's last step leaves input + output - 1 tokens in its cache (sim.request)
        return sum(max(blocks_for(r.inp[q] + r.out[q] - 1, bs) - r.blocks[q], 0) for q in view.running)

    def __init__(self, *, batch_wait_iters: int = 0, batch_wait_tokens_ratio: float = 0.0, adp_ranks: int = 1,
                 adp_timeout_iters: int | None = None, adp_batching_wait_iters: int = 0) -> None:
        self.batch_wait_iters = int(batch_wait_iters)
        self.batch_wait_tokens_ratio = float(batch_wait_tokens_ratio)
        #: the instance's step count when the prompts now held back began to wait (None: none wait)
        self._wait_from: int | None = None
        #: attention-DP balance: ranks, and the counters' settings (None: balance off)
        self.adp_ranks = int(adp_ranks)
        self.adp_timeout_iters = None if adp_timeout_iters is None else int(adp_timeout_iters)
        self.adp_batching_wait_iters = int(adp_batching_wait_iters)
        #: step count when the balance's waiting counter last started from 0
        self._adp_reset = 0
        #: steps the prompts have waited for batching with every rank ready
        self._adp_batching = 0

    def plan_batch(self, view: InstanceView) -> BatchPlan | None:
        plan = self._plan(view)
        if plan is None:
            return plan
        if self.adp_ranks > 1:   # batch waiting is off under attention DP (PyExecutor._schedule)
            if self.adp_timeout_iters is not None:
                self._adp_balance(view, plan)
        elif self.batch_wait_iters or self.batch_wait_tokens_ratio:
            self._batch_wait(view, plan)
        return plan

    def _adp_balance(self, view: InstanceView, plan: BatchPlan) -> None:
        """Hold the plan's prompts back while TensorRT-LLM's attention-DP balance would (module
        docstring)."""
        if plan.preempt:
            return
        steps = getattr(view, "num_steps", 0)
        ranks = self.adp_ranks
        every_decodes = len(plan.decode) >= ranks
        if len(plan.prefill) >= ranks:          # every rank has a prompt
            self._adp_reset = steps
            if every_decodes and self._adp_batching < self.adp_batching_wait_iters:
                self._adp_batching += 1
                self._hold(plan, 1)
                return
            self._adp_batching = 0
            return
        timeout = self.adp_timeout_iters or 0
        # the counter runs on every step without a prompt on every rank, restarting at the timeout
        waited = (steps - self._adp_reset) % timeout if timeout else 0
        if not every_decodes or timeout == 0 or (waited == 0 and steps != self._adp_reset):
            self._adp_reset = steps
            return
        if not plan.prefill:
            return
        self._hold(plan, timeout - waited)

    @staticmethod
    def _hold(plan: BatchPlan, steps: int) -> None:
        """The plan without its prompts, for at most ``steps`` steps (or the next arrival)."""
        plan.prefill = []
        plan.admit = []
        plan.hold_steps = max(1, steps)

    def _batch_wait(self, view: InstanceView, plan: BatchPlan) -> None:
        """Hold the plan's prompts back while TensorRT-LLM's batch waiting would (module docstring)."""
        if not plan.prefill or not plan.decode:
            self._wait_from = None  # nothing to hold, or nothing decodes (no dead wait)
            return
        if plan.preempt:
            return
        steps = getattr(view, "num_steps", 0)
        waited = 0 if self._wait_from is None else steps - self._wait_from
        tokens = sum(c for _, c in plan.prefill) + len(plan.decode) * getattr(view, "decode_tokens", 1)
        if waited >= self.batch_wait_iters or tokens >= self.batch_wait_tokens_ratio * view.token_budget:
            self._wait_from = None
            return
        if self._wait_from is None:
            self._wait_from = steps
        self._hold(plan, self.batch_wait_iters - waited)

    def _plan(self, view: InstanceView) -> BatchPlan | None:
        plan = BatchPlan()
        r = view.req
        if view.waiting:
            self.admit_kv_ready(view, plan)
            if plan.admit:
                return plan
        decodes = self.ready_decodes(view)[: view.max_batch]
        # the reservation makes every decode's next block fit; a view that was not built by this
        # policy (another policy's state) may not, and then preempts as vLLM does
        decodes, free_after = self.fit_decodes(view, decodes, plan) if decodes else (decodes, view.free_blocks)
        plan.decode = decodes
        # a decode takes K + 1 tokens with speculative decoding (InstanceView.decode_tokens)
        budget = view.token_budget - len(decodes) * getattr(view, "decode_tokens", 1)
        seqs = len(decodes)
        now = view.now
        preempted = set(plan.preempt)
        for q in view.running:  # a long prompt in progress (chunked at the budget)
            if budget <= 0 or seqs >= view.max_batch:
                break
            if r.prefilled[q] >= r.prompt_len[q] or r.ready_at[q] > now or q in preempted:
                continue
            c = int(min(r.prompt_len[q] - r.prefilled[q], budget))
            plan.prefill.append((q, c))
            budget -= c
            seqs += 1
        if view.waiting and budget > 0 and not plan.preempt:
            bs = view.block_size
            free = free_after - self.future_blocks(view)
            slots = view.max_running - len(view.running)
            for q in view.waiting:
                if slots <= 0 or seqs >= view.max_batch or r.kv_ready[q]:
                    break
                toks = r.prompt_len[q] - r.prefilled[q]
                whole = blocks_for(r.inp[q] + r.out[q] - 1, bs)
                if whole > free:
                    break
                if toks > budget:
                    if plan.prefill:  # a second prompt must fit what the step has left
                        break
                    # the step's first prompt runs whole beside the decodes (else a prompt near
                    # the budget would starve behind a steady decode batch); one longer than the
                    # whole budget runs in budget-sized chunks
                    toks = int(min(toks, view.token_budget))
                plan.prefill.append((q, toks))
                plan.admit.append(q)
                budget -= toks
                free -= whole
                slots -= 1
                seqs += 1
        if plan.is_empty:
            return None
        return plan
