"""The web planner's API: the documents are the CLI's ``--json`` ones, inputs fail with the CLI's
messages, work is bounded, cached and cancellable, and the server answers only for its own host."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
TIMING = {"elapsed_s", "seconds"}  # wall-clock measurements differ between two runs


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in TIMING}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _cli(command: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    argv = shlex.split(command)
    assert argv[0] == "serveplan"
    return subprocess.run([sys.executable, "-m", "serveplan", *argv[1:]], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


CASES = {
    "plan": {"devices": "4", "tp": "2,4", "num-requests": "150", "slo-ttft": "2"},
    "day": {"model": "llama-3.1-8b", "devices": "1", "tp": "1", "num-requests": "200", "traffic": "azure-code-2023",
            "traffic-scale": "8", "sim-requests": "1000"},
    "simulate": {"num-requests": "300", "rate-sweep": "1,2", "rate": "2"},
    "step": {"model": "llama-3.1-8b", "hardware": "h100-sxm", "tp": "2", "batch": "8", "phase": "decode"},
    "offload": {"model": "opt-6.7b", "input-len": "256"},
    "frontier": {"model": "opt-6.7b", "input-len": "256"},
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_endpoint_returns_the_clis_json(server, kind, tmp_path):
    status, doc = server.run(kind, CASES[kind])
    assert status["state"] == "done", status
    cli = _cli(status["command"] + " --json", tmp_path)
    assert cli.returncode == 0, cli.stderr
    assert _strip(doc) == _strip(json.loads(cli.stdout))


BAD = [
    ("plan", {"devices": "abc"}),
    ("plan", {"slo-ttft": "-1"}),
    ("plan", {"model": "llama-9000"}),
    ("plan", {"tp": "1,x"}),
    ("day", {"traffic": "nosuch"}),
    ("day", {"policy": "sometimes"}),
    ("simulate", {"strategy": "2q1d"}),
    ("step", {"tp": "3"}),
    ("offload", {"host": "nowhere"}),
]


@pytest.mark.parametrize(("kind", "fields"), BAD, ids=[f"{k}-{'-'.join(f)}" for k, f in BAD])
def test_bad_input_gets_the_clis_message(server, kind, fields, tmp_path):
    code, body = server.request("POST", f"/api/run/{kind}", fields)
    assert code == 400, body
    assert "Traceback" not in body["error"]
    # the CLI's one-line error for the same options
    from serveplan.ui.service import PANELS

    argv = [a for k, v in fields.items() for a in (f"--{k}", v)]
    cli = _cli(shlex.join(["serveplan", PANELS[kind].command, *argv, *PANELS[kind].fixed_argv]), tmp_path)
    assert cli.returncode == 2
    assert cli.stderr.strip() == f"error: {body['error']}"
    code, checked = server.request("GET", f"/api/check/{kind}?" + "&".join(f"{k}={v}" for k, v in fields.items()))
    assert code == 400 and checked["error"] == body["error"]


def test_work_is_bounded(server):
    code, body = server.request("POST", "/api/run/plan", {"devices": "4096"})
    assert code == 400 and "limit of 64" in body["error"]
    code, body = server.request("POST", "/api/run/simulate", {"num-requests": "10000000"})
    assert code == 400 and "limit" in body["error"]
    code, body = server.request("POST", "/api/run/plan", {"no-such-field": "1"})
    assert code == 400 and "unknown field 'no-such-field'" in body["error"]


def test_results_are_cached_by_inputs(server):
    fields = {"devices": "4", "tp": "4", "num-requests": "100", "seed": "7"}
    first, doc = server.run("plan", fields)
    assert first["state"] == "done", first
    code, again = server.request("POST", "/api/run/plan", {**fields, "model": "llama-3.1-70b"})  # a default
    assert code == 200 and again["cached"] and again["job"] == first["job"] and again["state"] == "done"


def test_a_long_search_reports_progress_and_cancels(server):
    code, st = server.request("POST", "/api/run/plan", {"num-requests": "6000", "max-batch": "8,16,32",
                                                        "seed": "11"})
    assert code == 200
    deadline = time.monotonic() + 240   # a busy 2-core machine: the first strategy settles late
    while st["done"] == 0 and st["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
        _, st = server.request("GET", f"/api/jobs/{st['job']}")
    assert st["state"] == "running" and st["total"] > st["done"] > 0, st
    t0 = time.monotonic()
    code, st = server.request("DELETE", f"/api/jobs/{st['job']}")
    assert code == 200 and st["state"] == "cancelled"
    assert time.monotonic() - t0 < 2
    code, body = server.request("GET", f"/api/jobs/{st['job']}/result")
    assert code == 409


def test_serves_only_its_own_host_api_and_assets(server):
    code, _ = server.request("GET", "/api/schema", headers={"Host": "attacker.example"})
    assert code == 400
    for path in ("/docs", "/openapi.json", "/etc/passwd", "/static/../service.py"):
        code, _ = server.request("GET", path)
        assert code == 404, path
    code, js = server.request("GET", "/static/vendor/plotly.min.js")
    assert code == 200 and "plotly" in js[:2000].lower()


def test_schema_fields_are_the_clis_options(server):
    code, schema = server.request("GET", "/api/schema")
    plan = {f["name"]: f for f in schema["panels"]["plan"]["fields"]}
    assert plan["devices"]["default"] == "8" and plan["slo-tpot"]["default"] == "0.05"
    assert plan["engine"]["default"] == "vllm" and plan["slo-ttft"]["unit"] == "s"
    assert {"engine", "kv-dtype", "target-rate", "dataset", "spec-method"} <= set(plan)
    sim = {f["name"] for f in schema["panels"]["simulate"]["fields"]}
    assert {"engine", "kv-dtype", "dataset", "offline", "concurrency", "spec-method"} <= sim
    assert "codellama-34b" in schema["choices"]["model"]
