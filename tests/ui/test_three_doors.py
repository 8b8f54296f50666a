"""The same question through the three doors (the CLI, the page's API and ``plan_serving``) returns
the same plan and goodput, with today's engine by default and with another named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from serveplan import plan_serving

SRC = Path(__file__).resolve().parents[2] / "src"

QUESTIONS = {
    "default engine": {"model": "llama-3.1-8b", "devices": "2", "tp": "1", "num-requests": "200"},
    "sglang": {"model": "llama-3.1-8b", "devices": "2", "tp": "1", "num-requests": "200", "engine": "sglang"},
}


def _strategies(doc: dict) -> list[tuple[str, float]]:
    return [(r["name"], round(r["goodput_rps"], 9)) for r in doc["strategies"]]


@pytest.mark.parametrize("name", sorted(QUESTIONS))
def test_cli_page_and_api_give_one_answer(server, name, tmp_path):
    fields = QUESTIONS[name]
    argv = [a for k, v in fields.items() for a in (f"--{k}", v)]
    env = dict(os.environ, PYTHONPATH=str(SRC))
    cli = subprocess.run([sys.executable, "-m", "serveplan", "optimize", *argv, "--json"], capture_output=True,
                         text=True, env=env, cwd=tmp_path, timeout=300)
    assert cli.returncode == 0, cli.stderr
    doc_cli = json.loads(cli.stdout)
    status, doc_page = server.run("plan", fields)
    assert status["state"] == "done", status
    res = plan_serving(fields["model"], devices=int(fields["devices"]), tp=fields["tp"],
                       num_requests=int(fields["num-requests"]), **({"engine": fields["engine"]}
                                                                    if "engine" in fields else {}))
    api = [(r.name, round(r.goodput_rps, 9)) for r in res.strategies]
    assert _strategies(doc_cli) == _strategies(doc_page) == api
    assert doc_cli["settings"]["engine"]["engine"] == fields.get("engine", "vllm")
    assert res.best.name == doc_cli["strategies"][0]["name"] == doc_page["strategies"][0]["name"]
