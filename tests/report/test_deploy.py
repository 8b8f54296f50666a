"""Launch files are written from the deployment that was simulated, for its own engine only: every
value parsed back from the files equals the deployment's, and none passes the engine's own start-up
limits (``serveplan.report.deploy.LIMITS``, each cited in the engine's source).

``data/engine_flags.json`` holds the engines' argument lists: vLLM 0.33.0 (``vllm/engine/arg_utils.py``,
``vllm/entrypoints/common/cli_args.py``), SGLang 0.5.23 (``sglang/srt/arg_groups/fields/*.py``,
``sglang/srt/server_args.py``) and NVIDIA Dynamo 1.6.1 (``dynamo/vllm/backend_args.py``), read from
their PyPI wheels by ``benchmarks/engine_flags.py``, and TensorRT-LLM's ``trtllm-serve`` options read by
hand (its 1.2 wheel is not on PyPI; the file names the revision). Commands are parsed with an
argparse parser built from those lists, so a flag an engine does not have fails the test.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from serveplan.errors import SpecError
from serveplan.estimator.api import resolve_specs
from serveplan.optimize.goodput import GoodputSettings
from serveplan.report.deploy import (
    DYNAMO_VERSION,
    LIMITS,
    SGLANG_VERSION,
    TRTLLM_VERSION,
    VLLM_VERSION,
    launch_files,
    launch_plan,
)
from serveplan.sim import SLO, Fleet, Workload
from serveplan.specs.engine import MemoryBasis

FLAGS = json.loads((Path(__file__).parent / "data" / "engine_flags.json").read_text())
REPO = Path(__file__).resolve().parents[2]


def _settings(model: str = "llama-3.1-70b", hardware: str = "h100-sxm", dtype=None, engine: str = "vllm",
              kv_dtype=None) -> GoodputSettings:
    m, hw, pr = resolve_specs(model, hardware, None)
    return GoodputSettings(model=m, hardware=hw, profile=pr, workload=Workload.fixed(2048, 256, num_requests=10),
                           slo=SLO(ttft_s=1.5, tpot_s=0.07, percentile=90), dtype=dtype, engine=engine,
                           kv_dtype=kv_dtype)


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


#: (engine, model, dtype, fleet) covering collocated and disaggregated, dense and MoE, DP attention and EP
CASES = {
    "vllm-collocated": ("vllm", "llama-3.1-70b", None, Fleet.build("2m", tp=4, max_batch=256,
                                                                   scheduler="chunked-prefill", chunk_size=8192)),
    "vllm-disaggregated": ("vllm", "llama-3.1-70b", None, Fleet.build("1p1d", tp=4, decode_tp=2, max_batch=512,
                                                                      token_budget=8192)),
    "vllm-moe-dp-ep": ("vllm", "deepseek-v3", "fp8", Fleet.build("1m", tp=1, dp=8, ep=8, max_batch=1024,
                                                                scheduler="chunked-prefill", chunk_size=8192)),
    "sglang-collocated": ("sglang", "llama-3.1-70b", None, Fleet.build("2m", tp=4, max_batch=256,
                                                                       scheduler="prefill-priority", chunk_size=8192)),
    "sglang-disaggregated": ("sglang", "deepseek-v3", "fp8", Fleet.build("1p1d", tp=1, dp=8, ep=8, max_batch=512,
                                                                         token_budget=8192)),
    "trtllm-collocated": ("trtllm", "llama-3.1-70b", "fp8", Fleet.build("1m", tp=4, max_batch=512,
                                                                        scheduler="inflight-no-evict",
                                                                        token_budget=8192)),
    "trtllm-disaggregated": ("trtllm", "llama-3.1-70b", "fp8", Fleet.build("2p1d", tp=2, decode_tp=4, max_batch=256,
                                                                           token_budget=8192)),
}


def _case(name: str):
    engine, model, dtype, fleet = CASES[name]
    hw = "h200" if model == "deepseek-v3" else "h100-sxm"
    st = _settings(model, hw, dtype=dtype, engine=engine)
    dep = st.deployment(fleet)
    return dep, launch_files(dep)


def _extra_options(plan, cmd) -> dict:
    argv = list(cmd.argv)
    name = argv[argv.index("--extra_llm_api_options") + 1]
    return yaml.safe_load(plan.files[name])


def test_flag_lists_are_the_versions_the_commands_name():
    assert (FLAGS["vllm"]["version"], FLAGS["sglang"]["version"], FLAGS["dynamo"]["version"],
            FLAGS["trtllm"]["version"]) == (VLLM_VERSION, SGLANG_VERSION, DYNAMO_VERSION, TRTLLM_VERSION)
    assert {"--tensor-parallel-size", "--max-num-seqs", "--gpu-memory-utilization"} <= set(FLAGS["vllm"]["flags"])
    assert {"--tp-size", "--max-running-requests", "--mem-fraction-static"} <= set(FLAGS["sglang"]["flags"])
    assert {"--tp_size", "--max_batch_size", "--max_num_tokens"} <= set(FLAGS["trtllm"]["flags"])
    assert "--not-a-flag" not in FLAGS["vllm"]["flags"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_launch_files_carry_exactly_the_deployment_that_was_simulated(name):
    dep, plan = _case(name)
    eng = dep.engine
    assert plan.engine == eng.engine and {c.engine for c in plan.commands} == {eng.engine}  # its own engine only
    assert [c.role for c in plan.commands] == [s.role.value for s in dep.roles]
    for cmd, setup in zip(plan.commands, dep.roles, strict=True):
        ns = _parse(cmd.engine, list(cmd.argv))
        par, b = setup.instance.parallel, setup.instance.batching
        est = setup.estimator
        assert cmd.instances == setup.count and cmd.devices_per_instance == par.num_devices
        kv_written = None
        if eng.engine == "vllm":
            assert ns.words == ["vllm", "serve", plan.model_ref]
            assert int(ns.tensor_parallel_size) == par.tp and int(ns.pipeline_parallel_size or 1) == par.pp
            assert int(ns.data_parallel_size or 1) == par.dp and ns.enable_expert_parallel == (par.ep > 1)
            # per data-parallel rank (LIMITS): the busiest rank's share of the instance's limits
            assert int(ns.max_num_seqs) == math.ceil(b.max_batch / par.dp)
            assert int(ns.max_num_batched_tokens) == math.ceil(b.token_budget / par.dp)
            assert float(ns.gpu_memory_utilization) == pytest.approx(eng.memory_fraction)
            kv_written = ns.kv_cache_dtype
            # the limits vLLM checks at start-up
            assert int(ns.max_num_batched_tokens) >= int(ns.max_num_seqs)
            if not ns.enable_chunked_prefill:
                assert int(ns.max_num_batched_tokens) >= int(ns.max_model_len)
            assert 0 < float(ns.gpu_memory_utilization) <= 1
            assert int(ns.max_model_len) <= dep.config.model.max_position_embeddings
            if setup.role.value != "collocated":
                assert json.loads(ns.kv_transfer_config)["kv_role"] == {"prefill": "kv_producer",
                                                                        "decode": "kv_consumer"}[setup.role.value]
        elif eng.engine == "sglang":
            assert ns.words == ["python", "-m", "sglang.launch_server"] and ns.model_path == plan.model_ref
            assert int(ns.tp_size) == par.tp * par.dp and int(ns.attn_dp_size or 1) == par.dp
            assert int(ns.ep_size or 1) == par.ep and int(ns.pp_size or 1) == par.pp
            assert int(ns.max_running_requests) == b.max_batch   # global in SGLang (LIMITS)
            assert int(ns.chunked_prefill_size) in (b.token_budget, -1)
            frac = eng.memory_fraction if eng.memory_fraction is not None else \
                eng.static_fraction(dep.config.hardware, tp=par.tp, pp=par.pp)
            assert float(ns.mem_fraction_static) == pytest.approx(frac, abs=1e-4)
            kv_written = ns.kv_cache_dtype
            assert int(ns.tp_size) % int(ns.attn_dp_size or 1) == 0 and 0 < float(ns.mem_fraction_static) < 1
            assert (ns.disaggregation_mode or "null") == {"collocated": "null"}.get(setup.role.value,
                                                                                    setup.role.value)
        else:
            assert ns.words == ["trtllm-serve", plan.model_ref] and ns.backend == "pytorch"
            extra = _extra_options(plan, cmd)
            assert int(ns.tp_size) == par.tp * par.dp and int(ns.pp_size) == par.pp
            assert int(ns.ep_size or 1) == par.ep and int(ns.tp_size) % int(ns.ep_size or 1) == 0
            assert int(ns.max_batch_size) == b.max_batch and int(ns.max_num_tokens) == b.token_budget
            assert eng.memory_basis is MemoryBasis.FREE
            assert float(ns.kv_cache_free_gpu_memory_fraction) == pytest.approx(eng.memory_fraction)
            assert extra["kv_cache_config"]["free_gpu_memory_fraction"] == pytest.approx(eng.memory_fraction)
            assert 0 <= extra["kv_cache_config"]["free_gpu_memory_fraction"] <= 1
            kv_written = extra["kv_cache_config"]["dtype"]
            assert kv_written in ("auto", "fp8")
            if dep.fleet.is_disaggregated:
                assert extra["cache_transceiver_config"]["backend"] == "NIXL"
                assert extra.get("disable_overlap_scheduler", False) == (setup.role.value == "prefill")
        # the KV format the simulator ran with, in the engine's spelling
        kv = est.kv_dtype.value
        fp8 = "fp8_e4m3" if eng.engine == "sglang" else "fp8"
        assert kv_written == ("auto" if kv in ("bf16", "fp16") and est.dtype.value in (kv, "fp8", "fp8_block")
                              else {"fp8": fp8}.get(kv, kv)), (kv_written, kv)
        assert cmd.planned["kv_dtype"] == kv and cmd.planned["weight_dtype"] == est.dtype.value


def test_fp8_kv_cache_is_written_in_each_engines_spelling():
    for engine, want in (("vllm", "fp8"), ("sglang", "fp8_e4m3")):
        st = _settings(engine=engine, kv_dtype="fp8")
        plan = launch_plan(Fleet.build("1m", tp=4, max_batch=128, token_budget=8192,
                                       scheduler="chunked-prefill" if engine == "vllm" else "prefill-priority",
                                       chunk_size=8192), st)
        ns = _parse(engine, list(plan.commands[0].argv))
        assert ns.kv_cache_dtype == want


def test_a_bestserve_plan_is_refused_not_swapped_for_another_engine():
    st = _settings("codellama-34b", "ascend-910b3", engine="bestserve")
    with pytest.raises(SpecError, match=r"engine='bestserve': launch files are written for vllm, sglang and trtllm"):
        launch_plan(Fleet.build("2m", tp=4, max_batch=16, prefill_max_batch=4), st)


def test_vllm_without_chunking_is_refused_when_the_budget_is_below_the_longest_request():
    st = _settings(engine="vllm")
    fleet = Fleet.build("1m", tp=4, max_batch=64, scheduler="prefill-first", token_budget=1024)
    with pytest.raises(SpecError, match=r"without chunked prefill vLLM needs --max-num-batched-tokens >= "
                                        r"--max-model-len"):
        launch_plan(fleet, st)


def test_disaggregated_vllm_prefill_instances_keep_the_engines_token_budget():
    # not a million tokens: vLLM allocates buffers of max-num-batched-tokens at start-up
    dep, plan = _case("vllm-disaggregated")
    for cmd in plan.commands:
        assert int(_parse("vllm", list(cmd.argv)).max_num_batched_tokens) == 8192


def test_one_launch_file_per_node_and_no_instance_split_unless_larger_than_a_node():
    dep, plan = _case("trtllm-disaggregated")   # 2 x TP2 prefill + 1 x TP4 decode: one 8-device node
    assert set(plan.scripts()) == {"launch-node0.sh"}
    engine, model, dtype, _ = CASES["vllm-collocated"]
    st = _settings(model, "h100-sxm", engine=engine)
    big = launch_plan(Fleet.build("3m", tp=4, max_batch=256, scheduler="chunked-prefill", chunk_size=8192), st)
    scripts = big.scripts()
    assert set(scripts) == {"launch-node0.sh", "launch-node1.sh"}   # 12 devices on 8-device nodes
    assert [(p.node, p.first_device) for p in big.placements()] == [(0, 0), (0, 4), (1, 0)]
    assert "CUDA_VISIBLE_DEVICES=4,5,6,7" in scripts["launch-node0.sh"] and "--port 8001" in scripts["launch-node0.sh"]
    assert "NODE0_ADDR" in scripts["launch-node1.sh"]
    # an instance larger than a node starts on each of its nodes with the engine's multi-node flags
    wide = launch_plan(Fleet.build("1m", tp=16, max_batch=256, scheduler="chunked-prefill", chunk_size=8192),
                       _settings("llama-3.1-405b", "h100-sxm", dtype="fp8"))
    nodes = wide.scripts()
    assert set(nodes) == {"launch-node0.sh", "launch-node1.sh"}
    assert "--node-rank 1" in nodes["launch-node1.sh"] and "--nnodes 2" in nodes["launch-node0.sh"]


def test_disaggregated_plans_get_their_engines_front_door():
    _, vllm = _case("vllm-disaggregated")
    doc = yaml.safe_load(vllm.files["dynamo-disagg.yaml"])
    workers = {v["subComponentType"]: v for v in doc["spec"]["services"].values() if v["componentType"] == "worker"}
    assert workers["prefill"]["replicas"] == 1 and workers["decode"]["replicas"] == 1
    for role, w in workers.items():
        ns = _parse("dynamo", w["extraPodSpec"]["mainContainer"]["args"], extra="vllm")
        assert ns.disaggregation_mode == role
    _, sglang = _case("sglang-disaggregated")
    assert sglang.router is not None and "--pd-disaggregation" in sglang.router
    _, trt = _case("trtllm-disaggregated")
    cfg = yaml.safe_load(trt.files["disagg-config.yml"])
    assert cfg["context_servers"]["num_instances"] == len(cfg["context_servers"]["urls"]) == 2
    assert cfg["generation_servers"]["num_instances"] == len(cfg["generation_servers"]["urls"]) == 1


def test_write_puts_scripts_files_and_json(tmp_path):
    _, plan = _case("trtllm-disaggregated")
    names = {p.name for p in plan.write(tmp_path)}
    assert names == {"launch-node0.sh", "extra-llm-api-config-prefill.yml", "extra-llm-api-config-decode.yml",
                     "disagg-config.yml", "deploy.json"}
    doc = json.loads((tmp_path / "deploy.json").read_text())
    assert doc["strategy"] == plan.strategy and doc["limits"] == LIMITS["trtllm"]


def test_optimize_deploy_prints_and_writes_the_best_plan(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "serveplan", "optimize", "--model", "llama-3.1-8b", "--tp", "1", "--devices", "2",
         "--no-disaggregated", "--num-requests", "60", "--no-progress", "--jobs", "1", "--deploy",
         str(tmp_path / "deploy")], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"vLLM {VLLM_VERSION}" in out.stdout and "vllm serve meta-llama/Llama-3.1-8B" in out.stdout
    assert (tmp_path / "deploy" / "launch-node0.sh").exists()
