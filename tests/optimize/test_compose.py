"""Fast search: pool composition against whole-fleet simulation, bounds, target rate."""

from __future__ import annotations

import pytest

from serveplan import get_hardware, get_model, get_profile
from serveplan.errors import InfeasibleError
from serveplan.optimize.compose import Measurer, instance_stream
from serveplan.optimize.goodput import GoodputSettings, max_goodput
from serveplan.optimize.screen import Screen
from serveplan.optimize.search import search
from serveplan.optimize.space import SearchSpace
from serveplan.sim import SLO, Fleet, Workload
from serveplan.specs.hardware import LinkSpec

HW = get_hardware("ascend-910b3")
# nodes of 4 devices joined by a 0.1 GB/s link: a 1p1d-tp4 fleet spans two nodes and moving a
# 1,024-token KV cache takes about half a second, which shows in every request's TPOT
SLOW_LINK = HW.with_(devices_per_node=4, inter_node_link=LinkSpec(name="slow", bandwidth=0.1e9, latency_s=1e-3))


def settings(hw=HW, n=600, scenario="op3") -> GoodputSettings:
    return GoodputSettings(model=get_model("codellama-34b"), hardware=hw, profile=get_profile("bestserve-910b3"),
                           workload=Workload.scenario(scenario, num_requests=n),
                           slo=SLO(ttft_s=1.5, tpot_s=0.07, percentile=90), engine="bestserve")


def screen(s: GoodputSettings) -> Screen:
    return Screen(s)


@pytest.mark.parametrize("hw, strategy, kw", [
    (HW, "1p1d", {"tp": 4}),                     # decode-bound
    (HW, "2p1d", {"tp": 2, "decode_tp": 4}),     # decode-bound, two prefill instances feed it
    (HW, "1p1d", {"tp": 2, "decode_tp": 4}),     # prefill-bound (TTFT binds)
    (SLOW_LINK, "1p1d", {"tp": 4}),              # the KV transfer crosses the slow link
    (SLOW_LINK, "2p1d", {"tp": 2, "decode_tp": 4}),
])
def test_composed_split_equals_the_whole_fleet_within_the_bisection_tolerance(hw, strategy, kw):
    s = settings(hw)
    cand = Fleet.build(strategy, max_batch=16, prefill_max_batch=4, **kw)
    composed = Measurer(s).compose(cand, screen(s))
    whole = max_goodput(cand, s)
    assert whole.goodput_rps > 0
    tol = 1.1 * max(s.abs_tol, s.rel_tol * whole.goodput_rps)
    assert abs(composed.goodput_rps - whole.goodput_rps) <= tol, (composed.goodput_rps, whole.goodput_rps)
    assert composed.binding == whole.binding


def test_kv_transfer_lowers_the_composed_goodput_as_it_lowers_the_fleet():
    cand = Fleet.build("2p1d", tp=2, decode_tp=4, max_batch=16, prefill_max_batch=4)
    fast, slow = settings(HW), settings(SLOW_LINK)
    g_fast = Measurer(fast).compose(cand, screen(fast)).goodput_rps
    g_slow = Measurer(slow).compose(cand, screen(slow)).goodput_rps
    assert g_slow < 0.8 * g_fast  # the transfer adds ~8 ms to every TPOT of 64 tokens


def test_every_nth_arrival_of_a_poisson_stream_is_gamma_with_cv_one_over_sqrt_n():
    wl = Workload.scenario("op3", num_requests=4000)
    one = instance_stream(wl, 4)
    assert one.arrival == "gamma" and one.cv == pytest.approx(0.5) and one.num_requests == 1000
    assert instance_stream(wl, 1) is wl


def test_analytic_bound_is_above_every_simulated_goodput():
    s = settings(n=400)
    sc = screen(s)
    res = search(SearchSpace(devices=8, tp_sizes=(2, 4, 8)), s, jobs=1, progress=False)
    for r in res.strategies:
        assert sc.fleet(r.candidate) >= r.goodput_rps, r.name


def test_fast_search_finds_the_exhaustive_best():
    s = settings(n=400)
    space = SearchSpace(devices=8, tp_sizes=(2, 4, 8))
    full = search(space, s, jobs=1, progress=False)
    fast = search(space, s, jobs=1, progress=False, method="fast")
    assert fast.best.method == "confirmed"
    assert fast.best.goodput_per_device >= 0.98 * full.best.goodput_per_device
    # the confirmed goodput is a whole-fleet simulation: the exhaustive search's number for it
    ref = {r.name: r for r in full.strategies}[fast.best.name]
    assert fast.best.goodput_rps == pytest.approx(ref.goodput_rps, rel=1.1 * s.rel_tol)
    assert fast.num_simulations < full.num_simulations / 2
    assert any(p.kind == "bound" for p in fast.pruned)


@pytest.mark.parametrize("rate", [1.5, 3.0, 4.5])  # best: 1.84 req/s on 4 devices, 4.0 on 6, 4.92 on 8
def test_target_rate_gives_the_fewest_devices_of_the_exhaustive_search(rate):
    s = settings(n=400)
    space = SearchSpace(devices=8, tp_sizes=(2, 4, 8))
    full = search(space, s, jobs=1, progress=False)
    fewest = min(r.candidate.num_devices for r in full.strategies if r.goodput_rps >= rate)
    got = search(space, s, jobs=1, progress=False, method="fast", target_rate=rate)
    assert got.best.goodput_rps >= rate and got.best.method == "confirmed"
    assert got.best.candidate.num_devices == fewest
    ex = search(space, s, jobs=1, progress=False, target_rate=rate)
    assert ex.best.candidate.num_devices == fewest


def test_target_rate_out_of_reach_says_so():
    with pytest.raises(InfeasibleError, match="reaches the target rate"):
        search(SearchSpace(devices=4, tp_sizes=(4,)), settings(n=300), jobs=1, progress=False, method="fast",
               target_rate=1000.0)


def test_fast_search_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    s = settings(n=300)
    space = SearchSpace(devices=8, tp_sizes=(2, 4, 8))
    first = search(space, s, jobs=1, progress=False, method="fast", out_dir=tmp_path)
    calls = []
    import serveplan.optimize.compose as compose

    real = compose.max_goodput

    def counting(*a, **k):
        calls.append(a[0].name)
        return real(*a, **k)

    monkeypatch.setattr(compose, "max_goodput", counting)
    again = search(space, s, jobs=1, progress=False, method="fast", out_dir=tmp_path)
    assert calls == []  # every pool measurement and confirmation came from the checkpoint
    assert again.num_resumed > 0 and again.num_simulations == 0
    assert [(r.name, r.goodput_rps) for r in again.strategies] == [(r.name, r.goodput_rps) for r in first.strategies]


def test_frontier_marks_each_architectures_non_dominated_points(tmp_path):
    from typer.testing import CliRunner

    from serveplan.cli import app

    res = search(SearchSpace(devices=8, tp_sizes=(2, 4, 8)), settings(n=300), jobs=1, progress=False)
    pts = res.frontier
    assert {p.architecture for p in pts} == {"collocated", "disaggregated"}
    for p in pts:
        u, d = p.tokens_per_s_per_user, p.tokens_per_s_per_device
        better = [q for q in pts if q.architecture == p.architecture and q.tokens_per_s_per_user >= u
                  and q.tokens_per_s_per_device >= d and (q.tokens_per_s_per_user > u or q.tokens_per_s_per_device > d)]
        assert p.pareto == (not better)
    r = next(r for r in res.strategies if r.name == pts[0].name)
    assert pts[0].tokens_per_s_per_user == pytest.approx(1 / r.tpot_p)
    out = CliRunner().invoke(app, ["optimize", "--devices", "4", "--tp", "2,4", "--scenario", "op3", "--num-requests",
                                   "300", "--jobs", "1", "--no-progress", "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "frontier: output tokens/s per device" in out.output
    assert (tmp_path / "frontier.png").stat().st_size > 0
    head = (tmp_path / "frontier.csv").read_text().splitlines()[0]
    assert head.startswith("architecture,name,num_devices")


def test_knob_ladder_starts_from_the_engine_defaults():
    from serveplan.optimize.space import knob_ladder, search_defaults

    hw = get_hardware("h200")
    mb, _, sched, cs, _ = search_defaults("vllm", hw, knobs=True)
    assert mb == "1024,256,64" and cs == "8192,16384" and sched == "chunked-prefill,prefill-first"
    assert search_defaults("vllm", hw, knobs=True, max_batch="32")[0] == "32"  # a list given wins
    assert knob_ladder(16, 512, "prefill-first") == ((16,), (512, 1024), ("prefill-first", "chunked-prefill"))


def test_cli_target_rate_names_the_fewest_devices():
    from typer.testing import CliRunner

    from serveplan.cli import app

    bestserve = ["--engine", "bestserve", "--model", "codellama-34b", "--hardware", "ascend-910b3", "--slo-ttft", "1.5",
                 "--slo-tpot", "0.07"]
    out = CliRunner().invoke(app, ["optimize", *bestserve, "--devices", "8", "--tp", "2,4,8", "--scenario", "op3",
                                   "--num-requests", "400", "--jobs", "1", "--no-progress", "--target-rate", "3"])
    assert out.exit_code == 0, out.output
    assert "fewest devices reaching 3 req/s: 6 " in out.output  # 4.0 req/s on 6 devices, 1.84 on 4
    bad = CliRunner().invoke(app, ["optimize", "--devices", "4", "--tp", "4", "--num-requests", "200", "--jobs", "1",
                                   "--no-progress", "--target-rate", "-1"])
    assert bad.exit_code == 2 and "target-rate" in bad.output


def test_frontier_mode_keeps_the_exhaustive_frontier():
    s = settings(n=300)
    space = SearchSpace(devices=8, tp_sizes=(2, 4, 8), max_batches=(4, 16))
    full = search(space, s, jobs=1, progress=False)
    fast = search(space, s, jobs=1, progress=False, method="fast", frontier=True)
    kept = {r.name for r in fast.strategies}
    on_front = {p.name for p in full.frontier if p.pareto}
    assert on_front <= kept, on_front - kept
    plain = search(space, s, jobs=1, progress=False, method="fast")
    assert len(plain.strategies) <= len(fast.strategies)


def test_a_lone_request_depends_on_the_instance_configurations_not_their_counts():
    # the fast search's seed shares one lone request per goodput.lone_key; every candidate of a
    # vLLM space (collocated and disaggregated, TP 1-4, two batch limits) gets the same floats alone
    from serveplan.optimize.goodput import lone_key, zero_load
    from serveplan.optimize.space import enumerate_space
    from serveplan.sim.clock import Clocks

    s = GoodputSettings(model=get_model("qwen3-32b"), hardware=get_hardware("h200"),
                        profile=get_profile(hardware="h200"), workload=Workload.fixed(4000, 500, num_requests=200),
                        slo=SLO(ttft_s=1.0, tpot_s=0.02))
    listing = enumerate_space(SearchSpace(devices=6, tp_sizes=(1, 2, 4), max_batches=(16, 256)), s,
                              request_tokens=4500)
    shared: dict = {}
    keys = set()
    for c in listing.candidates:
        key = lone_key(c)
        keys.add(key)
        if key not in shared:
            shared[key] = (c.name, zero_load(c, s, Clocks()))
        assert zero_load(c, s, Clocks()) == shared[key][1], (c.name, shared[key][0])
    assert any(k[0] for k in keys) and any(not k[0] for k in keys)
    assert len(listing.candidates) > 2 * len(keys)
