"""Optimizer: goodput search, monotonicity, resuming, ranking output and bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from serveplan import get_hardware, get_model, get_profile
from serveplan.cli import app
from serveplan.optimize import goodput as goodput_mod
from serveplan.optimize.goodput import GoodputSettings, capacity_bound, max_goodput
from serveplan.optimize.search import CHECKPOINT, search
from serveplan.optimize.space import SearchSpace, enumerate_space
from serveplan.sim import SLO, Fleet, SimulationConfig, Workload, simulate

runner = CliRunner()


#: BestServe's testbed through the CLI (its Figure 11 setting): the paper's reproduction, one flag away
BESTSERVE = ["--engine", "bestserve", "--model", "codellama-34b", "--hardware", "ascend-910b3", "--scenario", "op2",
             "--slo-ttft", "1.5", "--slo-tpot", "0.07"]

def settings(scenario="op3", n=300, ttft=1.5, tpot=0.07, **kw) -> GoodputSettings:
    return GoodputSettings(
        model=get_model("codellama-34b"), hardware=get_hardware("ascend-910b3"), profile=get_profile("bestserve-910b3"),
        workload=Workload.scenario(scenario, num_requests=n), slo=SLO(ttft_s=ttft, tpot_s=tpot, percentile=90),
        **{"engine": "bestserve", **kw},
    )


SMALL = SearchSpace(devices=4, tp_sizes=(2, 4), max_batches=(16,))


def test_space_prunes_tp1_with_the_reason_and_counts_devices():
    s = settings()
    listing = enumerate_space(SearchSpace(devices=8), s, request_tokens=1088)
    assert any(p.name == "tp1" and "weights do not fit" in p.reason for p in listing.pruned)
    names = {c.name for c in listing.candidates}
    assert {"2m-tp4-b16-prefill-first", "1p1d-tp4-b16", "4m-tp2-b16-prefill-first", "3p1d-tp2-b16"} <= names
    assert all(c.num_devices <= 8 for c in listing.candidates)
    c = next(c for c in listing.candidates if c.name == "1p2d-tp4/2-b16")
    assert c.num_devices == 4 + 2 * 2


def test_goodput_meets_slo_at_goodput_and_misses_just_above():
    s = settings()
    cand = Fleet.build("1m", tp=4, max_batch=16, prefill_max_batch=4)
    r = max_goodput(cand, s)
    assert r.status == "ok" and r.goodput_rps > 0.1
    assert r.goodput_per_device == pytest.approx(r.goodput_rps / 4)
    assert r.ttft_p <= 1.1 * 1.5 and r.tpot_p <= 1.1 * 0.07
    assert r.binding in ("ttft", "tpot")
    # capacity bound is an upper estimate of what the fleet can sustain
    assert r.goodput_rps <= 1.5 * capacity_bound(cand, s) * 2 ** 6
    # just above: a rate within the search tolerance misses the (relaxed) SLO, simulated afresh
    assert r.goodput_rps < r.miss_rps <= r.goodput_rps + 1.1 * max(s.abs_tol, s.rel_tol * r.goodput_rps)
    runs = {rate: simulate(SimulationConfig(model=s.model, hardware=s.hardware, profile=s.profile, fleet=cand,
                                            rate=rate, workload=s.workload, seed=s.seed))
            for rate in (r.goodput_rps, r.miss_rps)}
    meets = runs[r.goodput_rps]
    assert meets.ttft_s.p90 <= 1.1 * 1.5 and meets.tpot_s.p90 <= 1.1 * 0.07 and not meets.overloaded
    misses = runs[r.miss_rps]
    # missed over the whole stream, or met there but not in the steady state (its last third missed, or
    # a stream three times longer did): a rejection the result names
    assert (misses.overloaded or misses.ttft_s.p90 > 1.1 * 1.5 or misses.tpot_s.p90 > 1.1 * 0.07
            or r.miss_rps in r.nonstationary_rps)


def test_impossible_slo_rejects_with_reason():
    s = settings(ttft=0.01)
    r = max_goodput(Fleet.build("1m", tp=4), s)
    assert r.status == "rejected" and r.goodput_rps == 0
    assert "TTFT of a lone request" in r.reason


def test_looser_slo_never_lowers_goodput():
    cand = Fleet.build("1p1d", tp=4, max_batch=16, prefill_max_batch=4)
    tight = max_goodput(cand, settings(ttft=1.0, tpot=0.05)).goodput_rps
    loose = max_goodput(cand, settings(ttft=2.0, tpot=0.1)).goodput_rps
    assert loose >= tight


def test_more_devices_never_lower_the_best_goodput():
    s = settings()
    best4 = search(SearchSpace(devices=4, tp_sizes=(2, 4)), s, jobs=1, progress=False).best.goodput_rps
    best6 = search(SearchSpace(devices=6, tp_sizes=(2, 4)), s, jobs=1, progress=False).best.goodput_rps
    assert best6 >= best4


def test_search_resumes_only_unfinished_strategies(tmp_path, monkeypatch):
    s = settings()
    full = search(SMALL, s, jobs=1, progress=False)
    n = len(full.strategies) + len(full.rejected)
    assert n >= 4
    partial = search(SMALL, s, jobs=1, progress=False, out_dir=tmp_path, max_new_evaluations=n // 2)
    assert partial.num_evaluated == n // 2
    assert len((tmp_path / CHECKPOINT).read_text().splitlines()) == n // 2
    calls = []
    real = goodput_mod.max_goodput

    def counting(c, st, **kw):
        calls.append(c.name)
        return real(c, st)

    monkeypatch.setattr("serveplan.optimize.search.max_goodput", counting)
    resumed = search(SMALL, s, jobs=1, progress=False, out_dir=tmp_path)
    assert resumed.num_resumed == n // 2 and len(calls) == n - n // 2
    assert [r.name for r in resumed.strategies] == [r.name for r in full.strategies]
    assert [r.goodput_rps for r in resumed.strategies] == pytest.approx([r.goodput_rps for r in full.strategies])


def test_checkpoint_from_other_settings_is_ignored(tmp_path):
    search(SMALL, settings(), jobs=1, progress=False, out_dir=tmp_path, max_new_evaluations=2)
    other = search(SMALL, settings(ttft=2.0), jobs=1, progress=False, out_dir=tmp_path, max_new_evaluations=1)
    assert other.num_resumed == 0


def test_parallel_processes_give_the_same_ranking():
    s = settings()
    a = search(SMALL, s, jobs=1, progress=False)
    b = search(SMALL, s, jobs=2, progress=False)
    assert [(r.name, r.goodput_rps) for r in a.strategies] == [(r.name, r.goodput_rps) for r in b.strategies]


def test_statistical_mode_reports_a_confidence_interval():
    s = settings(seeds=3, relaxation=0.0)
    r = max_goodput(Fleet.build("1m", tp=4), s)
    lo, hi = r.goodput_ci
    assert lo <= r.goodput_rps <= hi and len(r.goodput_samples) == 3


def test_cli_json_and_out(tmp_path):
    res = runner.invoke(app, ["optimize", "--devices", "4", "--tp", "2,4", "--scenario", "op3", "--num-requests", "300",
                              "--jobs", "1", "--json", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    first = d["strategies"][0]
    assert {"name", "num_devices", "tp", "goodput_rps", "goodput_per_device"} <= set(first)
    per_dev = [s["goodput_per_device"] for s in d["strategies"]]
    assert per_dev == sorted(per_dev, reverse=True)
    for f in ("ranking.csv", "goodput.png", "pareto.png", CHECKPOINT):
        assert (tmp_path / f).stat().st_size > 0


@pytest.mark.parametrize(
    "args, code, needle",
    [
        (["--tp", ""], 2, "tp=''"),
        (["--tp", "3"], 2, "no admissible layout"),
        (["--devices", "1", "--tp", "2,4"], 2, "fewer than the smallest instance"),
        (["--slo-ttft", "0"], 2, "slo-ttft=0.0 must be a positive number"),
        (["--backend", "ray", "--ray-address", "127.0.0.1:1"], 2, "unreachable"),
        (["--slo-ttft", "0.001", "--devices", "4", "--tp", "4"], 3, "no strategy meets the SLO"),
        (["--model", "llama-3.1-405b", "--devices", "2", "--tp", "1,2"], 3, "no strategy fits"),
    ],
)
def test_cli_bad_input(args, code, needle):
    res = runner.invoke(app, ["optimize", *BESTSERVE, "--num-requests", "200", "--jobs", "1", "--no-progress", *args])
    assert res.exit_code == code, res.output
    out = (res.stderr or res.output).strip().splitlines()
    assert len(out) == 1 and needle in out[0], out


@pytest.mark.slow
@pytest.mark.ray
def test_ray_backend_matches_local():
    pytest.importorskip("ray")
    s = settings(n=200)
    space = SearchSpace(devices=4, tp_sizes=(4,))
    a = search(space, s, jobs=1, progress=False)
    b = search(space, s, jobs=2, backend="ray", progress=False)
    assert [(r.name, r.goodput_rps) for r in a.strategies] == [(r.name, r.goodput_rps) for r in b.strategies]


def test_cli_several_scenarios_share_one_run():
    res = runner.invoke(app, ["optimize", "--devices", "4", "--tp", "4", "--scenario", "op3,op2", "--num-requests",
                              "200", "--jobs", "1", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert [s["scenario"] for s in d["scenarios"]] == ["op3", "op2"]
    assert all(s["strategies"] for s in d["scenarios"])


@pytest.mark.slow
def test_search_killed_with_sigkill_resumes(tmp_path):
    """A real kill: SIGKILL the CLI once a few strategies are checkpointed, then rerun."""
    import os
    import signal
    import subprocess
    import sys
    import time

    args = [sys.executable, "-m", "serveplan", "optimize", "--devices", "8", "--tp", "2,4,8", "--scenario", "op3",
            "--num-requests", "1500", "--jobs", "1", "--no-progress", "--exhaustive", "--out", str(tmp_path)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = tmp_path / CHECKPOINT
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if ckpt.exists() and len(ckpt.read_text().splitlines()) >= 3:
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the search finished before it could be killed"
    done_before = len([ln for ln in ckpt.read_text().splitlines() if ln.strip()])
    resumed = runner.invoke(app, args[3:-2] + ["--out", str(tmp_path), "--json"])
    assert resumed.exit_code == 0, resumed.output
    d = json.loads(resumed.output)
    total = len(d["strategies"]) + len(d["rejected"])
    assert d["num_resumed"] >= min(done_before, total) - 1  # a line cut by the kill is re-evaluated
    assert d["num_evaluated"] == total - d["num_resumed"]
    fresh = runner.invoke(app, args[3:-2] + ["--json"])
    f = json.loads(fresh.output)
    assert [s["name"] for s in d["strategies"]] == [s["name"] for s in f["strategies"]]


def test_goodput_of_a_stream_too_short_to_load_the_fleet_is_capped_at_the_capacity_bound():
    # 20 requests and SLOs no run can miss (TTFT 1000 s, TPOT 10 s): every rate "meets" the SLO,
    # because the whole stream arrives as one burst the fleet absorbs. The search stops widening
    # and reports the analytic capacity bound (not the last rate it tried), and says why.
    s = settings(n=20, ttft=1000.0, tpot=10.0)
    cand = Fleet.build("1m", tp=4, max_batch=16, prefill_max_batch=4)
    r = max_goodput(cand, s)
    bound = capacity_bound(cand, s)
    assert r.status == "ok" and r.goodput_rps == pytest.approx(bound)
    assert "too few to load this fleet" in r.reason and "20 requests" in r.reason


def test_the_slo_tolerance_is_shown_beside_every_goodput_and_zero_is_strict(tmp_path):
    base = ["optimize", *BESTSERVE, "--devices", "4", "--tp", "4", "--scenario", "op3", "--num-requests", "200",
            "--jobs", "1", "--no-progress", "--slo-ttft", "1.0"]
    table = runner.invoke(app, base, terminal_width=250)
    assert table.exit_code == 0, table.output
    text = " ".join(table.output.split())
    assert "SLO P90 TTFT 1 s / TPOT 70 ms (+10% tolerance)" in text
    assert "goodput req/s (SLO +10%)" in text and "SLO met within +10% (tolerance 0.1)" in text
    assert "Pareto-optimal: no other strategy has both a higher goodput per device and a lower mean" in text
    loose = json.loads(runner.invoke(app, [*base, "--json", "--out", str(tmp_path)]).output)
    assert loose["settings"]["slo_tolerance"] == 0.1
    assert all(r["slo_tolerance"] == 0.1 for r in loose["strategies"])
    assert "slo_tolerance" in (tmp_path / "ranking.csv").read_text().splitlines()[0]
    strict = json.loads(runner.invoke(app, [*base, "--slo-tolerance", "0", "--json"]).output)
    assert strict["settings"]["slo_tolerance"] == 0.0
    for r in strict["strategies"]:   # the strict answer: every percentile within the target itself
        assert r["slo_tolerance"] == 0.0 and r["ttft_p_s"] <= 1.0 and r["tpot_p_s"] <= 0.07
    assert strict["strategies"][0]["goodput_rps"] <= loose["strategies"][0]["goodput_rps"]
    table0 = runner.invoke(app, [*base, "--slo-tolerance", "0"], terminal_width=250)
    assert "TPOT 70 ms (strict)" in " ".join(table0.output.split())
