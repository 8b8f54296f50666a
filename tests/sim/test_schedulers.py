"""Conformance of every registered scheduler: plans keep the invariants of ``schedulers/base.py``."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serveplan.errors import SpecError
from serveplan.sim import SimulationConfig, Workload, simulate
from serveplan.sim.request import RequestState
from serveplan.sim.schedulers import SCHEDULERS, blocks_for, get_scheduler


class View:
    def __init__(self, R, waiting, running, free_blocks, max_batch, budget, chunk, pmb):
        self.now = 0.0
        self.req = R
        self.waiting = deque(waiting)
        self.running = list(running)
        self.free_blocks = free_blocks
        self.block_size = 16
        self.max_batch = max_batch
        self.max_running = max_batch
        self.max_prompts = pmb
        self.token_budget = budget
        self.chunk_size = chunk


@st.composite
def views(draw):
    n = draw(st.integers(1, 12))
    inp = np.array(draw(st.lists(st.integers(1, 3000), min_size=n, max_size=n)))
    out = np.array(draw(st.lists(st.integers(1, 300), min_size=n, max_size=n)))
    R = RequestState(np.zeros(n), inp, out)
    max_batch = draw(st.integers(1, 8))
    n_run = draw(st.integers(0, min(n, max_batch)))
    used = 0
    for q in range(n_run):  # running: some decoding, some part-way through their prompt
        if draw(st.booleans()):
            R.prefilled[q] = R.kv_len[q] = int(inp[q])
            R.gen[q] = 1
            R.out[q] = max(R.out[q], 2)
        else:
            R.prefilled[q] = R.kv_len[q] = draw(st.integers(0, int(inp[q]) - 1))
        R.blocks[q] = blocks_for(int(inp[q]), 16)
        used += R.blocks[q]
    free = draw(st.integers(0, 400))
    return View(R, range(n_run, n), range(n_run), free, max_batch, draw(st.sampled_from([float("inf"), 64.0, 512.0])),
                draw(st.sampled_from([32, 256, 512])), draw(st.integers(1, 8)))


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
@settings(max_examples=150, deadline=None)
@given(view=views())
def test_plans_keep_the_invariants(name, view):
    plan = get_scheduler(name)().plan_batch(view)
    if plan is None:
        return
    R = view.req
    # admissions come from the head of the queue, in order
    assert plan.admit == list(view.waiting)[: len(plan.admit)]
    # a request appears once
    ids = [q for q, _ in plan.prefill] + plan.decode
    assert len(ids) == len(set(ids))
    assert not set(ids) & set(plan.preempt)
    # chunks are positive and within the remaining prompt; decodes have finished prompts
    for q, c in plan.prefill:
        assert 0 < c <= R.prompt_len[q] - R.prefilled[q]
        assert q in view.running or q in plan.admit
    for q in plan.decode:
        assert R.prefilled[q] >= R.prompt_len[q]
    assert len(ids) <= view.max_batch
    # KV: admitted prompts plus the blocks the decodes append fit after the preemptions
    freed = sum(R.blocks[q] for q in plan.preempt)
    need = sum(blocks_for(R.prompt_len[q], 16) for q in plan.admit)
    need += sum(1 for q in plan.decode if R.kv_len[q] % 16 == 0)
    assert need <= view.free_blocks + freed
    # token budget (a single prompt may exceed an unlimited-by-chunk budget in vllm)
    tokens = sum(c for _, c in plan.prefill)
    if name == "chunked-prefill":
        assert tokens + len(plan.decode) <= max(view.token_budget, len(plan.decode))
    elif len(plan.prefill) > 1:
        assert tokens <= view.token_budget


def test_prefill_first_never_mixes_prefill_and_decode():
    R = RequestState(np.zeros(3), np.array([100, 100, 100]), np.array([5, 5, 5]))
    R.prefilled[0] = R.kv_len[0] = 100
    R.gen[0] = 1
    R.blocks[0] = 7
    plan = get_scheduler("prefill-first")().plan_batch(View(R, [1, 2], [0], 100, 4, float("inf"), 512, 4))
    assert plan.prefill == [(1, 100), (2, 100)] and plan.decode == []


def test_unknown_scheduler_lists_the_options():
    options = ("chunked-prefill, decode-only, inflight-no-evict, prefill-first, prefill-only, prefill-priority, "
               "sarathi")
    with pytest.raises(SpecError, match=f"expected one of: {options}"):
        get_scheduler("fifo")


def test_least_outstanding_router_balances_and_conserves(testbed):
    wl = Workload.scenario("op3", num_requests=400)
    res = simulate(SimulationConfig(**testbed, strategy="3m", router="least_outstanding", rate=3.0, workload=wl))
    assert res.num_completed == 400
    counts = np.bincount(res.requests.prefill_instance, minlength=3)
    assert counts.min() > 0.25 * 400
    rr = simulate(SimulationConfig(**testbed, strategy="3m", rate=3.0, workload=wl))
    assert np.bincount(rr.requests.prefill_instance).tolist() == [134, 133, 133]


def test_sglang_max_prefill_tokens_is_per_attention_dp_rank():
    """Under DP attention each SGLang rank runs its own scheduler with its own
    ``max_prefill_tokens`` while ``--chunked-prefill-size`` is divided among the ranks
    (``server_args.py`` ``_handle_data_parallelism``): an instance of 4 ranks takes 4 x 2,048 new
    tokens in one prefill step where one rank takes 2,048."""
    from serveplan.sim.schedulers.prefill_priority import PrefillPriorityOptions, PrefillPriorityScheduler
    from serveplan.specs.parallel import ParallelConfig

    n = 8
    R = RequestState(np.zeros(n), np.full(n, 2048), np.full(n, 16))
    opts = PrefillPriorityOptions(max_prefill_tokens=2048)
    for dp, want in ((1, 1), (4, 4)):
        sched = PrefillPriorityScheduler(opts.for_layout(ParallelConfig(tp=1, dp=dp, ep=dp)))
        view = View(R, range(n), [], free_blocks=10_000, max_batch=64, budget=1e9, chunk=1 << 20, pmb=64)
        plan = sched.plan_batch(view)
        assert plan is not None and len(plan.prefill) == want and sum(c for _, c in plan.prefill) == 2048 * want
