"""``serveplan simulate``: output contract, report files, and one-line errors with exit code 2."""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest
from typer.testing import CliRunner

from serveplan.cli import app

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["simulate", *args])


def test_default_prints_a_latency_table():
    r = run("--num-requests", "300", "--engine", "bestserve")
    assert r.exit_code == 0, r.output
    for word in ("TTFT", "TPOT", "E2E", "P90", "P99", "throughput", "1p1d"):
        assert word in r.output


def test_json_has_the_documented_keys():
    r = run("--json", "--num-requests", "200", "--strategy", "2m", "--scheduler", "sarathi", "--rate", "1",
            "--engine", "bestserve")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["num_completed"] == 200
    for k in ("ttft_s", "tpot_s", "e2e_s"):
        assert set(d[k]) >= {"mean", "p50", "p90", "p99"}
    assert d["throughput_rps"] > 0 and d["output_tokens_per_s"] > 0
    assert d["config"]["scheduler"] == "chunked-prefill"  # the mechanism behind the alias


@pytest.mark.slow
def test_out_writes_requests_csv_histograms_and_rate_sweep(tmp_path):
    r = run("--num-requests", "200", "--rate", "2", "--rate-sweep", "1,2,4", "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader((tmp_path / "requests.csv").open()))
    assert len(rows) == 200 and {"arrival_s", "first_token_s", "finish_s", "ttft_s", "tpot_s"} <= set(rows[0])
    assert (tmp_path / "latency_histograms.png").stat().st_size > 1000
    assert (tmp_path / "p90_vs_rate.png").stat().st_size > 1000
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [s["rate"] for s in summary["rate_sweep"]] == [1.0, 2.0, 4.0]


def test_trace_and_length_distributions_are_accepted(tmp_path):
    p = tmp_path / "trace.csv"
    p.write_text("arrival_s,input_len,output_len\n" + "".join(f"{i * 0.5},{512 + i},{8 + i % 5}\n" for i in range(40)))
    r = run("--trace", str(p), "--json", "--strategy", "2m")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["num_completed"] == 40
    r = run("--length-dist", "uniform:128,1024;fixed:16", "--num-requests", "50", "--json", "--strategy", "1m")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("args, needle", [
    (("--rate", "-1"), "rate=-1"),
    (("--num-requests", "0"), "num-requests=0"),
    (("--trace", "/nonexistent/trace.csv"), "cannot be read"),
    (("--strategy", "3x"), "strategy='3x' does not parse"),
    (("--model", "llama-13b", "--hardware", "a6000", "--profile", "default-gpu", "--tp", "1", "--strategy", "1m",
      "--input-len", "30000", "--output-len", "64", "--engine", "bestserve", "--allow-long-context"),
     "max_batch=16"),
    (("--model", "llama-13b", "--hardware", "a6000", "--profile", "default-gpu", "--tp", "1",
      "--input-len", "30000", "--output-len", "64", "--engine", "bestserve", "--allow-long-context"),
     "prefill_max_batch=4"),
    (("--scheduler", "fifo"), "scheduler='fifo'"),
    (("--length-dist", "normal:1;fixed:5"), "takes 2 parameter"),
    (("--arrival", "gamma", "--cv", "0"), "cv=0"),
    (("--model", "llama-13b", "--input-len", "30000", "--output-len", "64"), "exceeds max_position_embeddings=2,048"),
])
def test_bad_input_is_one_line_and_exit_code_2(args, needle):
    r = run("--num-requests", "100", *args) if "--num-requests" not in args else run(*args)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], r.output


@pytest.mark.parametrize("args, words", [
    (["--sessions", "4", "--turns", "0"], ["turns=0"]),
    (["--sessions", "4", "--think-time", "-1"], ["think-time=-1"]),
    (["--sessions", "0"], ["sessions=0"]),
    (["--turns", "3"], ["--turns=3", "--sessions"]),
    (["--sessions", "4", "--kv-tiers", "cpu"], ["--host", "dgx-h100"]),
    (["--sessions", "4", "--kv-tiers", "gpu", "--host", "dgx-h100"], ["kv_tiers='gpu'", "cpu,disk"]),
    (["--sessions", "4", "--kv-tiers", "disk", "--host", "dgx-h100"], ["cpu,disk"]),
    (["--sessions", "4", "--kv-tiers", "cpu", "--host", "dgx-h100", "--kv-cpu-gb", "0"], ["kv-cpu-gb=0"]),
    (["--sessions", "4", "--kv-tiers", "cpu", "--host", "nope"], ["nope"]),
    (["--host", "dgx-h100"], ["--kv-tiers"]),
    (["--sessions", "4", "--kv-tiers", "cpu", "--host", "dgx-h100", "--kv-connector", "mooncake"],
     ["kv_connector='mooncake'", "lmcache"]),
    (["--sessions", "4", "--kv-connector", "lmcache"], ["--kv-connector", "--kv-tiers"]),
    (["--system-prompt-len", "-5"], ["system-prompt-len=-5"]),
    (["--sessions", "4", "--scenario", "op2"], ["--sessions", "--scenario"]),
    (["--sessions", "4", "--prefix-hit", "0.5"], ["prefix_hit=0.5"]),
    (["--sessions", "4", "--fidelity", "bestserve"], ["fidelity"]),
])
def test_bad_session_and_tier_values_give_one_line_and_exit_2(args, words):
    r = run("-m", "llama-3.1-8b", "-H", "h100-sxm", *args)
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1, r.output
    for w in words:
        assert w in r.output


def test_sessions_json_reports_the_prefix_cache():
    r = run("-m", "llama-3.1-8b", "-H", "h100-sxm", "--tp", "1", "--sessions", "20", "--turns", "3",
            "--think-time", "5", "--rate", "0.5", "--kv-tiers", "cpu", "--host", "dgx-h100", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    pc = d["prefix_cache"]
    assert 0 < pc["hit_rate"] < 1 and set(pc["hit_tokens_by_tier"]) == {"gpu", "cpu", "disk"}
    assert {"ttft_hit_s", "ttft_miss_s", "load_s"} <= set(pc)
    assert d["config"]["kv_tiers"]["host"] == "dgx-h100" and d["num_completed"] == 60


def test_an_lmcache_connector_is_reported_in_the_json_config():
    r = run("-m", "llama-3.1-8b", "-H", "h100-sxm", "--tp", "1", "--sessions", "20", "--turns", "3",
            "--think-time", "5", "--rate", "0.5", "--kv-tiers", "cpu", "--host", "dgx-h100",
            "--kv-connector", "lmcache", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["config"]["kv_tiers"]["connector"] == "lmcache" and d["num_completed"] == 60
def test_json_names_slo_meeting_throughput_not_goodput():
    # goodput is the optimizer's answer (the highest rate meeting the SLO); a simulation at one rate
    # reports the throughput of the requests that met it
    r = run("--json", "--num-requests", "200", "--rate", "1", "--engine", "bestserve")
    d = json.loads(r.output)
    assert "goodput_rps" not in d
    assert d["slo_met_throughput_rps"] == pytest.approx(d["slo_attainment"] * 200 / d["makespan_s"])
    table = runner.invoke(app, ["simulate", "--num-requests", "200", "--rate", "1", "--engine", "bestserve"],
                          terminal_width=250)
    text = " ".join(table.output.split())
    assert "SLO (P90)" in text and "not the goodput" in text
    sweep = runner.invoke(app, ["simulate", "--num-requests", "200", "--rate", "1", "--engine", "bestserve",
                                "--rate-sweep", "0.5,1"], terminal_width=250)
    assert "rate sweep (SLO P90 TTFT <= 1000 ms and TPOT <= 50 ms, strict" in " ".join(sweep.output.split())


def test_progress_is_reported_per_chunk_and_drawn_on_stderr_only_when_asked(monkeypatch, capsys):
    from serveplan import get_hardware, get_model, get_profile
    from serveplan.cli import simulate as cli_sim
    from serveplan.sim import SimulationConfig, Workload, simulate

    cfg = SimulationConfig(model=get_model("codellama-34b"), hardware=get_hardware("ascend-910b3"),
                           profile=get_profile("bestserve-910b3"), strategy="2m", tp=4, max_batch=16,
                           prefill_max_batch=4, rate=3.0, workload=Workload.scenario("op3", num_requests=40000))
    seen: list[int] = []
    res = simulate(cfg, progress=seen.append)
    assert len(seen) >= 3 and seen == sorted(seen) and seen[-1] == res.num_completed == 40000
    small = dataclasses.replace(cfg, workload=Workload.scenario("op3", num_requests=300))
    seen.clear()
    simulate(small, progress=seen.append)   # not windowed: one report per drained instance
    assert seen and seen[-1] == 300
    monkeypatch.setattr(cli_sim, "PROGRESS_DELAY_S", 0.0)
    capsys.readouterr()
    with cli_sim.progress_bar(cfg.workload.num_requests, True) as update:
        simulate(cfg, progress=update)
    err = capsys.readouterr().err
    assert "simulate" in err and "req" in err
    with cli_sim.progress_bar(cfg.workload.num_requests, False) as update:
        assert update is None
        simulate(cfg, progress=update)
    assert capsys.readouterr().err == ""
