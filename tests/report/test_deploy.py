"""Deploy output: every flag we emit is an option of the engine release the command names.

``data/engine_flags.json`` holds the engines' argument lists, read from their released source by
``benchmarks/engine_flags.py``: vLLM 0.33.0 (``vllm/engine/arg_utils.py``,
``vllm/entrypoints/common/cli_args.py``), SGLang 0.5.23 (``sglang/srt/arg_groups/fields/*.py``,
``sglang/srt/server_args.py``) and NVIDIA Dynamo 1.6.1 (``dynamo/vllm/backend_args.py``), all wheels
from PyPI. The commands are parsed with an argparse parser built from those lists.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from serveplan.estimator.api import resolve_specs
from serveplan.optimize.goodput import GoodputSettings
from serveplan.report.deploy import DYNAMO_VERSION, SGLANG_VERSION, VLLM_VERSION, deploy_plan
from serveplan.sim import SLO, Fleet, Workload

FLAGS = json.loads((Path(__file__).parent / "data" / "engine_flags.json").read_text())
REPO = Path(__file__).resolve().parents[2]


def _settings(model: str = "codellama-34b", hardware: str = "ascend-910b3", dtype=None) -> GoodputSettings:
    m, hw, pr = resolve_specs(model, hardware, None)
    return GoodputSettings(model=m, hardware=hw, profile=pr, workload=Workload.fixed(2048, 64, num_requests=10),
                           slo=SLO(ttft_s=1.5, tpot_s=0.07, percentile=90), dtype=dtype)


CASES = {
    "collocated-prefill-first": (Fleet.build("2m", tp=4, max_batch=16, prefill_max_batch=4), _settings()),
    "collocated-chunked": (Fleet.build("1m", tp=8, max_batch=32, scheduler="chunked-prefill", chunk_size=1024),
                           _settings()),
    "disaggregated-mixed-tp": (Fleet.build("2p1d", tp=2, decode_tp=4, max_batch=16, prefill_max_batch=4),
                               _settings()),
    "moe-fp8-pp-dp-ep": (Fleet.build("1p1d", tp=4, pp=2, dp=2, ep=8, max_batch=64, prefill_max_batch=2),
                         _settings("deepseek-v3", "h200", dtype="fp8")),
}


def _fields(fleet: Fleet, role: str) -> tuple[int, int, int, int, int, int]:
    inst = fleet.instance(role)
    p, b = inst.parallel, inst.batching
    return p.tp, p.pp, p.dp, p.ep, b.max_batch, b.max_prompts


def _parser(engine: str, extra: str | None = None) -> argparse.ArgumentParser:
    """argparse over the engine's option list: switches take no value, every other option one."""
    p = argparse.ArgumentParser(prog=engine, add_help=False, allow_abbrev=False)
    seen = set()
    for name in (engine, extra) if extra else (engine,):
        data = FLAGS[name]
        switches = set(data["boolean"]) | {"--no-" + f[2:] for f in data["boolean"]}
        for flag in data["flags"]:
            if flag in seen or not flag.startswith("--"):
                continue
            seen.add(flag)
            choices = data.get("choices", {}).get(flag)
            if flag in switches:
                p.add_argument(flag, action="store_true")
            else:
                p.add_argument(flag, choices=choices)
    return p


def _parse(engine: str, argv: list[str], extra: str | None = None) -> argparse.Namespace:
    """Parse the options of ``argv``; the words before the first option land in ``ns.words``."""
    head = next((i for i, a in enumerate(argv) if a.startswith("--")), len(argv))
    try:
        ns, unknown = _parser(engine, extra).parse_known_args(argv[head:])
        ns.words = argv[:head]
    except SystemExit:  # argparse reports a bad choice or a missing value on stderr
        pytest.fail(f"{engine} {FLAGS[engine]['version']} rejects {argv}")
    assert not unknown, f"not options of {engine} {FLAGS[engine]['version']}: {unknown}"
    return ns


def test_flag_lists_are_the_versions_the_commands_name():
    assert (FLAGS["vllm"]["version"], FLAGS["sglang"]["version"], FLAGS["dynamo"]["version"]) == (
        VLLM_VERSION, SGLANG_VERSION, DYNAMO_VERSION)
    # the lists are the real ones: long-standing options are there, ours among them
    assert {"--tensor-parallel-size", "--max-num-seqs", "--gpu-memory-utilization"} <= set(FLAGS["vllm"]["flags"])
    assert {"--tp-size", "--max-running-requests", "--mem-fraction-static"} <= set(FLAGS["sglang"]["flags"])
    assert "--not-a-flag" not in FLAGS["vllm"]["flags"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_emitted_flag_parses_for_the_targeted_version(case):
    cand, st = CASES[case]
    dep = deploy_plan(cand, st)
    assert {c.engine for c in dep.commands} == {"vllm", "sglang"}
    for cmd in dep.commands:
        assert cmd.version == FLAGS[cmd.engine]["version"]
        assert cmd.flags(), cmd
        ns = _parse(cmd.engine, list(cmd.argv))
        tp, pp, dp, ep, max_batch, _ = _fields(cand, cmd.role)
        if cmd.engine == "vllm":
            assert ns.words == ["vllm", "serve", dep.model_ref]
            assert int(ns.tensor_parallel_size) == tp
            assert int(ns.pipeline_parallel_size or 1) == pp
            assert int(ns.data_parallel_size or 1) == dp
            assert ns.enable_expert_parallel == (ep > 1)
            assert int(ns.max_num_seqs) == max_batch
            assert ns.enable_chunked_prefill == (cand.scheduler == "chunked-prefill")
            assert int(ns.max_num_batched_tokens) >= (1 if ns.enable_chunked_prefill else int(ns.max_model_len))
            assert 0 < float(ns.gpu_memory_utilization) <= 1
            if cmd.role != "collocated":
                assert json.loads(ns.kv_transfer_config)["kv_role"] == {"prefill": "kv_producer",
                                                                        "decode": "kv_consumer"}[cmd.role]
        else:
            assert ns.words == ["python", "-m", "sglang.launch_server"]
            assert ns.model_path == dep.model_ref
            assert int(ns.tp_size) == tp * dp
            assert int(ns.max_running_requests) == max_batch
            assert (ns.disaggregation_mode or "null") == {"collocated": "null"}.get(cmd.role, cmd.role)
        assert cmd.devices_per_instance * cmd.instances <= cand.num_devices


def test_fp8_weights_and_kv_map_to_each_engines_spelling():
    cand, st = CASES["moe-fp8-pp-dp-ep"]
    dep = deploy_plan(cand, st)
    v = _parse("vllm", list(dep.for_engine("vllm")[0].argv))
    s = _parse("sglang", list(dep.for_engine("sglang")[0].argv))
    assert v.quantization == "fp8" and s.quantization == "fp8"
    assert v.kv_cache_dtype in FLAGS["vllm"]["choices"]["--kv-cache-dtype"]
    assert s.kv_cache_dtype in FLAGS["sglang"]["choices"]["--kv-cache-dtype"]
    assert int(s.ep_size) == 8 and int(s.attn_dp_size) == 2 and int(s.pp_size) == 2


def test_disaggregated_plan_gets_a_dynamo_graph_with_its_pools():
    cand, st = CASES["disaggregated-mixed-tp"]
    dep = deploy_plan(cand, st)
    doc = yaml.safe_load(dep.files["dynamo-disagg.yaml"])
    assert doc["kind"] == "DynamoGraphDeployment"
    workers = {k: v for k, v in doc["spec"]["services"].items() if v["componentType"] == "worker"}
    by_role = {v["subComponentType"]: v for v in workers.values()}
    assert by_role["prefill"]["replicas"] == cand.strategy.num_prefill
    assert by_role["decode"]["replicas"] == cand.strategy.num_decode
    assert sum(int(w["resources"]["limits"]["gpu"]) * w["replicas"] for w in workers.values()) == cand.num_devices
    for role, w in by_role.items():
        c = w["extraPodSpec"]["mainContainer"]
        assert c["command"] == ["python3", "-m", "dynamo.vllm"]
        ns = _parse("dynamo", c["args"], extra="vllm")  # the worker takes vLLM's engine options too
        assert ns.disaggregation_mode == role
    assert "dynamo-disagg.yaml" not in deploy_plan(*CASES["collocated-prefill-first"]).files


def test_instances_are_packed_onto_nodes_without_sharing_devices():
    cand, st = CASES["collocated-prefill-first"]  # 2 x TP4 on 8-device nodes: devices 0-3 and 4-7 of node 0
    dep = deploy_plan(cand, st)
    places = [(node, first, port) for _, _, node, first, port in dep.placements("vllm")]
    assert places == [(0, 0, 8000), (0, 4, 8001)]
    script = dep.scripts()["launch-vllm.sh"]
    assert "ASCEND_RT_VISIBLE_DEVICES=4,5,6,7" in script and "--port 8001" in script


def test_prefill_and_decode_instances_get_their_own_devices_and_ports():
    dep = deploy_plan(*CASES["disaggregated-mixed-tp"])  # 2 x TP2 prefill + 1 x TP4 decode on one node
    places = [(c.role, node, first, port) for c, _, node, first, port in dep.placements("sglang")]
    assert places == [("prefill", 0, 0, 30000), ("prefill", 0, 2, 30001), ("decode", 0, 4, 30002)]


def test_write_puts_scripts_yaml_and_json(tmp_path):
    dep = deploy_plan(*CASES["disaggregated-mixed-tp"])
    names = {p.name for p in dep.write(tmp_path)}
    assert names == {"launch-vllm.sh", "launch-sglang.sh", "dynamo-disagg.yaml", "deploy.json"}
    assert json.loads((tmp_path / "deploy.json").read_text())["strategy"] == dep.strategy


def test_optimize_deploy_prints_and_writes_the_best_plan(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "serveplan", "optimize", "--tp", "4", "--devices", "4", "--no-disaggregated",
         "--num-requests", "60", "--no-progress", "--jobs", "1", "--deploy", str(tmp_path / "deploy")],
        capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"# vLLM {VLLM_VERSION}" in out.stdout and "vllm serve codellama/CodeLlama-34b-Instruct-hf" in out.stdout
    assert (tmp_path / "deploy" / "launch-vllm.sh").exists()
