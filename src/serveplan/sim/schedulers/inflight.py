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
class AttentionDPConfig(Options):
    """TensorRT-LLM's ``attention_dp_config`` (``llm_args.py`` ``AttentionDpConfig``: balance off,
    ``timeout_iters`` 50, ``batching_wait_iters`` 10)."""

    enable_balance: bool = False
    timeout_iters: int = 50
    batching_wait_iters: int = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class InflightNoEvictOptions(Options):
    """TensorRT-LLM's scheduler knobs, by the LLM API's names (``llm_args.py``; module docstring).

    Attributes
    ----------
    batch_wait_timeout_iters, batch_wait_max_tokens_ratio:
        Batch waiting (both 0, off, by default).
    attention_dp_config:
        Attention-DP balance (:class:`AttentionDPConfig`).
    attention_dp_ranks:
        Ranks of attention data parallelism: the layout's ``dp`` (:meth:`for_layout`), not a file's.
    """

    from_layout = ("attention_dp_ranks",)

    batch_wait_timeout_iters: int = 0
    batch_wait_max_tokens_ratio: float = 0.0
    attention_dp_config: AttentionDPConfig = AttentionDPConfig()
    attention_dp_ranks: int = 1

    def check(self, where: str) -> None:
        if not 0 <= self.batch_wait_max_tokens_ratio <= 1:
            raise SpecError(f"{where}.batch_wait_max_tokens_ratio={self.batch_wait_max_tokens_ratio} must be "
                            "in [0, 1]")

    @property
    def balances(self) -> bool:
        """Attention-DP balance holds prompts (on, and more than one rank)."""
        return self.attention_dp_ranks > 1 and self.attention_dp_config.enable_balance

    @property
    def batch_waits(self) -> bool:
        """Batch waiting holds prompts (on, and no attention DP: ``PyExecutor._schedule``)."""
        return self.attention_dp_ranks == 1 and bool(self.batch_wait_timeout_iters or
                                                     self.batch_wait_max_tokens_ratio)

    def notes(self) -> list[str]:
        adp = self.attention_dp_config
        if self.balances:
            return [f"attention-DP balance: prompts held until each of the {self.attention_dp_ranks} ranks has one, "
                    f"up to {adp.timeout_iters} steps (then {adp.batching_wait_iters} more for batching)"]
        if self.batch_waits:
            return [f"batch waiting: prompts held up to {self.batch_wait_timeout_iters} steps or until a step's "
                    f"tokens reach {self.batch_wait_max_tokens_ratio:g} x the budget"]
        if self.batch_wait_timeout_iters or self.batch_wait_max_tokens_ratio:
            # TensorRT-LLM PyExecutor._schedule: batch waiting only without attention DP
            return ["batch waiting off: TensorRT-LLM applies it only without attention DP"]
        return []


@register_scheduler("inflight-no-evict")
class InflightNoEvictScheduler(Scheduler):
    """Decodes plus whole prompts each step; admission reserves the full sequence."""

    Options = InflightNoEvictOptions
    tag = "inflight"
    admission = "full"
    # nothing waiting and every running request decoding: all decode, and the reservation
    # guarantees their blocks fit (the instance's shortcut checks it again)
    fast_paths = FastPaths(all_decode=True)
    # every running request decoding and fitting: planned from the instance's running sums
    reads_decode_all = True

    @staticmethod
    def future_blocks(view: InstanceView) -> int:
        """Blocks the running requests still need to reach their last token."""
        r = view.req
        bs = view.block_size
        # a request's last step leaves input + output - 1 tokens in its cache (sim.request)
        return sum(max(blocks_for(r.inp[q] + r.out[q] - 1, bs) - r.blocks[q], 0) for q in view.running)

    def __init__(self, options: InflightNoEvictOptions | None = None, **changes: Any) -> None:
        super().__init__(options, **changes)
        o = self.options
        assert isinstance(o, InflightNoEvictOptions)
        self.batch_wait_iters = o.batch_wait_timeout_iters if o.batch_waits else 0
        self.batch_wait_tokens_ratio = o.batch_wait_max_tokens_ratio if o.batch_waits else 0.0
        #: the instance's step count when the prompts now held back began to wait (None: none wait)
        self._wait_from: int | None = None
        #: attention-DP balance: ranks, and the counters' settings (None: balance off)
        self.adp_ranks = o.attention_dp_ranks
        self.adp_timeout_iters = o.attention_dp_config.timeout_iters if o.balances else None
        self.adp_batching_wait_iters = o.attention_dp_config.batching_wait_iters if o.balances else 0
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
        # every running request decodes and their blocks fit (the instance's aggregate,
        # ``reads_decode_all``): what ready_decodes and fit_decodes give, and no prompt in progress
        need_all: int | None = getattr(view, "decode_all_need", None)
        if need_all is not None:
            decodes, free_after = list(view.running), view.free_blocks - need_all
        else:
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
        for q in view.running if need_all is None else ():  # a long prompt in progress (chunked at the budget)
            if budget <= 0 or seqs >= view.max_batch:
                break
            if r.prefilled[q] >= r.prompt_len[q] or r.ready_at[q] > now or q in preempted:
                continue
            c = int(min(r.prompt_len[q] - r.prefilled[q], budget))
            plan.prefill.append((q, c))
            budget -= c
            seqs += 1
        if view.waiting and budget > 0 and not plan.preempt:
            fut: int = self.future_blocks(view) if need_all is None else view.decode_all_future()  # type: ignore[attr-defined]
            self._admit_prompts(view, plan, budget, seqs, free_after - fut)
        if plan.is_empty:
            return None
        return plan

    @staticmethod
    def _admit_prompts(view: InstanceView, plan: BatchPlan, budget: float, seqs: int, free: int) -> None:
        """Waiting prompts FCFS, each whole, while their whole sequences fit ``free`` blocks (what
        the running requests will not grow into) and the step's budget and sequences allow."""
        r = view.req
        bs = view.block_size
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
