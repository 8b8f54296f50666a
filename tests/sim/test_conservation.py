"""Conservation and sanity of the iteration simulator."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serveplan import Estimator, ParallelConfig, StepBatch
from serveplan.estimator.static import static_batch
from serveplan.sim import LengthDist, SimulationConfig, Workload, simulate


def _invariants(res, est_by_role):
    q = res.requests
    n = res.num_requests
    # every request finishes exactly once: one finite finish each, counted once
    assert res.num_completed == n
    assert np.isfinite(q.finish).all() and len(q.finish) == n
    # first token before (or, for one-token outputs, at) the finish
    assert (q.first_token <= q.finish).all()
    assert (q.first_token[q.output_len > 1] < q.finish[q.output_len > 1]).all()
    # TTFT at least the estimator's prefill time of the request alone
    est = est_by_role
    lone = np.array([est.time(StepBatch.prefill(1, int(s))) for s in q.input_len])
    assert (q.ttft >= lone * (1 - 1e-12)).all()
    assert (q.queue >= 0).all() and (q.tpot >= 0).all()
    assert (q.e2e >= q.ttft).all()


SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(strategy=st.sampled_from(["1m", "2m", "1p1d", "2p1d"]), scheduler=st.sampled_from(["prefill-first", "sarathi"]),
       rate=st.floats(0.2, 20.0), max_batch=st.integers(1, 24), seed=st.integers(0, 10_000),
       chunk=st.sampled_from([64, 256, 512]))
def test_every_request_finishes_once_and_first_token_precedes_finish(testbed, strategy, scheduler, rate, max_batch,
                                                                     seed, chunk):
    wl = Workload.from_distributions(LengthDist(kind="uniform", low=16, high=3000),
                                     LengthDist(kind="uniform", low=1, high=200), 60, seed=seed)
    cfg = SimulationConfig(**testbed, strategy=strategy, tp=4, scheduler=scheduler, rate=rate, max_batch=max_batch,
                           chunk_size=chunk, workload=wl, seed=seed, max_time_s=1e9)
    res = simulate(cfg)
    _invariants(res, Estimator(testbed["model"], testbed["hardware"], testbed["profile"], ParallelConfig(tp=4)))


def test_kv_pressure_preempts_without_overcommitting_and_everything_finishes(sarathi_bed):
    # LLaMA-13B on a 48 GB A6000 keeps ~20.7k KV tokens: 32 requests of up to 3.8k tokens cannot all fit
    wl = Workload.from_distributions(LengthDist(kind="uniform", low=500, high=3000),
                                     LengthDist(kind="uniform", low=2, high=800), 200, seed=1)
    for sched in ("prefill-first", "sarathi"):
        res = simulate(SimulationConfig(**sarathi_bed, strategy="1m", tp=1, scheduler=sched, rate=2.0,
                                        max_batch=32, workload=wl))
        assert res.num_preemptions > 0 and res.kv_limited
        assert res.num_completed == 200
        assert (res.requests.preemptions > 0).sum() > 0


@pytest.mark.parametrize("strategy", ["2m", "1p1d"])
@pytest.mark.parametrize("scenario", ["op2", "op4"])
def test_lone_requests_see_exactly_the_estimator_prefill_and_decode_step_times(testbed, strategy, scenario):
    """Rate -> 0: each request is alone. TTFT is then one prefill step of the prompt
    (``Estimator.time(prefill(1, s))``, bit-identical: the same memoised call) and TPOT the mean of
    its ``n - 1`` decode steps at batch 1 with contexts ``s+1 .. s+n-1``, which is the static
    batch-1 inter-token latency ``static_batch(est, 1, s, n).itl_s``. With TPOT defined as
    ``(finish - first token) / (n - 1)`` this is an identity. The first request arrives at t = 0
    and matches bit for bit; later ones differ only by the rounding of absolute times (1e-9)."""
    base = Workload.scenario(scenario, num_requests=4)
    wl = Workload(input_lengths=base.input_lengths, output_lengths=base.output_lengths, arrival="trace",
                  trace_times=[0.0, 1000.0, 2000.0, 3000.0])  # gaps far above one request's latency
    cfg = SimulationConfig(**testbed, strategy=strategy, tp=4, workload=wl)
    res = simulate(cfg)
    est = Estimator(testbed["model"], testbed["hardware"], testbed["profile"], ParallelConfig(tp=4))
    s, n = int(wl.input_lengths[0]), int(wl.output_lengths[0])
    ref = static_batch(est, 1, s, n)
    ttft0 = est.time(StepBatch.prefill(1, s))
    assert res.requests.ttft[0] == ttft0
    np.testing.assert_allclose(res.requests.ttft, ttft0, rtol=1e-9)
    if strategy == "2m":
        tpot0 = ref.itl_s
    else:  # plus the KV transfer, spread over the n - 1 gaps
        from serveplan.sim.cluster import kv_transfer_time

        tpot0 = ref.itl_s + kv_transfer_time(est, est, s) / (n - 1)
    assert res.requests.tpot[0] == pytest.approx(tpot0, rel=1e-12)
    np.testing.assert_allclose(res.requests.tpot, tpot0, rtol=1e-9)
    assert res.queue_s.max == 0.0


@pytest.mark.parametrize("strategy, rate, scenario", [("2m", 3.5, "op3"), ("1p1d", 2.5, "op2"), ("2m", 0.15, "op4")])
def test_littles_law_holds_on_the_simulated_system_and_queue(testbed, strategy, rate, scenario):
    """L = lambda W: the time-average number of requests in the system (and in the queue) over
    the arrival window, against the measured arrival rate times the mean time in system (queue)."""
    res = simulate(SimulationConfig(**testbed, strategy=strategy, rate=rate,
                                    workload=Workload.scenario(scenario, num_requests=10000), seed=2))
    q = res.requests
    T = float(q.arrival.max())
    lam = len(q.arrival) / T
    assert lam == pytest.approx(rate, rel=0.03)  # 10k Poisson arrivals: 3 standard deviations

    def occupancy(start, end):
        return float(np.sum(np.clip(end, 0, T) - np.clip(start, 0, T))) / T

    assert occupancy(q.arrival, q.finish) == pytest.approx(lam * q.e2e.mean(), rel=0.02)
    assert occupancy(q.arrival, q.arrival + q.queue) == pytest.approx(lam * q.queue.mean(), rel=0.02)
    assert q.queue.mean() > 0  # the queue was not trivially empty


@pytest.mark.parametrize("fidelity", ["iteration", "bestserve"])
def test_same_seed_gives_identical_results_and_another_seed_does_not(make_cfg, fidelity):
    a = simulate(make_cfg(fidelity=fidelity, seed=5))
    b = simulate(make_cfg(fidelity=fidelity, seed=5))
    c = simulate(make_cfg(fidelity=fidelity, seed=6))
    for k in a.requests.FIELDS:
        np.testing.assert_array_equal(a.requests[k], b.requests[k])
    assert a.to_dict() == b.to_dict()
    assert not np.array_equal(a.requests.finish, c.requests.finish)


def test_stretch_and_step_by_step_decoding_agree(testbed, monkeypatch):
    """The vectorised decode stretches are an optimisation: stepping one decode at a time
    gives the same times (to float summation order) and the same number of steps."""
    from serveplan.sim.instance import Instance

    wl = Workload.from_distributions(LengthDist(kind="uniform", low=100, high=3000),
                                     LengthDist(kind="uniform", low=2, high=300), 200, seed=1)
    for strategy in ("2m", "1p1d"):
        for sched in ("prefill-first", "sarathi"):
            cfg = SimulationConfig(**testbed, strategy=strategy, scheduler=sched, rate=4.0, max_batch=8, workload=wl)
            fast = simulate(cfg)
            monkeypatch.setattr(Instance, "fast_decode", False)
            slow = simulate(cfg)
            monkeypatch.setattr(Instance, "fast_decode", True)
            np.testing.assert_allclose(fast.requests.finish, slow.requests.finish, rtol=1e-12)
            np.testing.assert_allclose(fast.requests.first_token, slow.requests.first_token, rtol=1e-12)
            assert fast.num_steps == slow.num_steps
