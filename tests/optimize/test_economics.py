"""Cost and energy of a plan: hand-derived $/Mtok, $/month and J/token, and the objectives."""

from __future__ import annotations

import numpy as np
import pytest

from serveplan import plan_serving
from serveplan.errors import SpecError
from serveplan.optimize.economics import cost_figures, economics, planned_rate
from serveplan.optimize.goodput import GoodputResult, GoodputSettings, GoodputStatus
from serveplan.sim import SLO, Fleet, Workload
from serveplan.specs.catalog import get_hardware, get_model, get_profile
from serveplan.specs.prices import get_price

SMALL = {"devices": 2, "tp": "1", "num_requests": 300, "input_len": 512, "output_len": 128}


def test_cost_of_two_plans_by_hand():
    # Plan A: 2 x H100 at $3.20/GPU-h, goodput 4 req/s, 1000 input + 250 output tokens per request.
    #   $/h = 2 x 3.20 = 6.40; output tokens/s = 4 x 250 = 1000;
    #   $/Mtok out = 6.40 / (3600 x 1000) x 1e6 = 1.7778; all tokens/s = 4 x 1250 = 5000 -> 0.35556;
    #   $/month at the goodput (one fleet) = 6.40 x 730 = 4672.
    a = cost_figures(2, 3.20, 4.0, 1000, 250)
    assert a["usd_per_hour"] == pytest.approx(6.40)
    assert a["usd_per_mtok_output"] == pytest.approx(1.777778, rel=1e-6)
    assert a["usd_per_mtok_total"] == pytest.approx(0.355556, rel=1e-5)
    assert a["usd_per_month"] == pytest.approx(4672.0)
    # Plan B: 8 x H200 at $3.99, goodput 10 req/s, 512 + 128 tokens, planned at a target of 25 req/s:
    #   k = ceil(25 / 10) = 3 fleets; $/h = 8 x 3.99 = 31.92; output tokens/s = 1280;
    #   $/Mtok out = 31.92 / (3600 x 1280) x 1e6 = 6.927083; all: 10 x 640 = 6400 tokens/s -> 1.385417;
    #   $/month = 3 x 31.92 x 730 = 69,904.80.
    rate, k, what = planned_rate(10.0, 25.0)
    assert (rate, k, what) == (25.0, 3, "target rate")
    b = cost_figures(8, 3.99, 10.0, 512, 128, replicas=k)
    assert b["usd_per_hour"] == pytest.approx(31.92)
    assert b["usd_per_mtok_output"] == pytest.approx(6.927083, rel=1e-6)
    assert b["usd_per_mtok_total"] == pytest.approx(1.385417, rel=1e-6)
    assert b["usd_per_month"] == pytest.approx(69904.8)
    assert planned_rate(10.0, None) == (10.0, 1, "goodput") and planned_rate(10.0, 10.0)[1] == 1


def _settings(hw: str = "h200", s_in: int = 512, s_out: int = 100) -> GoodputSettings:
    return GoodputSettings(model=get_model("llama-3.1-8b"), hardware=get_hardware(hw),
                           profile=get_profile(hardware="h200"), workload=Workload.fixed(s_in, s_out, 200),
                           slo=SLO(ttft_s=1.0, tpot_s=0.05))


def test_joules_per_token_of_a_nearly_idle_fleet_by_hand():
    # One H200 serving 0.01 req/s of 512 + 100 tokens is busy well under 1% of the time, so it draws
    # its idle 80 W plus the server's 350 W share: 430 W; 0.01 x 100 = 1 output token/s -> 430 J per
    # output token, 430 / 6.12 = 70.3 J per input+output token, 430 W x 730 h = 313.9 kWh a month.
    fleet = Fleet.build("1m", tp=1, max_batch=64)
    res = GoodputResult(candidate=fleet, goodput_rps=0.01, goodput_per_device=0.01, status=GoodputStatus.OK)
    e = economics(res, _settings(), price=get_price("h200"))
    assert e.power_w_per_device == pytest.approx(430.0, rel=0.01)
    assert e.j_per_output_token == pytest.approx(430.0, rel=0.01)
    assert e.j_per_token == pytest.approx(430.0 / 6.12, rel=0.01)
    assert e.kwh_per_month == pytest.approx(313.9, rel=0.01)
    assert e.usd_per_hour == pytest.approx(3.99)
    role = e.roles[0]
    assert role.busy_prefill + role.busy_decode < 0.01 and role.decode_batch == 1


def test_more_load_draws_more_power_but_fewer_joules_per_token():
    fleet = Fleet.build("1m", tp=1, max_batch=256)
    out = []
    for rate in (0.5, 5.0, 20.0):
        res = GoodputResult(candidate=fleet, goodput_rps=rate, goodput_per_device=rate, status=GoodputStatus.OK)
        out.append(economics(res, _settings()))
    watts = [e.power_w_per_device for e in out]
    joules = [e.j_per_output_token for e in out]
    assert watts == sorted(watts) and watts[-1] <= 700 + 350
    assert joules == sorted(joules, reverse=True)
    assert all(e.usd_per_hour is None for e in out)   # no price given: no cost figures


def test_a_device_without_board_power_has_no_energy_figures():
    fleet = Fleet.build("1m", tp=1, max_batch=16)
    st = _settings()
    st = GoodputSettings(model=st.model, hardware=st.hardware.with_(board_power_w=0.0, idle_power_w=0.0),
                         profile=st.profile, workload=st.workload, slo=st.slo)
    res = GoodputResult(candidate=fleet, goodput_rps=1.0, goodput_per_device=1.0, status=GoodputStatus.OK)
    e = economics(res, st)
    assert e.power_w_per_device is None and e.j_per_output_token is None


@pytest.fixture(scope="module")
def plans():
    return {obj: plan_serving("llama-3.1-8b", "h100-sxm", objective=obj, **SMALL)
            for obj in ("goodput-per-device", "cost", "energy")}


def test_every_strategy_gets_cost_and_energy_and_the_objectives_order_by_them(plans):
    base = plans["goodput-per-device"]
    for r in base.strategies:
        ce = base.cost_energy(r.name)
        assert ce["usd_per_hour"] == pytest.approx(r.candidate.num_devices * 3.20)
        # $/Mtok at the goodput: $/h / (3600 x goodput x 128) x 1e6
        assert ce["usd_per_mtok_output"] == pytest.approx(ce["usd_per_hour"] / (3600 * r.goodput_rps * 128) * 1e6)
        assert ce["j_per_output_token"] > 0 and ce["power_w_per_device"] > 0
    per_device = [r.goodput_per_device for r in base.strategies]
    assert per_device == sorted(per_device, reverse=True)
    cost = [plans["cost"].cost_energy(r.name)["usd_per_mtok_output"] for r in plans["cost"].strategies]
    energy = [plans["energy"].cost_energy(r.name)["j_per_output_token"] for r in plans["energy"].strategies]
    assert cost == sorted(cost) and energy == sorted(energy)
    assert plans["energy"].objective == "energy" and plans["energy"].settings_summary["objective"] == "energy"
    doc = plans["energy"].to_dict()
    assert doc["strategies"][0]["j_per_output_token"] == energy[0]
    assert all(p["j_per_output_token"] is not None for p in doc["frontier"])


def test_with_a_target_rate_the_cost_objective_reorders_the_fewest_devices_ranking():
    # --target-rate ranks the fleets reaching it by fewest devices; --objective cost ranks the same
    # fleets by lowest $ per million output tokens instead (every fleet here reaches 1 req/s)
    kw = dict(SMALL, target_rate=1.0, method="exhaustive")
    fewest = plan_serving("llama-3.1-8b", "h100-sxm", **kw)
    cheapest = plan_serving("llama-3.1-8b", "h100-sxm", objective="cost", **kw)
    devices = [r.candidate.num_devices for r in fewest.strategies]
    assert devices == sorted(devices) and devices[0] == 1
    cost = [cheapest.cost_energy(r.name)["usd_per_mtok_output"] for r in cheapest.strategies]
    assert cost == sorted(cost)
    assert {r.name for r in fewest.strategies} == {r.name for r in cheapest.strategies}
    # the planned rate is the target: one fleet each, $/month = $/h x 730
    ce = cheapest.cost_energy(cheapest.best.name)
    assert ce["planned_rps"] == 1.0 and ce["replicas"] == 1
    assert ce["usd_per_month"] == pytest.approx(ce["usd_per_hour"] * 730)


def test_the_energy_objective_reorders_what_goodput_per_device_ranks():
    # every fleet simulated whole: 1m has the most goodput per device (68.3 vs 67.2 req/s for
    # 1p1d), but the disaggregated pair spends less energy per output token (its prefill device at
    # full batch, its decode device memory-bound): --objective energy puts 1p1d first
    kw = dict(SMALL, method="exhaustive")
    by_goodput = plan_serving("llama-3.1-8b", "h100-sxm", **kw)
    by_energy = plan_serving("llama-3.1-8b", "h100-sxm", objective="energy", **kw)
    joules = {r.name: by_energy.cost_energy(r.name)["j_per_output_token"] for r in by_energy.strategies}
    assert [r.name for r in by_energy.strategies] == sorted(joules, key=joules.__getitem__)
    assert [r.name for r in by_goodput.strategies] != [r.name for r in by_energy.strategies]
    assert by_goodput.best.name.startswith("1m") and by_energy.best.name.startswith("1p1d")


def test_price_override_changes_the_dollars_and_not_the_ranking():
    res = plan_serving("llama-3.1-8b", "h100-sxm", price="h100-sxm=1.0", **SMALL)
    for r in res.strategies:
        assert res.cost_energy(r.name)["usd_per_hour"] == pytest.approx(r.candidate.num_devices * 1.0)
    assert res.settings_summary["price"]["usd_per_gpu_hour"] == 1.0


def test_cost_objective_without_a_price_stops_before_any_simulation():
    with pytest.raises(SpecError, match="no on-demand price for hardware 'l4'"):
        plan_serving("llama-3.1-8b", "l4", objective="cost", **SMALL)
    with pytest.raises(SpecError, match="objective='cheapest'; expected one of"):
        plan_serving("llama-3.1-8b", "h100-sxm", objective="cheapest", **SMALL)


def test_mean_lengths_are_the_workloads():
    st = _settings(s_in=300, s_out=50)
    assert float(np.mean(st.workload.output_lengths)) == 50.0
