"""``serveplan compare``: a hand-made vLLM serving-benchmark result against the simulator."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.errors import SpecError
from serveplan.validate.compare import parse_vllm_result, read_vllm_result, workload_of

DATA = Path(__file__).parent.parent / "calibrate" / "data" / "vllm_result.json"
runner = CliRunner()
ARGS = ["--model", "llama-2-7b", "--hardware", "a100-80g", "--tp", "1", "--strategy", "1m"]


def test_reader_derives_tpot_as_vllm_does():
    run = read_vllm_result(DATA)
    raw = json.loads(DATA.read_text())
    k = 0
    assert run.tpot_s[k] == pytest.approx(sum(raw["itls"][k]) / (raw["output_lens"][k] - 1))
    assert run.request_rate == 2.0 and len(run.ttft_s) == raw["completed"]


def test_compare_prints_the_side_by_side_table():
    r = runner.invoke(app, ["compare", str(DATA), *ARGS])
    assert r.exit_code == 0, r.output
    out = r.output
    assert "measured (ms)" in out and "simulated (ms)" in out
    for metric in ("TTFT", "TPOT"):
        assert metric in out
    for stat in ("mean", "p50", "p90", "p99"):
        assert stat in out
    raw = json.loads(DATA.read_text())
    assert f"{1000 * np.mean(raw['ttfts']):.2f}" in out   # measured mean TTFT, ms


def test_compare_json_has_eight_rows_with_positive_simulated_latencies():
    r = runner.invoke(app, ["compare", str(DATA), *ARGS, "--json"])
    d = json.loads(r.output)
    assert len(d["rows"]) == 8 and d["num_requests"] == 12
    assert all(row["simulated_s"] > 0 and row["measured_s"] > 0 for row in d["rows"])


def test_infinite_rate_becomes_a_burst_at_time_zero():
    raw = json.loads(DATA.read_text())
    raw["request_rate"] = "inf"
    wl = workload_of(parse_vllm_result(raw))
    assert wl.arrival == "trace" and float(np.max(wl.trace_times)) == 0.0


def test_burstiness_maps_to_gamma_cv():
    raw = json.loads(DATA.read_text())
    raw["burstiness"] = 4.0
    wl = workload_of(parse_vllm_result(raw))
    assert wl.arrival == "gamma" and wl.cv == pytest.approx(0.5)


@pytest.mark.parametrize("change, match", [
    (lambda d: d.pop("ttfts"), "ttfts"),
    (lambda d: d.pop("itls"), "itls"),
    (lambda d: d.update(ttfts=d["ttfts"][:-1]), "one entry per request"),
    (lambda d: d["itls"][0].__setitem__(0, -0.1), "negative"),
    (lambda d: d.update(output_lens=[0] * len(d["output_lens"])), "no completed request"),
])
def test_bad_result_files_are_spec_errors(change, match):
    raw = json.loads(DATA.read_text())
    change(raw)
    with pytest.raises(SpecError, match=match):
        parse_vllm_result(raw)


def test_cli_bad_result_file_exits_2(tmp_path):
    bad = tmp_path / "r.json"
    bad.write_text("{not json")
    r = runner.invoke(app, ["compare", str(bad), *ARGS])
    assert r.exit_code == 2 and r.output.startswith("error:")


def _synthetic(n: int, rate: object, max_concurrency: int | None = None) -> dict:
    raw = {"request_rate": rate, "burstiness": 1.0, "completed": n, "duration": 10.0, "input_lens": [512] * n,
           "output_lens": [128] * n, "ttfts": [0.05] * n, "itls": [[0.02] * 127] * n}
    if max_concurrency is not None:
        raw["max_concurrency"] = max_concurrency
    return raw


def _cfg():
    from serveplan import get_hardware, get_model, get_profile
    from serveplan.sim import simulation_config

    return simulation_config(engine="vllm", model=get_model("llama-2-7b"), hardware=get_hardware("a100-80g"),
                             profile=get_profile("measured-a100-80g"), rate=1.0)


def test_a_burst_at_infinite_rate_runs_every_request_to_completion():
    # 1,500 requests sent at t=0 drain for far longer than 20 lone-request latencies (the default
    # cap of a stream with no arrival span): all of them must finish, as they did in the benchmark
    from serveplan.validate.compare import compare

    cmp = compare(parse_vllm_result(_synthetic(1500, "inf")), _cfg())
    assert cmp.simulated_completed == 1500 and "t=0" in cmp.load


def test_max_concurrency_is_a_closed_loop():
    from serveplan.sim import Workload, simulate
    from serveplan.validate.compare import compare

    # one client: every request runs alone, so every TTFT is a lone request's
    one = compare(parse_vllm_result(_synthetic(40, "inf", 1)), _cfg())
    ttft = {r.stat: r.simulated_s for r in one.rows if r.metric == "TTFT"}
    lone = simulate(dataclasses.replace(_cfg(), workload=Workload.fixed(512, 128, num_requests=1)))
    assert one.max_concurrency == 1 and "closed loop of 1 client" in one.load
    assert ttft["p50"] == pytest.approx(lone.ttft_s.p50, rel=1e-9)
    assert ttft["p99"] == pytest.approx(lone.ttft_s.p50, rel=1e-9)
    # a finite rate with a cap that never binds is the open loop at that rate: capped sends and
    # open-loop sends both go through the API server's serial work (vLLM: 1 ms per request;
    # docs/simulator.md), so two sends 0.4 ms apart (requests 10 and 11 of this stream) reach the
    # engine 1 ms apart on both paths
    free = compare(parse_vllm_result(_synthetic(200, 4.0, 10**6)), _cfg())
    open_ = compare(parse_vllm_result(_synthetic(200, 4.0)), _cfg())
    assert _cfg().engine.frontend_s > 0
    assert [r.simulated_s for r in free.rows] == pytest.approx([r.simulated_s for r in open_.rows], rel=1e-9)
    # ... and a binding cap queues requests before they are sent: TTFT counts from the send
    capped = compare(parse_vllm_result(_synthetic(200, 4.0, 2)), _cfg())
    assert "at most 2 in flight" in capped.load and capped.simulated_completed == 200


def test_compare_uses_the_engine_defaults_as_simulate_does(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_synthetic(50, 2.0)))
    args = ["--model", "llama-2-7b", "--hardware", "a100-80g"]
    cmp = json.loads(runner.invoke(app, ["compare", str(path), *args, "--json"]).output)
    sim = json.loads(runner.invoke(app, ["simulate", *args, "--num-requests", "50", "--json"]).output)
    for key in ("max_batch", "scheduler", "tp", "token_budget", "engine"):
        assert cmp["config"][key] == sim["config"][key], key
