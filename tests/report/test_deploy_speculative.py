"""Launch commands of a plan with speculative decoding (flags checked against the engines' lists)."""

from __future__ import annotations

import json

import pytest
from test_deploy import _parse, _settings

from serveplan.report.deploy import launch_plan as deploy_plan
from serveplan.sim import Fleet
from serveplan.specs.speculative import SpecDecodeConfig


@pytest.mark.parametrize("spec, vllm_method, sglang_algo", [
    (SpecDecodeConfig(method="eagle", num_tokens=3), "eagle3", "EAGLE3"),
    (SpecDecodeConfig(method="mtp", num_tokens=2), "mtp", "NEXTN"),
    (SpecDecodeConfig(method="ngram", num_tokens=4), "ngram", "NGRAM"),
    (SpecDecodeConfig(method="draft", num_tokens=4, draft_model="llama-3.2-1b"), "draft_model", "STANDALONE"),
])
def test_speculation_reaches_both_engines(spec, vllm_method, sglang_algo):
    model = "deepseek-v3" if spec.method.value == "mtp" else "llama-3.1-8b"
    fleet = Fleet.build("1p1d", tp=8 if model == "deepseek-v3" else 1, max_batch=64, prefill_max_batch=4, spec=spec)
    plans = [deploy_plan(fleet, _settings(model, "h200", dtype="fp8" if model == "deepseek-v3" else None,
                                          engine=engine)) for engine in ("vllm", "sglang")]
    assert [p.engine for p in plans] == ["vllm", "sglang"]
    for cmd in (c for p in plans for c in p.commands):
        ns = _parse(cmd.engine, list(cmd.argv))
        if cmd.role == "prefill":  # prompts only: no drafting
            assert not (getattr(ns, "speculative_config", None) or getattr(ns, "speculative_algorithm", None))
        elif cmd.engine == "vllm":
            cfg = json.loads(ns.speculative_config)
            assert cfg["method"] == vllm_method and cfg["num_speculative_tokens"] == spec.k
            if spec.method.value == "draft":
                assert cfg["model"] == "meta-llama/Llama-3.2-1B"
        else:
            assert ns.speculative_algorithm == sglang_algo
            assert int(ns.speculative_num_steps) == spec.k and int(ns.speculative_num_draft_tokens) == spec.k + 1
    if spec.method.value == "eagle":
        assert all(any("EAGLE-3 head" in n for n in p.notes) for p in plans)
