"""What a newcomer meets in the first hour, each row of that table a check: flags a command does not
use are refused, every header states the devices, SGLang's way of counting a DP-attention layout, a
healthy bare demo, no online SLO verdict for offline runs, tables at 80 columns, sessions within the
context, a memory fraction and an NVLink domain stated without writing files, and a Ray run of its own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from serveplan.cli import app
from serveplan.sim.sessions import session_workload

runner = CliRunner()
SRC = Path(__file__).resolve().parents[2] / "src"


def _cli(*args: str, env: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=str(SRC), **(env or {}))
    return subprocess.run([sys.executable, "-m", "serveplan", *args], capture_output=True, text=True, env=e,
                          timeout=timeout)


def test_a_flag_the_command_does_not_use_is_refused():
    r = runner.invoke(app, ["estimate", "--op", "gemm", "--m", "16", "--n", "64", "--k", "64", "--engine", "sglang"])
    assert r.exit_code == 2 and "--engine would be ignored" in r.output
    r = runner.invoke(app, ["estimate", "--m", "16"])   # an operator's shape without --op
    assert r.exit_code == 2 and "--m shape one operator and need --op" in r.output


def test_every_header_states_the_devices_and_sglangs_dp_attention_counts_as_sglang_does():
    base = ["simulate", "--model", "deepseek-v2-lite", "--hardware", "h100-sxm", "-n", "60", "--no-progress"]
    wide = runner.invoke(app, [*base, "--tp", "8", "--dp", "8", "--ep", "8"])
    assert wide.exit_code == 0, wide.output
    assert "on 64 x h100-sxm" in wide.output and "tp8-dp8-ep8" in wide.output
    sg = runner.invoke(app, [*base, "--engine", "sglang", "--tp", "8", "--dp", "8", "--ep", "8",
                             "--enable-dp-attention"])
    assert sg.exit_code == 0, sg.output
    assert "on 8 x h100-sxm" in sg.output and "tp1-dp8-ep8" in sg.output
    bad = runner.invoke(app, [*base, "--tp", "6", "--dp", "4", "--enable-dp-attention"])
    assert bad.exit_code == 2 and "must be a multiple of dp=4" in bad.output


def test_a_bare_simulate_shows_a_healthy_system():
    r = runner.invoke(app, ["simulate", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert not d["overloaded"] and d["slo_attainment"] >= 0.99 and d["num_completed"] == d["num_requests"]


def test_offline_and_closed_loop_runs_judge_no_online_slo():
    for load in (["--offline"], ["--concurrency", "4"]):
        r = runner.invoke(app, ["simulate", "--model", "llama-3.2-1b", "--tp", "1", "-n", "40", "--no-progress",
                                *load])
        assert r.exit_code == 0, r.output
        text = " ".join(r.output.split())
        assert "no SLO judged" in text and "met by" not in text


def test_tables_keep_the_strategy_name_whole_at_80_columns():
    r = _cli("optimize", "--model", "llama-3.1-8b", "--devices", "4", "--tp", "1,2", "--num-requests", "200",
             "--no-progress", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    names = re.findall(r"\b\d+(?:m|p\d+d)-tp[\w/.-]+", r.stdout)
    assert names and all("…" not in n for n in names)
    table = [ln for ln in r.stdout.splitlines() if ln.startswith(("┃", "│", "┏", "└"))]
    assert table and max(len(ln) for ln in table) <= 80
    assert "tokens..." not in r.stdout and "tokens…" not in r.stdout


def test_sessions_keep_within_the_context_by_dropping_their_oldest_turns():
    wl = session_workload(50, 8, seed=1, max_context=8192)
    assert int(np.max(wl.input_lengths + wl.output_lengths)) <= 8192
    assert wl.dropped_turns > 0 and "dropped older turns" in wl.name
    free = session_workload(50, 8, seed=1)
    assert int(np.max(free.input_lengths + free.output_lengths)) > 8192
    # the conversation keeps its newest turns: a kept turn's prompt ends with the same input as before
    assert np.array_equal(wl.output_lengths, free.output_lengths)
    r = runner.invoke(app, ["simulate", "--model", "llama-2-7b", "--tp", "1", "--sessions", "20", "--turns", "8",
                            "--rate", "0.5", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "turns dropped older turns to fit the 4,096-token context" in " ".join(r.output.split())


def test_the_engines_memory_fraction_is_an_option_and_reaches_the_launch_files(tmp_path):
    base = ["simulate", "--model", "llama-3.1-8b", "--tp", "1", "-n", "40", "--json"]
    lo = json.loads(runner.invoke(app, [*base, "--memory-fraction", "0.6"]).stdout)
    hi = json.loads(runner.invoke(app, base).stdout)
    assert lo["kv_capacity_tokens"]["collocated"] < hi["kv_capacity_tokens"]["collocated"]
    r = runner.invoke(app, ["optimize", "--model", "llama-3.1-8b", "--devices", "1", "--tp", "1", "--num-requests",
                            "100", "--memory-fraction", "0.6", "--json", "--no-disaggregated"])
    assert r.exit_code == 0, r.output
    argv = json.loads(r.stdout)["deploy"]["commands"][0]["argv"]
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.6"


def test_an_nvlink_domain_can_be_stated():
    base = ["simulate", "--model", "llama-3.1-405b", "--dtype", "fp8", "--hardware", "h100-sxm", "--tp", "16", "-n",
            "20", "--json"]
    apart = json.loads(runner.invoke(app, base).stdout)
    shared = json.loads(runner.invoke(app, [*base, "--nvlink-domain", "16"]).stdout)
    # TP 16 over two 8-GPU nodes: its all-reduces cross the inter-node link unless one NVLink domain holds it
    assert shared["tpot_s"]["mean"] < apart["tpot_s"]["mean"]


@pytest.mark.slow
@pytest.mark.ray
def test_a_ray_run_without_an_address_starts_its_own_instance():
    pytest.importorskip("ray")
    r = _cli("optimize", "--engine", "bestserve", "--model", "codellama-34b", "--hardware", "ascend-910b3",
             "--devices", "4", "--tp", "4", "--num-requests", "200", "--exhaustive", "--backend", "ray", "--jobs", "2",
             "--no-progress", env={"RAY_ADDRESS": "127.0.0.1:1"})   # a cluster Ray last recorded, gone
    assert r.returncode == 0, r.stderr
