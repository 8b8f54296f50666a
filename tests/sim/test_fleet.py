"""One fleet description: defaults resolved once, names and device counts in one place, the
records round-trip, and the scheduler registry's aliases and declared shortcuts."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan.errors import SpecError
from serveplan.sim import Fleet, Role, SimulationConfig, Strategy, Workload, simulate
from serveplan.sim.fleet import Batching, InstanceConfig
from serveplan.sim.schedulers import SCHEDULERS, FastPaths, PrefillFirstScheduler, canonical_scheduler
from serveplan.specs.parallel import ParallelConfig


def test_build_resolves_the_per_role_defaults():
    f = Fleet.build("1p2d", tp=4, decode_tp=2, max_batch=16, prefill_max_batch=4)
    assert f.roles == (Role.PREFILL, Role.DECODE)
    assert f.prefill.batching == Batching(scheduler="prefill-only", max_batch=4, max_prompts=4)
    assert f.decode.batching == Batching(scheduler="decode-only", max_batch=16, max_prompts=4)
    assert (f.prefill.parallel.tp, f.decode.parallel.tp) == (4, 2)
    assert f.num_devices == 4 + 2 * 2 and f.name == "1p2d-tp4/2-b16"
    c = Fleet.build("2m", tp=2, pp=2, scheduler="sarathi", chunk_size=256)
    assert c.collocated.batching.scheduler == "chunked-prefill"
    assert c.collocated.batching.token_budget == 256          # Sarathi: one chunk per step
    assert c.collocated.batching.max_prompts == 16            # no prompt limit given: the max batch
    assert c.num_devices == 8 and c.name == "2m-tp2-pp2-b16-chunked256"
    assert Fleet.build("1m", prefill_max_batch=0).first.batching.max_prompts == 16  # 0 reads as "not given"


@pytest.mark.parametrize("text", ["3m", "2p1d", "1p3d"])
def test_records_round_trip(text):
    f = Fleet.build(text, tp=2, max_batch=8, prefill_max_batch=2, token_budget=1024)
    assert Fleet.from_dict(f.to_dict()) == f


def test_roles_must_match_the_strategy():
    inst = InstanceConfig(parallel=ParallelConfig(tp=1), batching=Batching())
    with pytest.raises(SpecError, match="decode instance configuration must be given"):
        Fleet(strategy=Strategy.parse("1p1d"), prefill=inst)
    with pytest.raises(SpecError, match="disaggregation role"):
        Fleet(strategy=Strategy.parse("1m"), collocated=InstanceConfig(
            parallel=ParallelConfig(tp=1), batching=Batching(scheduler="decode-only")))
    with pytest.raises(SpecError, match="max_batch=0 must be a positive integer"):
        Fleet.build("1m", max_batch=0)


def test_config_takes_a_fleet_or_the_flat_settings_not_both(testbed):
    wl = Workload.scenario("op3", num_requests=50)
    fleet = Fleet.build("2m", tp=4)
    assert SimulationConfig(**testbed, fleet=fleet, workload=wl) == SimulationConfig(**testbed, strategy="2m", tp=4,
                                                                                       workload=wl)
    with pytest.raises(SpecError, match="not both"):
        SimulationConfig(**testbed, fleet=fleet, tp=2, workload=wl)
    with pytest.raises(TypeError, match="maxbatch"):
        SimulationConfig(**testbed, maxbatch=2, workload=wl)


def test_engine_names_are_aliases_of_mechanisms():
    assert canonical_scheduler("sarathi") == "chunked-prefill"
    with pytest.raises(SpecError, match=r"scheduler='vllm' is an engine, not a scheduler; give --engine vllm"):
        canonical_scheduler("vllm")
    assert set(SCHEDULERS) == {"prefill-first", "chunked-prefill", "prefill-only", "decode-only", "prefill-priority",
                               "inflight-no-evict"}
    with pytest.raises(SpecError, match="expected one of: chunked-prefill"):
        canonical_scheduler("fifo")


def test_a_subclass_keeps_its_parents_shortcuts(testbed, monkeypatch):
    """Shortcuts are declared, not looked up by type: a subclass keeps them (and may turn them
    off), and either way the answers are the planned path's."""
    calls = {"kept": 0, "off": 0}

    class Kept(PrefillFirstScheduler):
        def plan_batch(self, view):
            calls["kept"] += 1
            return super().plan_batch(view)

    class Off(Kept):
        fast_paths = FastPaths()

        def plan_batch(self, view):
            calls["off"] += 1
            return PrefillFirstScheduler.plan_batch(self, view)

    wl = Workload.scenario("op3", num_requests=200)
    runs = {}
    for name, cls in (("kept", Kept), ("off", Off)):
        monkeypatch.setitem(SCHEDULERS, "prefill-first", cls)
        runs[name] = simulate(SimulationConfig(**testbed, fleet=Fleet.build("1m", tp=4), rate=0.2, workload=wl))
    assert calls["kept"] < calls["off"] / 2  # lone requests and pure decode views skip planning
    assert runs["kept"].num_steps == runs["off"].num_steps
    np.testing.assert_allclose(runs["kept"].requests.finish, runs["off"].requests.finish, rtol=1e-12)
