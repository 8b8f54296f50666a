"""The decode cohort's running sums against the members' true values, summed one by one."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.sim.cohort import DecodeCohort
from serveplan.sim.kv import KVCache
from serveplan.sim.request import RequestState


def _true(coh: DecodeCohort, q: int) -> tuple[int, int]:
    """Member ``q``'s KV length and generated tokens with its lag."""
    d = coh.T - coh.t0[q]
    return coh.req.kv_len[q] + d, coh.req.gen[q] + d


def _check(coh: DecodeCohort, bs: int) -> None:
    R = coh.req
    members = list(coh.t0)
    lens = {q: _true(coh, q) for q in members}
    assert coh.context_sum == sum(k for k, _ in lens.values())
    if members:
        assert coh.tokens_left() == min(R.out[q] - g for q, (_, g) in lens.items())
    for clip in (1, 7, 50, 1 << 62):
        assert coh.left_sum(clip) == sum(min(R.out[q] - g, clip) for q, (_, g) in lens.items())
    assert coh.future_blocks() == sum(max(-(-(R.inp[q] + R.out[q] - 1) // bs) - -(-k // bs), 0)
                                      for q, (k, _) in lens.items())
    for k in (1, 3, bs, 2 * bs + 5):
        assert coh.grow(k) == sum(-(-(n + k) // bs) - -(-n // bs) for n, _ in lens.values())


@pytest.mark.parametrize("seed", range(6))
def test_cohort_sums_follow_joins_steps_and_leaves(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, bs = 60, int(rng.choice([1, 4, 16]))
    inp = rng.integers(1, 200, n)
    out = rng.integers(2, 120, n)
    R = RequestState(np.zeros(n), inp, out)
    kv = KVCache(1 << 20, bs, R.blocks)
    coh = DecodeCohort(R, kv)
    fresh = list(range(n))
    for _ in range(200):
        op = rng.random()
        if fresh and (op < 0.3 or not len(coh)):
            q = fresh.pop()   # its prompt done, some tokens generated: kv_len = inp + gen - 1
            R.gen[q] = int(rng.integers(1, R.out[q]))
            R.kv_len[q] = R.inp[q] + R.gen[q] - 1
            kv.allocate(q, R.kv_len[q])
            coh.join(q)
        elif op < 0.4:
            coh.flush()
        elif len(coh):
            order = list(coh.t0)
            done = coh.advance(int(rng.integers(1, coh.tokens_left() + 1)), order)
            assert done == [q for q in order if q in set(done)]
            for q in done:
                assert R.gen[q] == R.out[q] and R.kv_len[q] == R.inp[q] + R.out[q] - 1
                kv.free_request(q, R.kv_len[q])
        if not fresh and not len(coh):
            break
        _check(coh, bs)
    coh.disband()
    assert kv.pending == 0


def test_future_blocks_refuses_an_irregular_member() -> None:
    """A member whose stored state breaks ``kv_len = inp + gen - 1`` has no sum (the instance then
    sums member by member)."""
    R = RequestState(np.zeros(2), np.array([10, 10]), np.array([5, 5]))
    kv = KVCache(1 << 12, 4, R.blocks)
    coh = DecodeCohort(R, kv)
    R.gen[0], R.kv_len[0] = 1, 10
    kv.allocate(0, 10)
    coh.join(0)
    assert coh.future_blocks() == -(-14 // 4) - -(-10 // 4)
    R.gen[1], R.kv_len[1] = 1, 12   # two tokens more than its prompt and output account for
    kv.allocate(1, 12)
    coh.join(1)
    assert coh.future_blocks() is None
    assert coh.advance(coh.tokens_left(), [0, 1]) == [0, 1]
    assert len(coh) == 0 and coh.future_blocks() == 0 and kv.pending == 0


def _tight_kv_config(engine: str, strategy: str, n: int, seed: int):
    """Llama-3.1-70B on two H100s at 8 req/s: a KV cache of a few dozen requests, so the reserve
    (SGLang) and the reservation (TensorRT-LLM) decide admissions and vLLM preempts."""
    from serveplan import get_hardware, get_model, get_profile
    from serveplan.sim import SimulationConfig, Workload
    from serveplan.sim.workload import LengthDist

    wl = Workload.from_distributions(LengthDist(kind="uniform", low=100, high=3000),
                                     LengthDist(kind="uniform", low=2, high=600), n, seed=seed)
    return SimulationConfig(model=get_model("llama-3.1-70b"), hardware=get_hardware("h100-sxm"),
                            profile=get_profile(None, "h100-sxm"), engine=engine, strategy=strategy, tp=2, rate=8.0,
                            workload=wl)


@pytest.mark.parametrize("engine, strategy", [("sglang", "1m"), ("trtllm", "1m"), ("vllm", "1m"), ("trtllm", "1p1d")])
def test_plans_from_the_running_sums_match_the_per_request_plans(monkeypatch, engine, strategy):
    """A policy planning from the instance's running sums (``decode_all_need`` and the sums that
    come with it, ``reads_decode_all``) decides as it does reading every running request (the
    cohort then written before each plan): the same times, exactly."""
    from serveplan.sim import simulate
    from serveplan.sim.instance import Instance

    cfg = _tight_kv_config(engine, strategy, 500, seed=5)
    agg = simulate(cfg)
    # the view without the aggregate: every policy reads the running requests (written first)
    monkeypatch.setattr(Instance, "decode_all_need", property(lambda self: None))
    per_request = simulate(cfg)
    for f in ("first_token", "finish"):
        np.testing.assert_array_equal(getattr(agg.requests, f), getattr(per_request.requests, f))
    assert agg.num_steps == per_request.num_steps


@pytest.mark.parametrize("engine, strategy", [("sglang", "1m"), ("trtllm", "1m"), ("vllm", "1m"), ("vllm", "1p1d"),
                                              ("trtllm", "1p1d")])
def test_cohort_members_are_running_requests(monkeypatch, engine, strategy):
    """``Instance._step_key`` takes a step whose decodes are as many as the cohort's members and the
    running requests to be the cohort without a membership test: it relies on every member being
    a running request (and a step's decodes being distinct running requests), checked here at every
    step under preemption (a KV cache of a few dozen requests) and transferred caches."""
    from serveplan.sim import simulate
    from serveplan.sim.instance import Instance

    seen = {"steps": 0}
    step_key = Instance._step_key

    def checked(self, chunks, dec):
        running = set(self.running)
        assert set(self.cohort.t0) <= running
        assert len(set(dec)) == len(dec) and set(dec) <= running
        seen["steps"] += 1
        return step_key(self, chunks, dec)

    monkeypatch.setattr(Instance, "_step_key", checked)
    res = simulate(_tight_kv_config(engine, strategy, 300, seed=7))
    assert seen["steps"] > 50 and (res.num_preemptions > 0 or engine != "vllm" or strategy != "1m")
