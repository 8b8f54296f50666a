"""Bounded memory: a windowed run is the same simulation as the whole-stream one, its window
holds the requests in flight, and the step-time tables are bounded caches. (Peak memory of 10^7
requests is measured in benchmarks/bench_memory.py.)"""

from __future__ import annotations

import numpy as np
import pytest

import serveplan.sim.clock as clock_mod
import serveplan.sim.stream as stream
from serveplan.errors import SpecError
from serveplan.sim import SimulationConfig, Workload, simulate, simulation_config
from serveplan.sim.clock import Clocks
from serveplan.specs.parallel import ParallelConfig


def _windowed(monkeypatch, cfg, chunk=100):
    whole = simulate(cfg)
    monkeypatch.setattr(stream, "WINDOW_MIN_REQUESTS", 0)
    monkeypatch.setattr(stream, "CHUNK", chunk)
    sizes = []
    compact = stream._compact

    def spy(req, rids, stage, store):
        compact(req, rids, stage, store)
        sizes.append(req.n)

    monkeypatch.setattr(stream, "_compact", spy)
    part = simulate(cfg)
    monkeypatch.undo()
    return whole, part, sizes


@pytest.mark.parametrize("engine, strategy, scenario, rate, extra", [
    ("vllm", "2m", "op2", 8.0, {}),                                          # overloaded, chunked prefill
    ("vllm", "3m", "op4", 4.0, {"router": "least_outstanding", "prefix_hit": 0.3}),   # preemptions, load router
    ("sglang", "1m", "op1", 2.0, {}),
])
def test_a_windowed_run_is_the_same_simulation(monkeypatch, testbed, engine, strategy, scenario, rate, extra):
    cfg = simulation_config(engine=engine, strategy=strategy, **testbed, rate=rate,
                            workload=Workload.scenario(scenario, num_requests=2000), **extra)
    whole, part, sizes = _windowed(monkeypatch, cfg)
    assert sizes, "the run was not windowed"
    a, b = whole.requests, part.requests
    for k in a.FIELDS:
        # every record: bit for bit where no decode stretch is cut at a chunk boundary, else in the
        # last bits only (a cut stretch's times are summed in two parts; the SGLang run cuts one)
        assert np.allclose(a[k], b[k], rtol=1e-12, atol=1e-12, equal_nan=True), k
    assert (whole.num_steps, whole.num_preemptions, whole.overloaded, whole.prefill_tokens_saved) == \
           (part.num_steps, part.num_preemptions, part.overloaded, part.prefill_tokens_saved)


def test_a_cut_stretch_moves_only_the_last_bits_and_the_window_follows_the_load(monkeypatch, testbed):
    cfg = SimulationConfig(**testbed, strategy="2m", tp=4, max_batch=16, prefill_max_batch=4, rate=3.0,
                           workload=Workload.scenario("op2", num_requests=3000))
    whole, part, sizes = _windowed(monkeypatch, cfg)
    a, b = whole.requests, part.requests
    for k in ("first_token", "finish", "ttft", "tpot", "e2e"):
        assert np.allclose(a[k], b[k], rtol=1e-12, atol=1e-12), k
    assert whole.num_steps == part.num_steps and whole.ttft_s.p90 == pytest.approx(part.ttft_s.p90, rel=1e-12)
    # the window after each compaction holds the requests in flight (a few dozen at 3 req/s), not
    # the 3,000 of the stream
    assert max(sizes) < 100


def test_decode_tables_are_a_bounded_cache(monkeypatch, testbed):
    monkeypatch.setattr(clock_mod, "_TABLE_BYTES", 4 << 20)   # 4 MiB
    clock = clock_mod.StepClock(Clocks().clock(**testbed, parallel=ParallelConfig(tp=4), dtype=None).est)
    fresh = clock_mod.StepClock(clock.est)
    monkeypatch.setattr(clock_mod, "_TABLE_BYTES", 1 << 40)
    want = {nd: fresh.decode_times(nd, 5000 * nd, 64).copy() for nd in range(1, 40)}
    monkeypatch.setattr(clock_mod, "_TABLE_BYTES", 4 << 20)
    for nd in range(1, 40):   # 39 batch sizes of ~40,000-value tables: 31 MB unbounded
        got = clock.decode_times(nd, 5000 * nd, 64)
        assert clock._table_bytes <= 4 << 20
        held = sum(a.nbytes for a, _ in clock._dense.values()) + sum(b.nbytes for b in clock._blocks.values())
        assert held <= 4 << 20
        assert np.array_equal(got, want[nd])   # dropped tables are refilled with the same values


def test_more_requests_than_a_simulation_holds_are_refused(testbed):
    # one limit (sim.workload.MAX_REQUESTS, which stream uses too), refused where the workload is built
    assert stream.MAX_REQUESTS == 1 << 24
    with pytest.raises(SpecError, match=r"num_requests=16,777,217 must be a positive integer \(1\.\.16,777,216\)"):
        simulate(SimulationConfig(**testbed, strategy="2m", tp=4, rate=1.0,
                                  workload=Workload.fixed(128, 8, num_requests=stream.MAX_REQUESTS + 1)))


def test_a_large_batch_met_often_is_read_from_table_blocks(monkeypatch, testbed):
    """Stretches of at least ``_DIRECT_ND`` sequences are timed directly until their batch size was
    met ``_TABLE_AFTER`` times, then read from table blocks filled where their sums fall (none
    from 0: a dense table would span every context sum below them)."""
    monkeypatch.setattr(clock_mod, "_TABLE_AFTER", 3)
    est = Clocks().clock(**testbed, parallel=ParallelConfig(tp=4), dtype=None).est
    clock, direct = clock_mod.StepClock(est), clock_mod.StepClock(est)
    monkeypatch.setattr(direct, "_direct", {150: -10**9})   # this one never switches
    nd = 150
    for i in range(6):
        kvd0 = nd * (3000 + 37 * i)
        got = clock.decode_times(nd, kvd0, 9)
        assert (len(clock._blocks) > 0) is (i >= 3)
        np.testing.assert_allclose(got, direct.decode_times(nd, kvd0, 9), rtol=1e-12, atol=0)
    assert not clock._dense and clock._direct[nd] == 3
    blocks = {b for (n, b) in clock._blocks if n == nd}
    assert min(blocks) >= (nd * 3000) >> 10   # only the blocks the stretches read
