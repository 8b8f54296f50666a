"""``serveplan compare``: a hand-made vLLM serving-benchmark result against the simulator."""

from __future__ import annotations

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
