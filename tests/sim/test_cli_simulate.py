"""``serveplan simulate``: output contract, report files, and one-line errors with exit code 2."""

from __future__ import annotations

import csv
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
