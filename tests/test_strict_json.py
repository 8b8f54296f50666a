"""Every ``--json`` document, results file and page API document is strict JSON: a statistic of
nothing is ``null``, never NaN or Infinity (which ``JSON.parse``, jq and web clients refuse)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from serveplan.units import json_safe

SRC = Path(__file__).resolve().parents[1] / "src"


def _refuse(token: str) -> float:
    raise ValueError(f"not strict JSON: {token}")


def strict_loads(text: str) -> object:
    return json.loads(text, parse_constant=_refuse)


SMALL = ["-m", "llama-3.2-1b", "-H", "h100-sxm", "--tp", "1"]
COMMANDS = {
    "estimate": ["estimate", *SMALL],
    "estimate-op": ["estimate", "--op", "gemm", "--m", "16", "--n", "64", "--k", "64"],
    "simulate": ["simulate", *SMALL, "-n", "50"],
    "simulate-sessions-no-tiers": ["simulate", *SMALL, "--sessions", "5", "--turns", "3", "--rate", "1"],
    "simulate-system-prompt": ["simulate", *SMALL, "-n", "30", "--system-prompt-len", "500", "--input-len", "600",
                               "--output-len", "20"],
    "simulate-offline": ["simulate", *SMALL, "-n", "50", "--offline"],
    "simulate-closed-loop": ["simulate", *SMALL, "-n", "50", "--concurrency", "4"],
    "simulate-closed-loop-sweep": ["simulate", *SMALL, "-n", "20", "--concurrency", "1,4"],
    "simulate-one-token": ["simulate", *SMALL, "-n", "10", "--input-len", "64", "--output-len", "1"],
    "simulate-empty": ["simulate", *SMALL, "-n", "40", "--rate", "1000", "--early-stop", "--slo-ttft", "0.0001"],
    "optimize": ["optimize", "--model", "llama-3.2-1b", "--devices", "2", "--tp", "1", "--num-requests", "100"],
    "day-plan": ["day-plan", "--model", "llama-3.2-1b", "--devices", "1", "--tp", "1", "--num-requests", "100",
                 "--traffic", "azure-code-2023", "--sim-requests", "1000"],
    "offload": ["offload", "--model", "opt-6.7b", "--input-len", "128"],
    "offload-frontier": ["offload", "--model", "opt-6.7b", "--input-len", "128", "--frontier"],
    "validate": ["validate", "--source", "vllm-blog-2026-04-fp8-kvcache,mooncake-docs-vllm-store-a10", "-j", "1"],
    "models": ["models"],
    "hardware": ["hardware"],
    "engines": ["engines"],
    "hosts": ["hosts"],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_json_document_is_strict(name, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(SRC))
    out = subprocess.run([sys.executable, "-m", "serveplan", *COMMANDS[name], "--json"], capture_output=True,
                         text=True, cwd=tmp_path, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    strict_loads(out.stdout)


def test_results_files_are_strict(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(SRC))
    for argv in (["simulate", *SMALL, "-n", "40", "--sessions", "4", "--turns", "2", "--out", "sim"],
                 ["optimize", "--model", "llama-3.2-1b", "--devices", "2", "--tp", "1", "--num-requests", "100",
                  "--out", "plan", "--deploy", "deploy", "--no-progress"]):
        out = subprocess.run([sys.executable, "-m", "serveplan", *argv], capture_output=True, text=True,
                             cwd=tmp_path, env=env, timeout=300)
        assert out.returncode == 0, out.stderr
    files = [*tmp_path.glob("*/*.json"), *tmp_path.glob("*/*.jsonl")]
    assert {p.name for p in files} >= {"summary.json", "result.json", "deploy.json", "checkpoint.jsonl"}
    for p in files:
        for line in (p.read_text().splitlines() if p.suffix == ".jsonl" else [p.read_text()]):
            strict_loads(line)


def test_a_statistic_of_nothing_is_null():
    assert json_safe({"a": math.nan, "b": [math.inf, 1.0], "c": (2, -math.inf)}) == {"a": None, "b": [None, 1.0],
                                                                                     "c": [2, None]}
