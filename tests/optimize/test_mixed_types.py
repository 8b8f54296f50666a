"""Several hardware types: each type alone is its own search, the mixed prefill/decode fleets are
ranked beside them, the KV transfer between two types takes the slower NIC, a mixed fleet pays
each pool at its type's price."""

from __future__ import annotations

import dataclasses
import json

import pytest

from serveplan import plan_serving
from serveplan.commands import plan
from serveplan.errors import SpecError
from serveplan.optimize.economics import economics
from serveplan.optimize.goodput import GoodputResult, GoodputSettings, GoodputStatus
from serveplan.report.deploy import launch_plan
from serveplan.sim import SLO, Fleet, Workload
from serveplan.sim.clock import Clocks
from serveplan.sim.cluster import kv_transfer_time
from serveplan.sim.engine import simulate
from serveplan.sim.fleet import DeviceType
from serveplan.specs.catalog import get_hardware, get_model, get_profile
from serveplan.specs.hardware import kv_link
from serveplan.specs.prices import get_price

SMALL = {"model": "llama-3.1-8b", "tp": "1", "num_requests": 200, "input_len": 1024, "output_len": 128,
         "objective": "cost", "jobs": 1}


def _device(name: str) -> DeviceType:
    return DeviceType(hardware=get_hardware(name), profile=get_profile(None, hardware=name))


def _settings(hw: str) -> GoodputSettings:
    return GoodputSettings(model=get_model("llama-3.1-8b"), hardware=get_hardware(hw),
                           profile=get_profile(None, hardware=hw), workload=Workload.fixed(1024, 128, 200),
                           slo=SLO(ttft_s=1.0, tpot_s=0.05))


def test_kv_link_between_two_types_is_the_slower_nic():
    # H100 SXM: 400 Gb/s ConnectX-7 per GPU = 50 GB/s, 5 us; L40S: 200 Gb/s per GPU = 25 GB/s, 10 us
    link = kv_link(get_hardware("h100-sxm"), get_hardware("l40s"))
    assert link.bandwidth == pytest.approx(25e9) and link.latency_s == pytest.approx(1e-5)
    assert kv_link(get_hardware("l40s"), get_hardware("h100-sxm")).bandwidth == pytest.approx(25e9)


def test_kv_transfer_between_two_types_by_hand():
    # Llama-3.1-8B: 32 layers x 8 KV heads x 128 dims x 2 (K and V) x 2 bytes = 131,072 bytes per token
    # on a TP1 prefill instance; 1000 tokens over 25 GB/s at the prefill's comm efficiency e, + 10 us
    fleet = Fleet.build("1p1d", tp=1, max_batch=64).on_devices(prefill=_device("h100-sxm"), decode=_device("l40s"))
    dep = _settings("l40s").deployment(fleet, Clocks())
    est_p, est_d = dep.first.estimator, dep.last.estimator
    assert est_p.hardware.name == "h100-sxm" and est_d.hardware.name == "l40s"
    e = est_p.profile.prefill.comm
    assert est_p.memory.kv_bytes_per_token == 131072
    assert kv_transfer_time(est_p, est_d, 1000) == pytest.approx(1e-5 + 1000 * 131072 / (e * 25e9))


def test_a_mixed_fleet_is_named_with_its_types_and_reads_back():
    fleet = Fleet.build("2p1d", tp=1, decode_tp=2, max_batch=64).on_devices(prefill=_device("l40s"),
                                                                          decode=_device("a100-80g"))
    assert fleet.name == "2p@l40s+1d@a100-80g-tp1/2-b64"
    assert fleet.is_mixed and Fleet.from_dict(fleet.to_dict()) == fleet
    one = Fleet.build("2m", tp=1).on_device(_device("l40s"))
    assert one.name.startswith("2m@l40s-tp1") and not one.is_mixed and Fleet.from_dict(one.to_dict()) == one
    plain = Fleet.build("1p1d", tp=1)
    assert "@" not in plain.name and "prefill_hardware" not in plain.to_dict()


def test_a_mixed_fleet_pays_each_pool_at_its_types_price():
    # 2 L40S prefill + 1 A100-80GB decode: $/h = 2 x p(l40s) + 1 x p(a100-80g)
    fleet = Fleet.build("2p1d", tp=1, max_batch=64).on_devices(prefill=_device("l40s"), decode=_device("a100-80g"))
    res = GoodputResult(candidate=fleet, goodput_rps=4.0, goodput_per_device=4.0 / 3, status=GoodputStatus.OK)
    e = economics(res, _settings("a100-80g"), price_of=lambda hw: get_price(hw))
    hourly = 2 * get_price("l40s").usd_per_gpu_hour + get_price("a100-80g").usd_per_gpu_hour
    assert e.usd_per_hour == pytest.approx(hourly)
    assert e.usd_per_mtok_output == pytest.approx(hourly / (3600 * 4.0 * 128) * 1e6)
    assert {p.hardware for p in e.prices} == {"l40s", "a100-80g"} and e.price is None
    # each pool draws its own type's power
    assert [r.role for r in e.roles] == ["prefill", "decode"]
    json.dumps(e.to_dict(), allow_nan=False)


@pytest.fixture(scope="module")
def runs() -> dict[str, plan.PlanResult]:
    return {hw: plan.run(plan.PlanOptions.parse({**SMALL, "hardware": hw, "devices": 2}), launch_files=False)
            for hw in ("l40s", "a100-80g", "l40s,a100-80g")}


def _rows(res, suffix: str = "") -> list[tuple[str, float, float | None]]:
    return [(r.name.replace(suffix, ""), r.goodput_rps, res.economics[r.name].usd_per_mtok_output)
            for r in res.strategies if r.name.endswith(suffix) or not suffix]


def test_restricting_the_set_to_one_type_reproduces_the_single_type_search(runs):
    both = runs["l40s,a100-80g"].best
    for hw in ("l40s", "a100-80g"):
        alone = runs[hw].best
        tag = f"@{hw}"
        # the type's own fleets in the multi-type ranking: the single-type search's, same order and numbers
        mine = [(r.name.replace(tag, ""), r.goodput_rps, both.economics[r.name].usd_per_mtok_output)
                for r in both.strategies if tag in r.name and "+" not in r.name]
        assert mine == _rows(alone)
        assert [p.name for p in both.pruned if p.name.endswith(f" on {hw}")] == \
            [f"{p.name} on {hw}" for p in alone.pruned]
    # one type given per type reads as that type alone
    again = plan.run(plan.PlanOptions.parse({**SMALL, "hardware": "l40s", "devices": "l40s=2"}), launch_files=False)
    assert _rows(again.best) == _rows(runs["l40s"].best)


def test_mixed_fleets_are_ranked_beside_each_type_by_cost(runs):
    res = runs["l40s,a100-80g"].best
    names = [r.name for r in res.strategies]
    assert any("+" in n for n in names) and any(n.endswith("@l40s") or "@l40s-" in n for n in names)
    costs = [res.economics[n].usd_per_mtok_output for n in names[1:]]
    assert costs == sorted(costs)
    for r in res.strategies:
        if r.candidate.is_mixed:   # each pool within its own type's budget
            assert r.candidate.strategy.num_prefill <= 2 and r.candidate.strategy.num_decode <= 2
    doc = runs["l40s,a100-80g"].document()
    json.dumps(doc, allow_nan=False)
    assert [s["search"] for s in res.settings_summary["searches"]] == [
        "l40s", "a100-80g", "prefill on l40s, decode on a100-80g", "prefill on a100-80g, decode on l40s"]


def test_plan_serving_takes_several_types():
    res = plan_serving("llama-3.1-8b", "l40s,a100-80g", devices=1, tp="1", num_requests=100, input_len=512,
                       output_len=64, no_collocated=True)
    assert all("@" in r.name for r in res.strategies)


def test_launch_files_refuse_a_mixed_fleet():
    fleet = Fleet.build("1p1d", tp=1, max_batch=64).on_devices(prefill=_device("h100-sxm"), decode=_device("l40s"))
    st = GoodputSettings(**{**{f: getattr(_settings("l40s"), f) for f in ("model", "hardware", "profile",
                                                                           "workload", "slo")}, "engine": "vllm"})
    with pytest.raises(SpecError, match="two device types"):
        launch_plan(fleet, st)


@pytest.mark.parametrize(("hardware", "devices", "words"), [
    ("h100-sxm,l40s", "h100-sxm=8", ["no budget for l40s", "expected TYPE=N"]),
    ("h100-sxm,l40s", "h100-sxm=8,a100-80g=4", ["'a100-80g' is not a --hardware type", "h100-sxm, l40s"]),
    ("h100-sxm,l40s", "abc", ["devices='abc' must be an integer", "h100-sxm=8,l40s=8"]),
    ("h100-sxm,l40s", "h100-sxm=x,l40s=2", ["h100-sxm='x' must be an integer"]),
    ("h100-sxm,h100-sxm", "8", ["names a type twice"]),
    ("h100-sxm,", "8", ["empty entry"]),
])
def test_bad_budgets_and_type_lists_are_one_line_spec_errors(hardware, devices, words):
    with pytest.raises(SpecError) as exc:
        plan.PlanOptions.parse({"hardware": hardware, "devices": devices})
    assert "\n" not in str(exc.value) and all(w in str(exc.value) for w in words)


def test_a_single_budget_caps_each_type():
    o = plan.PlanOptions.parse({"hardware": "h100-sxm,l40s", "devices": "8"})
    assert o.budget() == {"h100-sxm": 8, "l40s": 8} and o.budget_text == "8 x h100-sxm, 8 x l40s"
    assert plan.PlanOptions(devices=4).devices == "4"   # plan_serving(devices=4) as before


def test_a_fleet_named_with_the_configs_own_type_simulates_and_costs_the_same():
    st = _settings("a100-80g")
    plain = Fleet.build("1p1d", tp=1, max_batch=64)
    tagged = plain.on_device(_device("a100-80g"))
    assert not tagged.is_mixed and tagged.name == "1p1d@a100-80g-tp1-b64"
    a = simulate(st.simulation_config(plain, rate=4.0))
    b = simulate(st.simulation_config(tagged, rate=4.0))
    assert list(a.requests.ttft) == list(b.requests.ttft) and list(a.requests.tpot) == list(b.requests.tpot)
    ea = economics(GoodputResult(candidate=plain, goodput_rps=4.0, goodput_per_device=2.0, status=GoodputStatus.OK),
                   st, price=get_price("a100-80g"))
    eb = economics(GoodputResult(candidate=tagged, goodput_rps=4.0, goodput_per_device=2.0, status=GoodputStatus.OK),
                   st, price_of=lambda hw: get_price(hw))
    assert eb.usd_per_mtok_output == pytest.approx(ea.usd_per_mtok_output)
    assert eb.j_per_output_token == pytest.approx(ea.j_per_output_token)


def test_a_type_without_a_nic_is_refused_for_a_cross_type_transfer():
    no_nic = get_hardware("l40s").with_(inter_node_link=None)
    with pytest.raises(SpecError, match="has no inter_node_link"):
        kv_link(get_hardware("h100-sxm"), no_nic)
    fleet = Fleet.build("1p1d", tp=1).on_devices(prefill=_device("h100-sxm"),
                                                 decode=DeviceType(hardware=no_nic, profile=get_profile("default-gpu")))
    with pytest.raises(SpecError, match="inter_node_link"):
        _settings("l40s").simulation_config(fleet)


def test_bestserve_fidelity_refuses_pools_on_two_types():
    fleet = Fleet.build("1p1d", tp=1).on_devices(prefill=_device("h100-sxm"), decode=_device("l40s"))
    st = dataclasses.replace(_settings("l40s"), fidelity="bestserve", engine=None)
    with pytest.raises(SpecError, match="fidelity='iteration'"):
        st.simulation_config(fleet)
