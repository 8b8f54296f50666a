"""The simulator's shortcuts give the planned path's answers: requests alone on an instance,
decode stretches planned without the scheduler, early-stop checks over the requests in flight."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.sim import SLO, SimulationConfig, Workload, cluster, simulate
from serveplan.sim.workload import LengthDist


@pytest.mark.parametrize("strategy", ["2m", "1p1d", "1p2d"])
def test_isolated_requests_match_step_by_step(testbed, monkeypatch, strategy):
    """At 0.05 req/s most requests are alone: the lone-request path (admission, prefill and
    decode stretch without planning) agrees with stepping every decode through the scheduler."""
    from serveplan.sim.instance import Instance

    wl = Workload.from_distributions(LengthDist(kind="uniform", low=100, high=3000),
                                     LengthDist(kind="uniform", low=1, high=300), 150, seed=3)
    cfg = SimulationConfig(**testbed, strategy=strategy, rate=0.05, workload=wl)
    fast = simulate(cfg)
    monkeypatch.setattr(Instance, "fast_decode", False)
    slow = simulate(cfg)
    # stretches sum step times in another order than single steps: equal to float rounding
    for f in ("first_token", "finish"):
        np.testing.assert_allclose(getattr(fast.requests, f), getattr(slow.requests, f), rtol=1e-12)
    for f in ("queue", "decode_queue"):
        np.testing.assert_allclose(getattr(fast.requests, f), getattr(slow.requests, f), rtol=0, atol=1e-9)
    assert fast.num_steps == slow.num_steps
    assert fast.kv_limited == slow.kv_limited


def _whole_stream_missed(stop: cluster.EarlyStop, t: float) -> bool:
    """The definition over every request at once (numpy), for comparison."""
    R, slo = stop.req, stop.slo
    arrival = np.asarray(R.arrival)
    out = np.asarray(R.out, dtype=float)
    first = np.asarray(R.first_token)
    ttft = np.where(np.isfinite(first), first, np.where(arrival <= t, t, np.nan)) - arrival
    with np.errstate(invalid="ignore"):
        if int(np.count_nonzero(ttft > slo.ttft_s)) >= stop.limit:
            return True
        if not stop.check_tpot:
            return False
        fin = np.asarray(R.finish)
        last = np.where(np.isfinite(fin), fin, t)
        tpot = np.where(out > 1, (last - first) / np.maximum(out - 1, 1), 0.0)
        return int(np.count_nonzero(tpot > slo.tpot_s)) >= stop.limit


@pytest.mark.parametrize("strategy, scenario, rate, router", [
    ("2m", "op2", 4.0, "round_robin"), ("2m", "op3", 7.0, "least_outstanding"), ("1p1d", "op4", 0.2, "round_robin"),
    ("1p2d", "op3", 6.0, "round_robin"), ("1p1d", "op2", 3.0, "least_outstanding"), ("2m", "op1", 0.1, "round_robin"),
])
def test_early_stop_checks_match_the_whole_stream_count(testbed, monkeypatch, strategy, scenario, rate, router):
    fast = cluster.EarlyStop.missed
    seen = []

    def both(self, t):
        got = fast(self, t)
        assert got == _whole_stream_missed(self, t)
        seen.append(got)
        return got

    monkeypatch.setattr(cluster.EarlyStop, "missed", both)
    slo = SLO(ttft_s=1.65, tpot_s=0.077, percentile=90)
    simulate(SimulationConfig(**testbed, strategy=strategy, rate=rate, router=router, slo=slo, early_stop=True,
                              workload=Workload.scenario(scenario, num_requests=1500)))
    assert seen


@pytest.mark.parametrize("engine, changes, dp, load", [
    ("sglang", {"scheduler_options": {"scheduler_recv_interval": 10}}, 1, {}),
    ("trtllm", {"scheduler_options": {"attention_dp_config": {"enable_balance": True, "timeout_iters": 12,
                                                              "batching_wait_iters": 0}}}, 2, {}),
    ("trtllm", {"scheduler_options": {"attention_dp_config": {"enable_balance": True, "timeout_iters": 12,
                                                              "batching_wait_iters": 3}}}, 2, {}),
    ("vllm", {"overlap_scheduling": True}, 1, {"input_high": 3000}),
    ("vllm", {"overlap_scheduling": True}, 1, {"input_high": 3000, "rate": 6.0}),
    ("sglang", {"overlap_scheduling": True}, 1, {"input_high": 3000}),
])
def test_held_prompts_match_step_by_step(monkeypatch, engine, changes, dp, load):
    """SGLang's receive interval, TensorRT-LLM's attention-DP balance and overlap scheduling (an
    arrival at a busy engine joins the step after next) end decode and chunk stretches where the
    held prompts would go: the stretches agree with stepping every decode through the scheduler,
    in a closed loop (or an open stream) of varied lengths."""
    import dataclasses

    from serveplan import get_hardware, get_model, get_profile
    from serveplan.sim.instance import Instance
    from serveplan.specs.catalog import get_engine

    spec = dataclasses.replace(get_engine(engine), **changes)
    wl = Workload.from_distributions(LengthDist(kind="uniform", low=200, high=load.get("input_high", 1200)),
                                     LengthDist(kind="uniform", low=20, high=200), 96, seed=5)
    arrivals = {"rate": load["rate"]} if "rate" in load else {"concurrency": 12, "rate": None}
    cfg = SimulationConfig(model=get_model("llama-3.1-8b"), hardware=get_hardware("h100-sxm"),
                           profile=get_profile(None, "h100-sxm"), engine=spec, dtype="fp8", tp=1, dp=dp,
                           strategy="1m", workload=wl, **arrivals)
    fast = simulate(cfg)
    monkeypatch.setattr(Instance, "fast_decode", False)
    slow = simulate(cfg)
    for f in ("first_token", "finish"):
        np.testing.assert_allclose(getattr(fast.requests, f), getattr(slow.requests, f), rtol=1e-12)
    assert fast.num_steps == slow.num_steps and fast.num_completed == 96


@pytest.mark.parametrize("hardware", ["h100-sxm", "l4"])
def test_chunked_prefill_all_decode_shortcut_is_the_plan(monkeypatch, hardware):
    """vLLM's chunked-prefill policy declares ``all_decode``: with nothing waiting and every running
    request ready, its plan is every running decode (decodes first; no prompt to chunk), so the
    instance's shortcut gives the very same run, on an H100 and under heavy KV pressure (an L4:
    preemptions, where the shortcut stops at the last step that fits and the policy preempts)."""
    from serveplan.commands.simulate import SimulateOptions, prepare
    from serveplan.sim.schedulers import ChunkedPrefillScheduler
    from serveplan.sim.schedulers.base import FastPaths

    cfg = prepare(SimulateOptions(model="llama-3.1-8b", hardware=hardware, engine="vllm", rate=8.0, input_len=2000,
                                  output_len=1000, num_requests=300)).config
    fast = simulate(cfg)
    monkeypatch.setattr(ChunkedPrefillScheduler, "fast_paths", FastPaths(repeat_chunk=True))
    slow = simulate(cfg)
    for f in ("ttft", "tpot", "first_token", "finish"):
        assert np.array_equal(getattr(fast.requests, f), getattr(slow.requests, f)), f
    assert fast.num_steps == slow.num_steps and fast.num_preemptions == slow.num_preemptions
    assert fast.num_preemptions > 0 or hardware != "l4"
