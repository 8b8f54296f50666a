"""One deployment, one answer: the optimizer reads the simulator's own resolved deployment, so its
zero-load figures and KV capacities are the simulator's; a reported goodput is a rate the fleet
sustains on a longer stream; the ranking shows the best of each architecture simulated whole."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from serveplan import get_hardware, get_model, get_profile
from serveplan.errors import InfeasibleError, SpecError
from serveplan.optimize.goodput import GoodputSettings, max_goodput, zero_load, zero_load_lengths
from serveplan.optimize.search import search
from serveplan.optimize.space import SearchSpace, enumerate_space, search_defaults
from serveplan.sim import SLO, Fleet, SimulationConfig, Workload, simulate
from serveplan.sim.serving import default_tp
from serveplan.specs.catalog import get_engine

MODELS = {"llama-3.1-8b": "dense", "qwen3-30b-a3b": "moe", "deepseek-v2-lite": "mla-moe", "qwen3-32b": "dense"}
DEVICES = ("h100-sxm", "h200", "b200")
ENGINES = ("vllm", "sglang", "trtllm", "bestserve")


def _dtypes(engine: str, hw: str) -> tuple[str | None, ...]:
    """The weight formats each engine serves on each device: 16-bit everywhere, FP8 on every
    engine release (Hopper and Blackwell), NVFP4 on Blackwell (B200); BestServe's testbed in 16 bits."""
    if engine == "bestserve":
        return (None,)
    return (None, "fp8", "nvfp4") if hw == "b200" else (None, "fp8")


def _fleet(engine: str, model: str, hw: str, dtype: str | None, disaggregated: bool) -> tuple[Fleet, GoodputSettings]:
    m, h = get_model(model), get_hardware(hw)
    st = GoodputSettings(model=m, hardware=h, profile=get_profile(None, hw), engine=engine,
                         workload=Workload.fixed(1536, 96, num_requests=50), slo=SLO(ttft_s=2.0, tpot_s=0.1),
                         dtype=dtype)
    spec = get_engine(engine)
    tp, _ = default_tp(spec, m, h, spec.profile_for(st.profile), longest_request=1632, dtype=dtype)
    mb, pmb, sched, cs, budget = search_defaults(engine, h)
    if disaggregated:
        return Fleet.build("1p1d", tp=tp, max_batch=int(mb), prefill_max_batch=pmb or None, token_budget=budget,
                           chunk_size=int(cs)), st
    return Fleet.build("1m", tp=tp, max_batch=int(mb), prefill_max_batch=pmb or None, scheduler=sched,
                       chunk_size=int(cs), token_budget=int(cs) if sched in ("chunked-prefill", "prefill-priority")
                       else budget), st


GRID = [(e, mo, hw, dt, dis) for e, mo, hw in itertools.product(ENGINES, MODELS, DEVICES)
        for dt in _dtypes(e, hw) for dis in (False, True)]


@pytest.mark.parametrize(("engine", "model", "hw", "dtype", "disaggregated"), GRID,
                         ids=[f"{e}-{m}-{h}-{d or 'bf16'}-{'pd' if x else 'm'}" for e, m, h, d, x in GRID])
def test_the_optimizers_zero_load_and_kv_capacity_are_the_simulators(engine, model, hw, dtype, disaggregated):
    fleet, st = _fleet(engine, model, hw, dtype, disaggregated)
    try:
        dep = st.deployment(fleet)
    except InfeasibleError:
        pytest.skip(f"{model} {dtype or 'bf16'} does not fit {hw} at this TP under {engine}")
    lone = zero_load(fleet, st)
    s_in, s_out = zero_load_lengths(st.workload, st.slo.percentile)
    one = SimulationConfig(model=st.model, hardware=st.hardware, profile=st.profile, fleet=fleet, engine=engine,
                           dtype=dtype, rate=1.0, workload=Workload.fixed(s_in, s_out, num_requests=1))
    res = simulate(one)
    assert lone.ttft_s == pytest.approx(float(res.requests.ttft[0]), rel=1e-9, abs=1e-12)
    assert lone.tpot_s == pytest.approx(float(res.requests.tpot[0]), rel=1e-9, abs=1e-12)
    # the KV capacity the optimizer's screens and notes read is the one the simulator ran with
    assert {s.role.value: s.kv_capacity_tokens for s in dep.roles} == res.kv_capacity_tokens
    # and the step times the screens read are the simulator's clocks'
    assert all(s.estimator is s.clock.est for s in dep.roles)


def test_an_unfit_layout_is_pruned_with_its_reason_not_the_whole_search():
    # under SGLang's memory rule: Llama-3.1-70B's bf16 weights do not fit one H100, and at TP 2 the
    # static fraction leaves a KV cache too small for one request of the Azure mix's tail (12,515
    # tokens); the search goes on with TP 4 and 8 (before, TP 2 stopped the whole search)
    st = GoodputSettings(model=get_model("llama-3.1-70b"), hardware=get_hardware("h100-sxm"),
                         profile=get_profile(None, "h100-sxm"), engine="sglang",
                         workload=Workload.fixed(1024, 128, num_requests=50), slo=SLO(ttft_s=1.0, tpot_s=0.05))
    mb, _, sched, cs, budget = search_defaults("sglang", st.hardware)
    space = SearchSpace(devices=16, tp_sizes=(1, 2, 4, 8), max_batches=(int(mb),), prefill_max_batch=None,
                        schedulers=(sched,), chunk_sizes=(int(cs),), token_budget=budget)
    listing = enumerate_space(space, st, request_tokens=12515)
    pruned = {p.name: p for p in listing.pruned}
    assert "weights do not fit" in pruned["tp1"].reason and pruned["tp1"].kind == "memory"
    assert "KV cache holds" in pruned["tp2"].reason and "one request needs 12515" in pruned["tp2"].reason
    assert listing.candidates and {c.first.parallel.tp for c in listing.candidates} == {4, 8}


#: six fleets: collocated and disaggregated, dense and MoE, one run near overload (a small KV cache)
HOLD = [
    ("llama-3.1-8b", "h100-sxm", "vllm", "1m", {"tp": 1}),
    ("llama-3.1-8b", "h100-sxm", "vllm", "2m", {"tp": 1}),
    ("llama-3.1-8b", "h100-sxm", "vllm", "1p1d", {"tp": 1}),
    ("qwen3-30b-a3b", "h100-sxm", "sglang", "1m", {"tp": 2}),
    ("qwen3-30b-a3b", "h200", "trtllm", "1p1d", {"tp": 1}),
    ("llama-3.1-70b", "h100-sxm", "vllm", "1m", {"tp": 2, "max_batch": 64}),   # KV-bound: near overload
]


@pytest.mark.parametrize(("model", "hw", "engine", "strategy", "kw"), HOLD,
                         ids=[f"{m}-{e}-{s}" for m, _, e, s, _ in HOLD])
def test_a_reported_goodput_holds_on_a_stream_three_times_longer(model, hw, engine, strategy, kw):
    m, h = get_model(model), get_hardware(hw)
    st = GoodputSettings(model=m, hardware=h, profile=get_profile(None, hw), engine=engine,
                         workload=Workload.from_dataset("azure-conv", 1200, seed=3).within_context(8192),
                         slo=SLO(ttft_s=1.0, tpot_s=0.06))
    spec = get_engine(engine)
    lim = spec.limits(h)
    fleet = Fleet.build(strategy, max_batch=kw.get("max_batch", lim.max_num_seqs or 256),
                        scheduler=spec.scheduler, chunk_size=lim.token_budget or 8192,
                        token_budget=lim.token_budget or 8192, tp=kw["tp"])
    res = max_goodput(fleet, st)
    assert res.goodput_rps > 0, res.reason
    longer = st.workload.tiled(3)
    cfg = st.simulation_config(fleet, rate=res.goodput_rps, workload=longer)
    run = simulate(cfg)
    tol = 1.0 + st.relaxation
    p = st.slo.percentile
    assert not run.overloaded, (res.goodput_rps, fleet.name)
    assert np.percentile(run.requests.ttft, p) <= tol * st.slo.ttft_s * 1.02, fleet.name
    tpot = run.requests.tpot[run.requests.output_len > 1]
    assert np.percentile(tpot, p) <= tol * st.slo.tpot_s * 1.02, fleet.name


def test_a_rate_whose_slo_holds_only_on_the_lightly_loaded_start_is_rejected():
    # a fleet past its capacity on a short stream: the whole-stream P90 passes while the queue builds,
    # the last third misses; the goodput search says so and reports a lower rate
    m, h = get_model("llama-3.1-8b"), get_hardware("h100-sxm")
    st = GoodputSettings(model=m, hardware=h, profile=get_profile(None, "h100-sxm"), engine="vllm",
                         workload=Workload.fixed(2048, 256, num_requests=600), slo=SLO(ttft_s=2.0, tpot_s=0.08),
                         relaxation=0.1)
    fleet = Fleet.build("1m", tp=1, max_batch=1024, scheduler="chunked-prefill", chunk_size=8192, token_budget=8192)
    res = max_goodput(fleet, st)
    longer = simulate(st.simulation_config(fleet, rate=res.goodput_rps, workload=st.workload.tiled(3)))
    assert not longer.overloaded
    if res.nonstationary_rps:
        assert min(res.nonstationary_rps) > res.goodput_rps


def test_the_ranking_shows_the_best_of_each_architecture_simulated_whole():
    st = GoodputSettings(model=get_model("llama-3.1-8b"), hardware=get_hardware("h100-sxm"),
                         profile=get_profile(None, "h100-sxm"), engine="vllm",
                         workload=Workload.from_dataset("azure-conv", 500, seed=1).within_context(8192),
                         slo=SLO(ttft_s=1.0, tpot_s=0.05))
    mb, pmb, sched, cs, budget = search_defaults("vllm", st.hardware)
    space = SearchSpace(devices=4, tp_sizes=(1, 2), max_batches=(int(mb),), prefill_max_batch=None,
                        schedulers=(sched,), chunk_sizes=(int(cs),), token_budget=budget)
    res = search(space, st, jobs=1, progress=False, method="auto")
    coll, dis = res.best_collocated, res.best_disaggregated
    assert coll is not None and dis is not None
    assert coll.method in ("", "confirmed") and dis.method in ("", "confirmed")   # simulated whole
    shown = res.ranking()
    assert coll in shown and dis in shown and len(shown) <= res.top + 2
    # every strategy not shown is ranked lower, or pruned with its bound
    assert all(p.bound_rps is not None for p in res.pruned if p.kind == "bound")
    assert res.settings_summary["engine"]["engine"] == "vllm" and res.settings_summary["kv_dtype"]


def test_closed_loop_throughput_times_latency_is_the_clients():
    # 16 clients, 128 requests: eight waves; the window ends when the first client's last request does
    m, h = get_model("llama-3.1-8b"), get_hardware("h100-sxm")
    for n in (128, 640):
        cfg = SimulationConfig(model=m, hardware=h, profile=get_profile(None, "h100-sxm"), engine="vllm", tp=1,
                               rate=None, concurrency=16, workload=Workload.fixed(512, 128, num_requests=n))
        cl = simulate(cfg).closed_loop
        assert cl.littles_law == pytest.approx(16, rel=0.02), (n, cl.littles_law)


def test_a_longer_stream_repeats_the_mix_and_refuses_sessions():
    wl = Workload.from_dataset("azure-conv", 100, seed=2)
    assert np.array_equal(wl.tiled(3).input_lengths[200:], wl.input_lengths) and wl.tiled(3).num_requests == 300
    from serveplan.sim.sessions import session_workload

    with pytest.raises(SpecError, match="cannot be repeated"):
        session_workload(4, 3).tiled(2)
    assert dataclasses.replace(wl) == wl and math.isfinite(float(wl.input_lengths.mean()))
