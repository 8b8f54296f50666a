"""Simulations pinned by ``test_speculative_sim.py``: with speculation off (or ``K = 0``) every
result must equal the one recorded before speculative decoding existed (commit 6c2f17b).

Regenerate the golden file only from that commit's sources::

    git archive 6c2f17b src | tar -x -C /tmp/base
    PYTHONPATH=/tmp/base/src:tests/sim python tests/sim/spec_off_cases.py tests/golden/spec_off.json
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import numpy as np

from serveplan import get_hardware, get_model, get_profile
from serveplan.sim import Workload, simulate
from serveplan.sim.config import simulation_config
from serveplan.specs.catalog import get_engine

#: (name, engine, model, hardware, fleet options, load, workload)
CASES: list[tuple[str, str, str, str, dict[str, Any], dict[str, Any], tuple[int, int, int]]] = [
    ("vllm-open", "vllm", "llama-3.1-8b", "h100-sxm", {"tp": 1}, {"rate": 20.0}, (512, 128, 300)),
    ("sglang-closed", "sglang", "llama-3.1-8b", "h100-sxm", {"tp": 1}, {"rate": None, "concurrency": 16},
     (1024, 64, 200)),
    ("trtllm-offline", "trtllm", "qwen3-8b", "h100-sxm", {"tp": 1}, {"rate": None, "offline": True}, (256, 256, 200)),
    ("bestserve-1p1d", "bestserve", "codellama-34b", "ascend-910b3", {}, {"rate": 2.0}, (512, 64, 150)),
    ("vllm-disagg", "vllm", "llama-3.1-8b", "h100-sxm", {"tp": 1}, {"rate": 10.0, "strategy": "1p1d"},
     (700, 100, 200)),
]


def run_case(case: tuple[Any, ...], **extra: Any) -> dict[str, Any]:
    """The pinned outputs of one case: summary numbers and every request's latencies."""
    name, engine, model, hw, fleet, load, (inp, out, n) = case
    load = dict(load)
    strategy = load.pop("strategy", None)
    # the golden was recorded when the engines sized their KV cache from the datasheet's memory
    # (before ``driver_memory_mib``): the same device without the driver total keeps that basis
    device = get_hardware(hw)
    if getattr(device, "driver_memory_bytes", 0.0):  # absent in the golden's own sources
        device = dataclasses.replace(device, driver_memory_bytes=0.0)
    # and when the engines were priced with BestServe's eager operator list (before
    # ``fused_operators``): the same engine without the fused list keeps that graph
    spec = get_engine(engine)
    if getattr(spec, "fused_operators", False):  # absent in the golden's own sources
        spec = dataclasses.replace(spec, fused_operators=False)
    # and before eager prefill steps paid the engine's host work per module (``prefill_host_s``)
    if getattr(spec, "prefill_host_s", None):  # absent in the golden's own sources
        spec = dataclasses.replace(spec, prefill_host_s={})
    # and before engines planned a step while the previous one ran (``overlap_scheduling``)
    if getattr(spec, "overlap_scheduling", False):  # absent in the golden's own sources
        spec = dataclasses.replace(spec, overlap_scheduling=False)
    cfg = simulation_config(engine=spec, strategy=strategy, fleet_options=fleet, model=get_model(model),
                            hardware=device, profile=get_profile(), workload=Workload.fixed(inp, out, n),
                            **load, **extra)
    res = simulate(cfg)
    rec = res.requests
    return {
        "name": name, "fleet": cfg.fleet.name, "num_completed": res.num_completed, "num_steps": res.num_steps,
        "num_preemptions": res.num_preemptions, "kv_capacity_tokens": res.kv_capacity_tokens,
        "makespan_s": res.makespan_s, "output_tokens_per_s": res.output_tokens_per_s,
        "ttft_s": [float(v) for v in np.asarray(rec.ttft)], "tpot_s": [float(v) for v in np.asarray(rec.tpot)],
        "e2e_s": [float(v) for v in np.asarray(rec.e2e)],
    }


if __name__ == "__main__":
    out = {c[0]: run_case(c) for c in CASES}
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=0)
