"""Branch and bound over the exhaustive search (``method="bounded"``): the best ``keep`` strategies
and their goodputs are the exhaustive search's; every other candidate is ruled out by one run."""

from __future__ import annotations

import pytest

from serveplan import get_hardware, get_model, get_profile
from serveplan.errors import SpecError
from serveplan.optimize.goodput import GoodputSettings, max_goodput
from serveplan.optimize.search import search
from serveplan.optimize.space import SearchSpace
from serveplan.sim import SLO, Fleet, Workload

SPACE = SearchSpace(devices=8, tp_sizes=(2, 4, 8))


def settings(n: int = 400) -> GoodputSettings:
    return GoodputSettings(model=get_model("codellama-34b"), hardware=get_hardware("ascend-910b3"),
                           profile=get_profile("bestserve-910b3"), workload=Workload.scenario("op3", num_requests=n),
                           slo=SLO(ttft_s=1.5, tpot_s=0.07, percentile=90), engine="bestserve")


@pytest.fixture(scope="module")
def full():
    return search(SPACE, settings(), jobs=1, progress=False)


@pytest.mark.parametrize("keep, jobs", [(1, 1), (3, 1), (3, 2)])
def test_best_strategies_and_goodputs_are_the_exhaustive_searchs(full, keep, jobs):
    got = search(SPACE, settings(), jobs=jobs, progress=False, method="bounded", keep=keep)
    ref = {r.name: r for r in full.strategies}
    # the best `keep`, in order, with the exhaustive search's goodputs (the same simulations)
    assert [(r.name, r.goodput_rps) for r in got.strategies[:keep]] == \
        [(r.name, r.goodput_rps) for r in full.strategies[:keep]]
    # every strategy ranked is exact, in the exhaustive order: a subsequence of its ranking
    assert all(r.goodput_rps == ref[r.name].goodput_rps for r in got.strategies)
    order = [r.name for r in full.strategies]
    idx = [order.index(r.name) for r in got.strategies]
    assert idx == sorted(idx)
    # each pruned one missed the SLO at the rate it had to beat, and its true goodput per device is
    # below the keep-th best: none of them could enter the best `keep`
    cut = [p for p in got.pruned if p.kind == "bound"]
    assert cut and len(cut) + len(got.strategies) + len(got.rejected) == len(full.strategies) + len(full.rejected)
    kth = full.strategies[keep - 1].goodput_per_device
    for p in cut:
        assert "SLO missed at" in p.reason and "analytic bound" in p.reason, p.reason
        if p.name in ref:
            assert ref[p.name].goodput_per_device < kth, p.name
    assert got.num_simulations < full.num_simulations
    assert got.settings_summary["method"] == "bounded" and got.settings_summary["keep"] == keep


def test_one_run_at_the_rate_to_beat_rules_a_fleet_out_or_costs_one_extra_run():
    s = settings()
    cand = Fleet.build("1p1d", tp=4, max_batch=16, prefill_max_batch=4)
    plain = max_goodput(cand, s)
    above = max_goodput(cand, s, beat=1.5 * plain.goodput_rps)
    assert above.method == "cut" and above.goodput_rps == 0 and above.num_simulations == 1
    assert above.miss_rps == pytest.approx(1.5 * plain.goodput_rps) and "SLO missed at" in above.reason
    below = max_goodput(cand, s, beat=0.5 * plain.goodput_rps)
    assert below.method == "" and below.goodput_rps == plain.goodput_rps
    assert below.num_simulations == plain.num_simulations + 1


def test_keep_must_be_a_positive_integer():
    with pytest.raises(SpecError, match="keep"):
        search(SPACE, settings(), jobs=1, progress=False, method="bounded", keep=0)


def test_cli_keep_runs_the_branch_and_bound_and_says_why_fleets_were_ruled_out():
    from typer.testing import CliRunner

    from serveplan.cli import app

    args = ["optimize", "--devices", "8", "--tp", "2,4,8", "--scenario", "op3", "--num-requests", "400", "--jobs", "1",
            "--no-progress"]
    out = CliRunner().invoke(app, [*args, "--keep", "1"])
    assert out.exit_code == 0, out.output
    assert "ruled out by one run at the rate they had to beat" in out.output
    bad = CliRunner().invoke(app, [*args, "--keep", "1", "--target-rate", "3"])
    assert bad.exit_code == 2 and "target-rate" in bad.output
    plain = CliRunner().invoke(app, args)  # the default: method "auto", here the fast search's ranking
    assert plain.exit_code == 0, plain.output
    said = " ".join(plain.output.split())
    assert "search method fast: every fleet simulated whole agreed with its composition" in said


# method "auto" (the CLI default): the fast search where its whole-fleet confirmations agree with its
# compositions, else the branch and bound

def test_auto_keeps_the_fast_search_where_its_confirmations_agree():
    fast = search(SPACE, settings(), jobs=1, progress=False, method="fast")
    auto = search(SPACE, settings(), jobs=1, progress=False, method="auto")
    assert not fast.settings_summary["disagreements"]
    assert [(r.name, r.goodput_rps, r.method) for r in auto.strategies] == \
        [(r.name, r.goodput_rps, r.method) for r in fast.strategies]
    assert auto.num_simulations == fast.num_simulations and auto.pruned == fast.pruned
    assert auto.settings_summary["method"] == "fast" and auto.settings_summary["auto"].startswith("fast:")


def wide_ep_settings() -> tuple[SearchSpace, GoodputSettings]:
    """DeepSeek-V3 FP8 on 24 x H200, DP attention and EP 8 with DeepEP, batches of 1,024 and 300
    requests: the 1p2d decode pools composed from one instance fed every 2nd request give 11.1 req/s,
    the whole fleet 7.05 (the stream never fills them, so no pool is in its steady state)."""
    from serveplan import DType
    from serveplan.specs.comm import CommOptions

    space = SearchSpace(devices=24, tp_sizes=(1, 8), dp_sizes=(1, 8), ep_sizes=(1, 8), max_batches=(1024,),
                        prefill_max_batch=None, schedulers=("chunked-prefill",), chunk_sizes=(8192,))
    st = GoodputSettings(model=get_model("deepseek-v3"), hardware=get_hardware("h200"),
                         profile=get_profile("measured-h200").with_(comm=CommOptions.deepep()),
                         workload=Workload.fixed(4096, 1000, num_requests=300),
                         slo=SLO(ttft_s=2.0, tpot_s=0.05, percentile=90), dtype=DType.FP8, engine=None)
    return space, st


def test_auto_runs_the_branch_and_bound_where_the_composition_disagrees_with_the_whole_fleet():
    space, st = wide_ep_settings()
    fast = search(space, st, jobs=1, progress=False, method="fast")
    assert any(d.startswith("1p2d-tp1-dp8") for d in fast.settings_summary["disagreements"])
    auto = search(space, st, jobs=1, progress=False, method="auto")
    exact = search(space, st, jobs=1, progress=False, method="bounded")  # the exhaustive best (test above)
    assert (auto.best.name, auto.best.goodput_rps) == (exact.best.name, exact.best.goodput_rps)
    assert auto.best.goodput_rps != fast.best.goodput_rps  # the fast search's figure is a composition's
    assert [r.name for r in auto.strategies] == [r.name for r in exact.strategies]
    summ = auto.settings_summary
    assert summ["method"] == "bounded" and summ["auto"].startswith("bounded: the composition")
    assert "1p2d-tp1-dp8" in summ["auto"]
    # the fast attempt's simulations are counted
    assert auto.num_simulations == exact.num_simulations + summ["fast_attempt_simulations"]
