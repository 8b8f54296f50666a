"""``serveplan hosts``: the bundled hosts of the offload planner and the KV tiers."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from serveplan.cli import app


def test_hosts_lists_every_bundled_host_with_its_tiers():
    r = CliRunner().invoke(app, ["hosts", "--json"])
    assert r.exit_code == 0, r.output
    rows = {d["name"]: d for d in json.loads(r.output)}
    assert {"flexgen-t4", "dgx-h100", "pcie4-workstation"} <= set(rows)
    assert rows["dgx-h100"]["cpu_memory_bytes"] == 256e9 and rows["dgx-h100"]["ctog_cache_bandwidth"] == 50e9


def test_engines_list_their_opt_in_communication_setups():
    r = CliRunner().invoke(app, ["engines", "--json"])
    assert r.exit_code == 0, r.output
    rows = {d["name"]: d for d in json.loads(r.output)}
    deepep = rows["sglang-0.5.23"]["comm_options"]["deepep"]
    assert deepep["overlap"] == "two-batch" and deepep["buffer"] == "auto" and deepep["buffer_tokens_per_rank"] == 128
    assert deepep["flags"] == ["--moe-a2a-backend", "deepep", "--enable-two-batch-overlap"]
    assert "comm_options" not in rows["vllm-0.33"]
    table = CliRunner().invoke(app, ["engines"])
    assert table.exit_code == 0 and "deepep" in table.output
