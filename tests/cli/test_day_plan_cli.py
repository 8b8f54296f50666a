"""``serveplan day-plan``: JSON contract, table, report files and one-line errors (exit code 2)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from serveplan.cli import app

runner = CliRunner()
SMALL = ("--model", "llama-3.1-8b", "--devices", "1", "--tp", "1", "--num-requests", "300", "--jobs", "1",
         "--sim-requests", "2000", "--no-progress")


def run(*args: str):
    return runner.invoke(app, ["day-plan", *args])


def test_json_on_a_step_trace_has_the_day_and_the_peak(tmp_path):
    trace = tmp_path / "step.csv"
    trace.write_text("time_s,rate_rps\n0,5\n900,60\n1800,5\n")
    r = run(*SMALL, "--traffic", str(trace), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    g = d["unit"]["goodput_rps"]
    assert [row["replicas_needed"] for row in d["intervals"]] == [max(1, -(-rate // g)) for rate in
                                                                     (5, 5, 5, 60, 60, 60, 5, 5, 5)]
    a, p = d["autoscaled"], d["peak"]
    assert a["gpu_hours"] < p["gpu_hours"] and p["peak_replicas"] == max(r["replicas_needed"] for r in d["intervals"])
    assert 0 <= a["simulation"]["attainment"] <= 1 and 0 <= p["simulation"]["attainment"] <= 1
    assert a["usd"] == pytest.approx(a["gpu_hours"] * d["price"]["usd_per_gpu_hour"])
    assert a["joules"] > 0 and d["scale_up"]["total_s"] == pytest.approx(d["scale_up"]["load_s"] + 58.0)
    assert "vllm-project/vllm#20264" in d["scale_up"]["startup_source"]
    assert d["command"].startswith("serveplan day-plan")


def test_table_and_report_files(tmp_path):
    r = run(*SMALL, "--traffic", "azure-code-2023", "--traffic-scale", "8", "--policy", "reactive",
            "--out", str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    assert "autoscaled against provisioning for the peak" in r.output and "GPU-hours" in r.output
    for name in ("day-plan.csv", "day-plan.png", "day-plan.json"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    rows = (tmp_path / "out" / "day-plan.csv").read_text().splitlines()
    assert rows[0].startswith("start_s,rate_rps,replicas_needed") and len(rows) == 1 + 11  # 57 minutes: 11 x 5


@pytest.mark.parametrize("args, words", [
    (("--traffic", "nosuch"), "traffic='nosuch' is neither a file nor a known name"),
    (("--peak", "2", "--trough", "5"), "trough=5"),
    (("--policy", "sometimes"), "policy='sometimes'"),
    (("--min-replicas", "0"), "min-replicas=0"),
    (("--interval", "abc"), "interval='abc' must be a number"),
    (("--sim-requests", "10"), "sim-requests=10"),
    (("--hardware", "l40s,a100-80g"), "a day plan scales replicas of one device type"),
])
def test_bad_input_is_one_line_and_exit_2(args, words):
    r = run(*args)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0], r.output
    assert "Traceback" not in r.output
