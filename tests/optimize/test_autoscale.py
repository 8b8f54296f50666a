"""Day plan (optimize/autoscale.py, sim/traffic.py): a step-shaped trace against a hand computation,
the traffic sources, and the day simulated end to end."""

from __future__ import annotations

import math

import numpy as np
import pytest

from serveplan.errors import SpecError
from serveplan.optimize.autoscale import (
    ScalingPolicy,
    day_cost,
    peak_schedule,
    plan_schedule,
    replicas_needed,
    scale_up_time,
    simulate_day,
)
from serveplan.optimize.goodput import GoodputResult, GoodputStatus
from serveplan.sim.traffic import diurnal, load_traffic, poisson_arrivals, read_traffic
from serveplan.specs.prices import Price

STEP_CSV = "time_s,rate_rps\n0,2\n900,10\n1800,2\n"


@pytest.fixture
def step(tmp_path):
    """Rates 2, 10, 2 req/s for 15 minutes each; 5-minute intervals."""
    p = tmp_path / "step.csv"
    p.write_text(STEP_CSV)
    return read_traffic(p, 300.0)


def test_step_trace_is_averaged_onto_the_intervals(step, tmp_path):
    # the last row lasts as long as the one before it (900 s): 2700 s = 9 intervals of 300 s
    assert step.rates.tolist() == [2, 2, 2, 10, 10, 10, 2, 2, 2]
    odd = tmp_path / "odd.csv"
    odd.write_text("time_s,rate_rps\n0,2\n450,10\n")  # 900 s; interval 2 = (150 s x 2 + 150 s x 10) / 300 s = 6
    assert read_traffic(odd, 300.0).rates.tolist() == [2, 6, 10]
    stamps = tmp_path / "t.txt"
    stamps.write_text("\n".join(str(x) for x in (0, 1, 2, 61, 121)))  # 3 in [0, 60), 1 in [60, 120), cut after
    assert read_traffic(stamps, 60.0).rates.tolist() == pytest.approx([3 / 60, 1 / 60])


def test_step_trace_scheduled_plan_against_a_hand_computation(step):
    # G = 4 req/s per replica: n = max(1, ceil(r / 4)) = 1 at 2 req/s, ceil(10 / 4) = 3 at 10 req/s
    pol = ScalingPolicy(policy="scheduled", min_replicas=1, scale_up_s=120.0, scale_down_delay_s=300.0)
    assert replicas_needed(step.rates, 4.0, pol).tolist() == [1, 1, 1, 3, 3, 3, 1, 1, 1]
    s = plan_schedule(step, 4.0, pol)
    # two replicas start at 900 - 120 = 780 s, serve from 900 s; the delay of 300 s (one interval)
    # keeps them through interval 6 (1800-2100 s): removed at 2100 s
    added = [r for r in s.replicas if r.slot > 0]
    assert [(r.boot_s, r.ready_s, r.stop_s) for r in added] == [(780.0, 900.0, 2100.0)] * 2
    # replica-seconds in the day: 2700 (slot 0) + 2 x (2100 - 780) = 5340 s -> 1.4833 GPU-hours at 1 device
    price = Price(hardware="h100-sxm", tier="on_demand", usd_per_gpu_hour=2.0)
    c = day_cost(s, 1, price, None)
    assert c.gpu_hours == pytest.approx(5340 / 3600)
    assert c.usd == pytest.approx(2.0 * 5340 / 3600)
    serving, prov = s.interval_means()
    assert serving.tolist() == [1, 1, 1, 3, 3, 3, 3, 1, 1]
    assert prov[2] == pytest.approx(1 + 2 * 120 / 300)  # two replicas starting for the last 120 s
    # the peak: 3 replicas all day = 8100 replica-seconds = 2.25 GPU-hours
    pk = day_cost(peak_schedule(step, 4.0, pol), 1, price, None)
    assert pk.gpu_hours == pytest.approx(2.25) and pk.peak_replicas == 3


def test_step_trace_reactive_plan_lags_by_one_interval_and_the_scale_up(step):
    pol = ScalingPolicy(policy="reactive", min_replicas=1, scale_up_s=120.0, scale_down_delay_s=300.0)
    s = plan_schedule(step, 4.0, pol)
    # reads interval 3's rate at 1200 s: starts two replicas then, serving from 1320 s; the rate falls
    # at 1800 s, seen at 2100 s, kept one interval more: removed at 2400 s
    added = [(r.boot_s, r.ready_s, r.stop_s) for r in s.replicas if r.slot > 0]
    assert added == [(1200.0, 1320.0, 2400.0)] * 2
    serving, _ = s.interval_means()
    assert serving[3] == 1 and serving[4] == pytest.approx(1 + 2 * 180 / 300)
    assert day_cost(s, 1, None, None).gpu_hours == pytest.approx((2700 + 2 * 1200) / 3600)
    # no delay: removed as soon as the lower rate is read (2100 s)
    fast = plan_schedule(step, 4.0, ScalingPolicy(policy="reactive", scale_up_s=120.0, scale_down_delay_s=0.0))
    assert {r.stop_s for r in fast.replicas if r.slot > 0} == {2100.0}


def test_min_and_max_replicas_bound_the_count(step):
    pol = ScalingPolicy(min_replicas=2, max_replicas=2)
    assert replicas_needed(step.rates, 4.0, pol).tolist() == [2] * 9


def test_scale_up_time_is_weights_over_bandwidth_plus_startup():
    # 16 GB at 8 GB/s = 2 s, + 58 s
    su = scale_up_time(16e9, 8e9, 58.0)
    assert su.load_s == pytest.approx(2.0) and su.total_s == pytest.approx(60.0)
    assert scale_up_time(16e9, 8e9, 58.0, total_s=10.0).total_s == 10.0


def test_diurnal_shape_formula():
    d = diurnal(40.0, 10.0, interval_s=3600.0, peak_hour=14.5)
    # hour 14 (midpoint 14.5 h) is the peak; hour 2 (midpoint 2.5 h, 12 h away) the trough
    assert d.rates[14] == pytest.approx(40.0) and d.rates[2] == pytest.approx(10.0)
    assert d.rates[8] == pytest.approx(25.0)  # 6 h away: cos = 0, halfway
    assert diurnal(8, 2, interval_s=300).num_intervals == 288


def test_poisson_arrivals_follow_the_rate():
    rng = np.random.default_rng(0)
    t = poisson_arrivals(np.array([0.0, 100.0, 200.0]), np.array([1.0, 0.0]), rng)
    assert np.all(t < 100) and abs(len(t) - 100) < 40


@pytest.mark.parametrize("kw, what", [
    ({"traffic": "nosuch"}, "neither a file nor a known name"),
    ({"traffic": "diurnal", "peak": 2.0, "trough": 5.0}, "trough=5"),
    ({"traffic": "diurnal", "peak": -1.0, "trough": 0.0}, "peak=-1"),
])
def test_bad_traffic_names_the_field(kw, what):
    with pytest.raises(SpecError, match=what):
        load_traffic(interval_s=300.0, **kw)


def test_bad_rate_file_names_the_line(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("time_s,rate_rps\n0,2\n300,fast\n")
    with pytest.raises(SpecError, match="line 3"):
        read_traffic(p, 300.0)
    p.write_text("time_s,rate_rps\n0,2\n300,-1\n")
    with pytest.raises(SpecError, match="rate_rps=-1"):
        read_traffic(p, 300.0)
    with pytest.raises(SpecError, match="policy='sometimes'"):
        ScalingPolicy(policy="sometimes")


@pytest.fixture(scope="module")
def small():
    """Llama-3.1-8B on one device (1m-tp1 under vLLM), without a search."""
    from serveplan.commands.plan import PlanOptions, prepare
    from serveplan.sim.fleet import Fleet

    st = prepare(PlanOptions(model="llama-3.1-8b", devices=1, tp="1", num_requests=300)).settings[0]
    cand = Fleet.build("1m", tp=1, max_batch=256, scheduler="chunked-prefill", chunk_size=2048)
    return st, GoodputResult(candidate=cand, goodput_rps=1.0, goodput_per_device=1.0, status=GoodputStatus.OK)


def test_day_simulated_end_to_end_on_the_step_trace(step, small):
    st, unit = small
    tr = step.scaled(0.25)                # 0.5, 2.5, 0.5 req/s: 1 then 3 replicas of G = 1
    pol = ScalingPolicy(scale_up_s=60.0)
    s = plan_schedule(tr, unit.goodput_rps, pol)
    run = simulate_day(s, unit, st, sim_requests=5000, seed=1)
    assert run.mode == "whole day" and run.num_slots == 3
    # every request of the day represented: 0.5 x 1800 s + 2.5 x 900 s = 3150 expected
    assert run.requests_represented == pytest.approx(3150)
    # serving 1, 1, 1, 3, 3, 3, 3 (the delay), 1, 1: slot 0 takes 0.5 x 900 + 2.5/3 x 900 + 0.5/3 x 300
    # + 0.5 x 600 = 1550; slots 1 and 2 are exchangeable (one simulated, counted twice): 750 + 50 = 800
    assert run.slots_simulated == 2
    assert abs(run.requests_simulated - 2350) < 4 * math.sqrt(2350)
    assert 0.9 <= run.attainment <= 1.0 and np.all(np.isfinite(run.attainment_by_interval))
    again = simulate_day(s, unit, st, sim_requests=5000, seed=1)
    assert again.attainment == run.attainment    # the same seed gives the same day
    sampled = simulate_day(s, unit, st, sim_requests=1000, seed=1)
    assert sampled.mode.startswith("sampled") and sampled.requests_simulated < 1500
    # the intervals where the fleet changes are simulated first: replicas serve from 900 s (interval 3)
    # and are removed at 2100 s (interval 7)
    assert "2 where the fleet changes" in sampled.mode
    assert np.isfinite(sampled.attainment_by_interval[[3, 7]]).all()


def test_the_bundled_week_of_a_production_trace_is_a_week():
    # servegen-m-large-week.yaml (built by benchmarks/build_traffic.py --servegen): 1,008 windows of
    # 600 s = 7 days; its num_requests field (126,735,052) is the sum of the counts, so the mean rate
    # is 126,735,052 / 604,800 s = 209.55 req/s (hand division)
    week = load_traffic("servegen-m-large-week", interval_s=600.0)
    assert week.num_intervals == 1008 and week.interval_s == 600.0
    assert float(week.rates.mean()) == pytest.approx(126_735_052 / 604_800, rel=1e-12)
    assert load_traffic("servegen-m-large-week", interval_s=3600.0).num_intervals == 168  # hours of a week
