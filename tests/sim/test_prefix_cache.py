"""Prefix cache, multi-turn sessions and KV tiers (issue 21 scopes 2-3; acceptance 2-4)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

import serveplan.specs
from serveplan.sim import SimulationConfig, simulate
from serveplan.sim.prefix_cache import KVTiers, default_load
from serveplan.sim.sessions import session_workload, with_system_prompt
from serveplan.sim.workload import Workload
from serveplan.specs.catalog import get_engine, get_hardware, get_host, get_model, get_profile
from serveplan.specs.engine import engine_from_dict

BS = 16  # vLLM's block size (engine vllm)
ENGINES = Path(serveplan.specs.__file__).parent / "data" / "engines"


def _cfg(wl: Workload, *, memory: float = 80e9, tiers: KVTiers | None = None, model: str = "llama-3.1-8b",
         rate: float | None = 0.25, offline: bool = False) -> SimulationConfig:
    # a device of `memory` bytes (no driver total: the engine sees `memory`)
    hw = dataclasses.replace(get_hardware("h100-sxm"), memory_bytes=memory, driver_memory_bytes=0.0)
    return SimulationConfig(model=get_model(model), hardware=hw, profile=get_profile("default-gpu"), engine="vllm",
                            tp=1, rate=None if offline else rate, offline=offline, workload=wl, kv_tiers=tiers)


def _reusable_share(wl: Workload) -> float:
    """Hand derivation: turn k > 0 finds the previous turn's cache, ``prompt + output - 1`` tokens
    (the last token is never written), in full blocks, at most ``(prompt_k - 1) // 16`` blocks
    (the engine recomputes the last prompt token)."""
    p = np.asarray(wl.input_lengths).reshape(-1, wl.turn.max() + 1)
    o = np.asarray(wl.output_lengths).reshape(p.shape)
    prev = (p[:, :-1] + o[:, :-1] - 1) // BS
    cap = (p[:, 1:] - 1) // BS
    return float(np.minimum(prev, cap).sum() * BS / p.sum())


def test_unbounded_capacity_hits_the_reusable_share_of_prompt_tokens():
    wl = session_workload(12, 4, think_s=1.0, seed=3)
    res = simulate(_cfg(wl, model="llama-3.2-1b", memory=141e9))
    assert res.num_completed == 48 and res.num_preemptions == 0
    assert res.prefix_cache is not None
    assert res.prefix_cache.hit_rate == pytest.approx(_reusable_share(wl), rel=1e-12)


def test_each_turn_is_sent_think_time_after_the_previous_answer():
    wl = session_workload(5, 3, think_s=7.5, seed=1)
    rec = simulate(_cfg(wl, rate=0.5)).requests
    a, f = rec.arrival.reshape(5, 3), rec.finish.reshape(5, 3)
    assert np.allclose(a[:, 1:], f[:, :-1] + 7.5)


def test_hit_rate_falls_monotonically_as_kv_capacity_shrinks():
    wl = session_workload(300, 4, think_s=60.0, seed=1)
    reports = [simulate(_cfg(wl, memory=m)).prefix_cache for m in (80e9, 50e9, 40e9)]
    rates = [r.hit_rate for r in reports if r is not None]
    assert rates[0] > rates[1] > rates[2] > 0


def test_a_cpu_tier_raises_the_hit_rate_and_lowers_mean_ttft_when_kv_does_not_fit():
    wl = session_workload(300, 4, think_s=60.0, seed=1)
    tiers = KVTiers(tiers=("cpu",), host=get_host("dgx-h100"), cpu_bytes=100e9)
    base, tiered = simulate(_cfg(wl, memory=50e9)), simulate(_cfg(wl, memory=50e9, tiers=tiers))
    assert base.prefix_cache is not None and tiered.prefix_cache is not None
    assert base.prefix_cache.spilled_cpu_blocks == 0 and tiered.prefix_cache.cpu_tokens > 0
    assert tiered.prefix_cache.hit_rate > base.prefix_cache.hit_rate + 0.2
    assert tiered.ttft_s.mean < base.ttft_s.mean


def test_load_time_of_a_cpu_hit_uses_the_host_bandwidth():
    """Llama-3.1-8B, bf16, TP 1: 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes = 131,072 bytes per
    token; a CPU hit of n tokens loads in n x 131,072 / 50e9 s (dgx-h100 ctog_cache_bandwidth)."""
    wl = session_workload(300, 4, think_s=60.0, seed=1)
    tiers = KVTiers(tiers=("cpu",), host=get_host("dgx-h100"), cpu_bytes=100e9, load="serial")
    pc = simulate(_cfg(wl, memory=50e9, tiers=tiers)).prefix_cache
    assert pc is not None and pc.cpu_tokens > 0 and pc.disk_tokens == 0
    assert pc.load_s.mean * pc.load_s.count == pytest.approx(pc.cpu_tokens * 131072 / 50e9, rel=1e-9)
    sp = pc.ttft_split_s
    assert sp["kv_load"] == pytest.approx(pc.load_s.mean * pc.load_s.count / pc.num_requests)
    assert min(sp.values()) > 0


def test_disk_hits_read_through_cpu_memory():
    """A disk block pays the disk read and the PCIe copy: 131,072 x (1/7e9 + 1/50e9) s per token."""
    wl = session_workload(300, 4, think_s=60.0, seed=1)
    tiers = KVTiers(tiers=("cpu", "disk"), host=get_host("dgx-h100"), cpu_bytes=5e9, disk_bytes=100e9, load="serial")
    pc = simulate(_cfg(wl, memory=50e9, tiers=tiers)).prefix_cache
    assert pc is not None and pc.disk_tokens > 0
    expect = pc.cpu_tokens * 131072 / 50e9 + pc.disk_tokens * 131072 * (1 / 7e9 + 1 / 50e9)
    assert pc.load_s.mean * pc.load_s.count == pytest.approx(expect, rel=1e-9)


def test_without_shared_prefixes_the_cache_stays_off():
    wl = Workload.fixed(1024, 64, num_requests=50)
    assert with_system_prompt(wl, 0) is wl and not wl.prefix_cached
    res = simulate(_cfg(wl, rate=2.0))
    assert res.prefix_cache is None and "prefix_cache" not in res.to_dict()
    assert "kv_tiers" not in res.to_dict()["config"]


def test_a_shared_system_prompt_is_reused_by_every_later_request():
    wl = with_system_prompt(Workload.fixed(512, 32, num_requests=40), 1000)
    pc = simulate(_cfg(wl, rate=1.0)).prefix_cache
    assert pc is not None
    # every request but the first finds the 62 full blocks (992 tokens) of the system prompt
    assert pc.hit_tokens == 39 * 992


def test_mooncake_trace_hash_ids_give_block_identity(tmp_path):
    rows = [{"timestamp": 0, "input_length": 1100, "output_length": 8, "hash_ids": [7, 8, 9]},
            {"timestamp": 5000, "input_length": 1600, "output_length": 8, "hash_ids": [7, 8, 10, 11]}]
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    wl = Workload.from_trace(p)
    assert wl.hash_ids is not None and list(wl.trace_times) == [0.0, 5.0]
    pc = simulate(_cfg(wl)).prefix_cache
    assert pc is not None and pc.hit_tokens == 1024  # the two shared 512-token blocks


@pytest.mark.parametrize("bad", [
    {"tiers": ("gpu",)}, {"tiers": ("disk",)}, {"tiers": ("cpu",), "cpu_bytes": 0.0}, {"tiers": ("cpu",), "load": "x"},
])
def test_bad_tiers_are_spec_errors(bad):
    from serveplan.errors import SpecError

    with pytest.raises(SpecError):
        KVTiers(host=get_host("dgx-h100"), **bad)


@pytest.mark.parametrize("engine, load", [("sglang", "layerwise"), ("sglang-0.5", "layerwise"), ("vllm", "serial"),
                                          ("vllm-0.11", "serial"), ("trtllm", "serial"), ("bestserve", "serial")])
def test_how_lower_tier_hits_load_is_read_from_the_engine_file(engine, load):
    spec = get_engine(engine)
    assert spec.prefix_cache_tier_load == load
    assert default_load(spec) == load
    assert default_load(spec.engine) == load   # a family name stands for its default version


def test_an_engine_file_names_its_tier_load_and_nothing_else():
    from serveplan.errors import SpecError

    base = yaml.safe_load((ENGINES / "vllm-0.33.yaml").read_text())
    assert engine_from_dict({**base, "prefix_cache": {"tier_load": "layerwise"}}, name="x").prefix_cache_tier_load \
        == "layerwise"
    assert engine_from_dict({k: v for k, v in base.items() if k != "prefix_cache"}, name="x") \
        .prefix_cache_tier_load == "serial"
    for bad in ({"tier_load": "bulk"}, {"load": "serial"}, "layerwise"):
        with pytest.raises(SpecError, match="prefix_cache"):
            engine_from_dict({**base, "prefix_cache": bad}, name="x")
    assert default_load(None) == "serial" and default_load("no-such-engine") == "serial"


@pytest.mark.parametrize("kw", [{"turns": 0}, {"num_sessions": 0}, {"think_s": -1.0}])
def test_bad_session_values_are_spec_errors(kw):
    from serveplan.errors import SpecError

    args = {"num_sessions": 2, "turns": 2, "think_s": 0.0} | kw
    with pytest.raises(SpecError):
        session_workload(args.pop("num_sessions"), args.pop("turns"), **args)


def test_a_session_stays_on_the_instance_of_its_first_turn():
    wl = session_workload(9, 3, think_s=2.0, seed=4)
    cfg = SimulationConfig(model=get_model("llama-3.1-8b"), hardware=get_hardware("h100-sxm"),
                           profile=get_profile("default-gpu"), engine="vllm", tp=1, strategy="3m", rate=1.0,
                           workload=wl)
    res = simulate(cfg)
    inst = res.requests.prefill_instance.reshape(9, 3)
    assert (inst == inst[:, :1]).all() and len(set(inst[:, 0].tolist())) == 3
    assert res.prefix_cache is not None and res.prefix_cache.hit_rate == pytest.approx(_reusable_share(wl))


# Results of main at 6c2f17b (before the prefix cache existed), same configurations: a workload
# without shared prefixes must give them to the last digit.
_BEFORE = [
    ("2m", "op2", 3.0, 0.4218642720074575, 0.100174135241167, 677.9938636267425, 16214),
    ("1p1d", "op3", 3.0, 0.17058547298365312, 0.052441892249994876, 677.553710208694, 15305),
]


@pytest.mark.parametrize("strategy, scenario, rate, ttft, tpot, makespan, steps", _BEFORE)
def test_without_shared_prefixes_results_are_identical_to_before_the_cache(strategy, scenario, rate, ttft, tpot,
                                                                            makespan, steps):
    cfg = SimulationConfig(model=get_model("codellama-34b"), hardware=get_hardware("ascend-910b3"),
                           profile=get_profile("bestserve-910b3"), tp=4, max_batch=16, prefill_max_batch=4,
                           scheduler="prefill-first", strategy=strategy, rate=rate,
                           workload=Workload.scenario(scenario, num_requests=2000))
    r = simulate(cfg)
    assert (r.ttft_s.mean, r.tpot_s.mean, r.makespan_s, r.num_steps) == (ttft, tpot, makespan, steps)
    assert r.prefix_cache is None
