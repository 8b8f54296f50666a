"""``serveplan offload``: output contract, exit codes 2 (bad input) and 3 (infeasible)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.offload.policy import parse_policy
from serveplan.offload.search import evaluate_policy

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["offload", *args])


def test_default_search_prints_placement_memory_and_terms():
    r = run("--model", "opt-175b", "--no-compress")
    assert r.exit_code == 0, r.output
    for word in ("weights", "KV cache", "activations", "token/s", "Peak memory", "ctog", "dtoc", "comp", "disk"):
        assert word in r.output


def test_json_has_throughput_latency_and_policy_fields():
    r = run("--model", "opt-30b", "--policy", "48x3,20,80,0,100,0,100", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["throughput_tokens_per_s"] > 0 and d["latency_s"] > 0
    for k in ("gpu_batch_size", "num_gpu_batches", "wg", "wc", "wd", "cg", "cc", "cd", "hg", "hc", "hd",
              "compress", "cpu_attention"):
        assert k in d["policy"]
    assert (d["policy"]["gpu_batch_size"], d["policy"]["num_gpu_batches"], d["policy"]["wc"]) == (48, 3, 80)
    # the CLI renders the same object the API returns
    api = evaluate_policy("opt-30b", parse_policy("48x3,20,80,0,100,0,100"))
    assert d["throughput_tokens_per_s"] == pytest.approx(api.throughput_tokens_per_s)


@pytest.mark.parametrize("policy, field", [
    ("48x3,20,90,0,100,0,100", "wg+wc"),
    ("48x3,20,-5,0,100,0,100", "wc=-5"),
    ("48by3", "policy '48by3'"),
])
def test_bad_policy_exits_2_with_one_line_naming_the_field(policy, field):
    r = run("--policy", policy)
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in r.output


def test_model_too_big_exits_3_with_bytes_per_tier():
    r = run("--model", "deepseek-v3", "--host", "flexgen-3090")
    assert r.exit_code == 3
    assert "infeasible" in r.output and "GPU" in r.output and "CPU" in r.output and "disk" in r.output


def test_unknown_host_exits_2():
    r = run("--host", "flexgen-t5")
    assert r.exit_code == 2 and "did you mean 'flexgen-t4'" in r.output


def test_frontier_writes_table_json_and_plot(tmp_path):
    r = run("--model", "opt-175b", "--frontier", "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert "frontier" in r.output.lower()
    assert (tmp_path / "frontier.png").stat().st_size > 1000
    pts = json.loads((tmp_path / "frontier.json").read_text())["points"]
    assert pts and all(a["latency_s"] <= b["latency_s"] for a, b in zip(pts, pts[1:], strict=False))


def test_memory_headroom_flag_is_shown_and_bad_values_exit_2():
    ok = runner.invoke(app, ["offload", "--model", "opt-6.7b", "--no-compress", "--memory-headroom", "0.1"])
    assert ok.exit_code == 0, ok.output
    assert "memory headroom: 10% of every tier kept free" in ok.output
    bad = runner.invoke(app, ["offload", "--memory-headroom", "1.5"])
    assert bad.exit_code == 2
    assert "memory_headroom=1.5" in bad.output and len(bad.output.strip().splitlines()) == 1
