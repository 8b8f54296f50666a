"""Overload is an answer, not a hang; early stop for certainly infeasible rates. (How fast an
overloaded run ends is measured in benchmarks/bench_overload.py.)"""

from __future__ import annotations

import pytest

from serveplan.sim import SLO, SimulationConfig, Workload, simulate


def _capacity(testbed, strategy, scenario):
    """Saturated throughput: the completion rate when requests arrive 100x faster than served."""
    res = simulate(SimulationConfig(**testbed, strategy=strategy, rate=1000.0, max_time_s=1e9,
                                    workload=Workload.scenario(scenario, num_requests=2000)))
    return res.throughput_rps


@pytest.mark.slow
@pytest.mark.parametrize("strategy, scenario", [("2m", "op2"), ("1p1d", "op3"), ("2m", "op4")])
def test_ten_times_capacity_reports_overload(testbed, strategy, scenario):
    cap = _capacity(testbed, strategy, scenario)
    wl = Workload.scenario(scenario, num_requests=10000)
    res = simulate(SimulationConfig(**testbed, strategy=strategy, rate=10 * cap, workload=wl))
    assert res.overloaded
    assert res.throughput_rps < 0.2 * 10 * cap
    calm = simulate(SimulationConfig(**testbed, strategy=strategy, rate=0.5 * cap, workload=wl))
    assert not calm.overloaded and calm.num_completed == 10000


def test_early_stop_ends_a_hopeless_run_and_leaves_feasible_ones_alone(testbed):
    wl = Workload.scenario("op2", num_requests=5000)
    slo = SLO(ttft_s=1.5, tpot_s=0.07, percentile=90)
    bad = simulate(SimulationConfig(**testbed, strategy="2m", rate=20.0, workload=wl, slo=slo, early_stop=True))
    assert bad.stopped_early and bad.num_completed < 5000
    full = simulate(SimulationConfig(**testbed, strategy="2m", rate=20.0, workload=wl, slo=slo))
    assert full.ttft_s.p90 > slo.ttft_s  # the early verdict was right
    ok = simulate(SimulationConfig(**testbed, strategy="2m", rate=0.5, workload=wl, slo=slo, early_stop=True))
    assert not ok.stopped_early and ok.num_completed == 5000
    assert ok.ttft_s.p90 <= slo.ttft_s and ok.tpot_s.p90 <= slo.tpot_s


def test_early_stop_checks_after_the_last_arrival_grow_geometrically(testbed, monkeypatch):
    # 200 requests in a burst (1e6 req/s) drain for ~1e5 times as long as they took to arrive. With a
    # check every t_last/50 the drain would take millions of checkpoints; doubling the interval past
    # t_last takes 50 + log2(drain / step) of them. SLOs no run misses, so no check stops the run.
    from serveplan.sim import cluster

    seen = []
    handle = cluster.Checkpoint.handle

    def counted(self, loop):
        seen.append(self.t)
        return handle(self, loop)

    monkeypatch.setattr(cluster.Checkpoint, "handle", counted)
    slo = SLO(ttft_s=1e6, tpot_s=1e6, percentile=90)
    res = simulate(SimulationConfig(**testbed, strategy="2m", rate=1e6, slo=slo, early_stop=True,
                                    workload=Workload.scenario("op2", num_requests=200)))
    assert not res.stopped_early and res.num_completed == 200
    assert 0 < len(seen) < 50 + 64, len(seen)
    gaps = [b - a for a, b in zip(seen[50:], seen[51:], strict=False)]
    assert all(g2 >= g1 for g1, g2 in zip(gaps, gaps[1:], strict=False))  # never shrinking past t_last


def _vllm(strategy: str, rate: float, n: int = 10000):
    from serveplan import get_hardware, get_model, get_profile
    from serveplan.sim import simulation_config

    return simulate(simulation_config(engine="vllm", strategy=strategy, model=get_model("codellama-34b"),
                                      hardware=get_hardware("ascend-910b3"), profile=get_profile("bestserve-910b3"),
                                      rate=rate, workload=Workload.scenario("op2", num_requests=n)))


def test_overload_is_the_queue_growing_not_a_batch_size_proxy():
    # `serveplan simulate -s 6m --rate 10.5` (vLLM's max batch 256, its fused operator list):
    # completions fall behind arrivals (10.1 req/s at 10.5 req/s, P90 TTFT 30 s) though the backlog
    # never reaches the old threshold of 2 x 256 x 6 slots. (At 10 req/s six instances keep up since
    # the engines' fused operators replaced BestServe's eager list: 9.93 req/s, P90 TTFT 8.5 s.)
    grows = _vllm("6m", 10.5)
    assert grows.throughput_rps < 10.3 and grows.ttft_s.p90 > 20
    assert grows.overloaded
    # one instance more: the backlog wanders with no trend; P90 TTFT 1.5 s
    stable = _vllm("7m", 10.5)
    assert not stable.overloaded and stable.num_completed == 10000


def test_queue_growth_separates_a_trend_from_noise():
    import numpy as np

    from serveplan.sim.metrics import QueueGrowth

    rng = np.random.default_rng(0)
    a = np.cumsum(rng.exponential(0.1, 5000))
    calm = a + rng.exponential(0.05, 5000)              # served as it comes
    assert not QueueGrowth.of(a, calm).growing
    slow = np.cumsum(np.full(5000, 0.1 / 0.9)) + 1.0   # served at 90% of the arrival rate
    g = QueueGrowth.of(a, slow)
    assert g.growing and 0.05 * 2500 < g.growth < 0.2 * 2500
    assert not QueueGrowth.of(np.zeros(100), np.full(100, 5.0)).growing   # offline: no arrival span
