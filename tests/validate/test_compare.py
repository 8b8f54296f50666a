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


def _summary(n: int = 30, rate: object = 2.0) -> dict:
    """A result as `vllm bench serve --save-result` writes it without --save-detailed (the keys of
    vllm/benchmarks/serve.py: per-request fields deleted, statistics in ms, --metric-percentiles 90,99)."""
    raw = {"date": "20250101-120000", "backend": "vllm", "num_prompts": n, "request_rate": rate, "burstiness": 1.0,
           "max_concurrency": None, "duration": 15.0, "completed": n, "failed": 0,
           "total_input_tokens": 512 * n, "total_output_tokens": 128 * n, "request_throughput": n / 15.0,
           "request_goodput": None, "output_throughput": 128 * n / 15.0, "total_token_throughput": 640 * n / 15.0,
           "latencies": [1.0] * n, "queue_times": [0.0] * n}
    for metric, base in (("ttft", 60.0), ("tpot", 20.0), ("itl", 20.0), ("e2el", 2600.0)):
        raw.update({f"mean_{metric}_ms": base, f"median_{metric}_ms": base * 0.95, f"std_{metric}_ms": base * 0.1,
                    f"p90_{metric}_ms": base * 1.2, f"p99_{metric}_ms": base * 1.5})
    return raw


def test_a_summary_only_result_is_read_from_its_statistics():
    run = parse_vllm_result(_summary())
    assert not run.detailed and run.completed == 30
    assert set(run.input_lens) == {512} and set(run.output_lens) == {128}   # total tokens / completed
    assert run.summary["TTFT"] == pytest.approx({"mean": 0.060, "p50": 0.057, "p90": 0.072, "p99": 0.090})
    assert set(run.summary) == {"TTFT", "TPOT", "ITL", "E2E"}
    assert run.rates["output_throughput"] == pytest.approx(256.0)
    odd = parse_vllm_result({**_summary(), "p99.9_ttft_ms": 100.0})
    assert odd.summary["TTFT"]["p99.9"] == pytest.approx(0.1)


def test_a_summary_only_result_is_compared_on_its_means_percentiles_and_throughput():
    from serveplan.validate.compare import compare

    cmp = compare(parse_vllm_result(_summary()), _cfg())
    assert not cmp.detailed and cmp.simulated_completed == 30
    got = {(r.metric, r.stat): r for r in cmp.rows}
    assert set(got) == {(m, s) for m in ("TTFT", "TPOT", "ITL", "E2E") for s in ("mean", "p50", "p90", "p99")}
    assert got[("TTFT", "mean")].measured_s == pytest.approx(0.060)
    assert all(r.simulated_s > 0 for r in cmp.rows)
    # every request has the same length: the token-weighted TPOT mean is the TPOT mean
    assert got[("ITL", "mean")].simulated_s == pytest.approx(got[("TPOT", "mean")].simulated_s, rel=1e-9)
    assert got[("E2E", "p99")].simulated_s > got[("TTFT", "p99")].simulated_s
    assert [r.metric for r in cmp.rates] == ["request throughput", "output throughput"]
    assert cmp.rates[1].unit == "tok/s" and cmp.rates[1].simulated > 0
    # ITL is over tokens: its median is a decoding step, at most the median request's TPOT (each TPOT averages
    # its steps' gaps, the prefill steps it waited through included)
    assert got[("ITL", "p50")].simulated_s <= got[("TPOT", "p50")].simulated_s + 1e-12
    assert got[("ITL", "p99")].simulated_s >= got[("ITL", "p50")].simulated_s
    assert not any("ITL" in n for n in cmp.notes)
    odd = compare(parse_vllm_result({**_summary(), "p99.9_itl_ms": 40.0}), _cfg())
    assert any("ITL p99.9 not compared" in n for n in odd.notes)
    assert "without --save-detailed" in cmp.notes[0]


def test_compare_cli_reads_a_real_result_saved_without_save_detailed(tmp_path):
    raw = json.loads(DATA.read_text())
    for field in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
        raw.pop(field)   # what vllm bench serve --save-result leaves without --save-detailed
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(raw))
    r = runner.invoke(app, ["compare", str(path), *ARGS])
    assert r.exit_code == 0, r.output
    assert "TTFT" in r.output and "request throughput" in r.output and "--save-detailed" in r.output
    d = json.loads(runner.invoke(app, ["compare", str(path), *ARGS, "--json"]).stdout)
    assert d["detailed"] is False and [(row["metric"], row["stat"]) for row in d["rows"]] == [("TTFT", "mean")]
    assert d["rows"][0]["measured_s"] == pytest.approx(raw["mean_ttft_ms"] / 1e3)


def test_a_file_with_neither_form_names_save_detailed(tmp_path):
    raw = {"date": "20250101-120000", "request_rate": 1.0, "completed": 3}
    with pytest.raises(SpecError, match="nor summary statistics.*--save-detailed"):
        parse_vllm_result(raw)
    path = tmp_path / "empty.json"
    path.write_text(json.dumps(raw))
    r = runner.invoke(app, ["compare", str(path), *ARGS])
    assert r.exit_code == 2 and "--save-detailed" in r.output
    with pytest.raises(SpecError, match="total_input_tokens=None"):
        parse_vllm_result({k: v for k, v in _summary().items() if k != "total_input_tokens"})
