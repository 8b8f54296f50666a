"""Engine data files: every bundled engine loads, and the defaults are the ones read from the
engines' own source (cited in each data file)."""

from __future__ import annotations

import pytest

from serveplan.errors import SpecError
from serveplan.sim.schedulers import get_scheduler, policy_options
from serveplan.specs.catalog import get_engine, get_hardware, list_engines
from serveplan.specs.engine import MemoryBasis


@pytest.mark.parametrize("name", list_engines())
def test_every_engine_loads_with_a_source_and_cites_its_limits(name: str) -> None:
    e = get_engine(name)
    assert e.source and e.version
    assert e.tiers
    if e.engine != "bestserve":
        assert "tiers" in e.cites and e.cites["tiers"]
    for hw in ("h100-sxm", "a100-80g", "l40s", "b200"):
        lim = e.limits(get_hardware(hw))
        assert lim.max_num_seqs is None or lim.max_num_seqs >= 1


def test_family_name_picks_the_default_version() -> None:
    assert get_engine("vllm").name == "vllm-0.33"
    assert get_engine("sglang").name == "sglang-0.5.23"
    assert get_engine("trtllm").name == "trtllm-1.2"


def test_unknown_engine_names_the_options() -> None:
    with pytest.raises(SpecError, match=r"unknown engine 'vlm'.*did you mean 'vllm'"):
        get_engine("vlm")


def test_vllm_v1_limits_depend_on_device_memory_and_a100() -> None:
    # vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (v0.33.0): >= 160 GiB the largest,
    # >= 70 GiB and not A100 the large ones, else the small ones
    e = get_engine("vllm")
    b200 = e.limits(get_hardware("b200"))  # 180 GB = 167.6 GiB
    assert (b200.max_num_seqs, b200.token_budget) == (1024, 16384)
    h100 = e.limits(get_hardware("h100-sxm"))
    assert (h100.max_num_seqs, h100.token_budget) == (1024, 8192)
    assert e.limits(get_hardware("h100-sxm"), offline=True).token_budget == 16384
    a100 = e.limits(get_hardware("a100-80g"))  # 80 GB but an A100: the small defaults
    assert (a100.max_num_seqs, a100.token_budget) == (256, 2048)
    assert e.limits(get_hardware("a100-80g"), offline=True).token_budget == 8192
    assert e.scheduler == "chunked-prefill" and e.kv_block_size == 16
    assert e.memory_basis is MemoryBasis.TOTAL and e.memory_fraction == 0.92  # CacheConfig, v0.33.0


def test_vllm_0_11_is_kept_with_its_own_defaults() -> None:
    # v0.11.0: no >= 160 GiB tier (B200 gets the H100 defaults) and gpu_memory_utilization 0.9
    e = get_engine("vllm-0.11")
    assert e.limits(get_hardware("b200")).token_budget == 8192
    assert e.memory_fraction == 0.9


def test_sglang_chunk_by_memory_and_static_fraction() -> None:
    # server_args.py _handle_gpu_memory_settings: 8192 below 160 GiB (H100, H200), 16384 above (B200)
    e = get_engine("sglang")
    assert e.limits(get_hardware("h100-sxm")).chunk_size == 8192
    assert e.limits(get_hardware("h200")).chunk_size == 8192
    assert e.limits(get_hardware("b200")).chunk_size == 16384
    assert e.limits(get_hardware("l40s")).chunk_size == 4096  # 48 GB: the < 60 GiB row
    opts = policy_options(e)
    assert not opts.enable_mixed_chunk and opts.max_prefill_tokens == 16384
    assert get_scheduler(e.scheduler).admission == "reserve-ratio"
    # SGLang reads the GPU's memory from the driver (get_device_memory_capacity: 81,559 MiB on an H100
    # 80GB, nvidia-smi), not the datasheet's 80e9 B. TP 1: reserved = 512 + 8192 x 1.5 + 256 x 2 +
    # 1/8 x 1024 = 13,440 MiB, above the 10 GiB floor -> (81,559 - 13,440) / 81,559 = 0.835 (rounded
    # to 3 digits as SGLang does)
    assert e.static_fraction(get_hardware("h100-sxm"), tp=1) == pytest.approx(0.835, abs=1e-3)
    # TP 8: 512 + 12,288 + 512 x 2 + 8/8 x 1024 = 14,848 MiB -> (81,559 - 14,848) / 81,559 = 0.818
    assert e.static_fraction(get_hardware("h100-sxm"), tp=8) == pytest.approx(0.818, abs=1e-3)


def test_trtllm_reserves_whole_sequences_and_never_chunks() -> None:
    e = get_engine("trtllm")
    lim = e.limits(get_hardware("h100-sxm"))
    assert (lim.max_num_seqs, lim.token_budget) == (2048, 8192)
    assert get_scheduler(e.scheduler).admission == "full" and not e.chunked_prefill and e.kv_block_size == 32
    # free_gpu_memory_fraction 0.9 of what weights (40 GB) and activations (2 GB) leave of the
    # 81,559 MiB = 85.52 GB the driver reports: KV = 0.9 x 43.52 GB = 39.17 GB -> share of the
    # catalog's 80 GB (42 + 39.17) / 80 = 1.0146
    util = e.memory_utilization(get_hardware("h100-sxm"), weights_bytes=40e9, activation_bytes=2e9)
    assert util == pytest.approx((42e9 + 0.9 * (81559 * 2**20 - 42e9)) / 80e9)


def test_bestserve_engine_keeps_the_paper_testbed() -> None:
    e = get_engine("bestserve")
    lim = e.limits(get_hardware("ascend-910b3"))
    assert (lim.max_num_seqs, lim.prefill_max_batch, e.default_tp) == (16, 4, 4)
    assert e.scheduler == "prefill-first" and lim.token_budget is None


def test_sglang_0_5_23_running_requests_follow_capacity_over_context():
    # mem_cache/kv_cache_configurator.py resolve_max_num_reqs (v0.5.23):
    # min(clamp(capacity / context_len x 512, 2048, 4096), capacity // 2)
    e = get_engine("sglang-0.5.23")
    lim = e.limits(get_hardware("h100-sxm"))
    assert e.max_num_seqs_for(lim, 500_000, context_len=131_072) == 2048     # 1953 -> floor 2048
    assert e.max_num_seqs_for(lim, 500_000, context_len=8_192) == 4096       # 31250 -> cap 4096
    assert e.max_num_seqs_for(lim, 3_000, context_len=131_072) == 1500       # capacity // 2 binds
    assert e.max_num_seqs_for(lim, 1_000_000, context_len=131_072) == 3906   # inside the clamp
    # 0.5.5: min(capacity // 2, 4096), no context term
    assert get_engine("sglang-0.5").max_num_seqs_for(lim, 500_000, context_len=131_072) == 4096


def test_sglang_0_5_23_chunks_4096_on_24_gb_gpus():
    # arg_groups/memory_hook.py (v0.5.23): the 20-35 GiB row (A10, 4090, 5090) chunks at 4096 (0.5.5: 2048)
    assert get_engine("sglang-0.5.23").limits(get_hardware("l4")).chunk_size == 4096
    assert get_engine("sglang-0.5").limits(get_hardware("l4")).chunk_size == 2048


def test_engines_size_the_kv_cache_from_the_memory_the_driver_reports() -> None:
    # nvidia-smi totals (MiB): H100 80GB HBM3 81,559; H200 143,771; B200 183,359 -- the memory that
    # torch.cuda.mem_get_info returns and that vLLM (gpu_memory_utilization x total), SGLang
    # (mem_fraction_static x the memory free at start) and TensorRT-LLM (free_gpu_memory_fraction x the
    # memory free after loading) apply their fractions to
    for hw, mib in (("h100-sxm", 81559), ("h200", 143771), ("b200", 183359)):
        assert get_hardware(hw).engine_memory_bytes == mib * 2**20
    vllm = get_engine("vllm-0.11")
    h100 = get_hardware("h100-sxm")
    assert vllm.memory_utilization(h100, weights_bytes=0, activation_bytes=0) * 80e9 == pytest.approx(
        0.9 * 81559 * 2**20)


def test_memory_rule_names_each_engines_own_setting() -> None:
    # the setting a user would pass to the engine, with the value the share above was computed from:
    # H100 driver total 81,559 MiB = 85.5 GB; SGLang's fraction is its static_fraction (the reserve rule of
    # ServerArgs._handle_gpu_memory_settings), printed as the engine would take it
    h100 = get_hardware("h100-sxm")
    assert get_engine("vllm-0.11").memory_rule(h100) == "gpu_memory_utilization 0.9 x 85.5 GB reported"
    assert get_engine("sglang-0.5.23").memory_rule(h100) == (
        f"mem_fraction_static {get_engine('sglang-0.5.23').static_fraction(h100):g} x 85.5 GB reported")
    assert get_engine("trtllm-1.2").memory_rule(h100).startswith("free_gpu_memory_fraction 0.9 ")


def test_qwen3_32b_bf16_on_one_h100_under_sglang_keeps_gigabytes_of_kv() -> None:
    # aiconfigurator's silicon row qwen3_32b h100 sglang 0.5.8 tp1 measured 1024/128 at 16 clients;
    # with the datasheet's 80e9 B the rule left 0.40 GB (1,509 tokens, one request). SGLang
    # (model_runner.profile_max_num_token, v0.5.x): KV = free after loading - total x (1 -
    # mem_fraction_static) = 0.835 x 85.52 GB - 65.52 GB of weights = 5.89 GB, 22,400 tokens of 256 KiB
    from serveplan import get_model, get_profile
    from serveplan.sim.serving import engine_estimator
    from serveplan.specs.parallel import ParallelConfig

    h100 = get_hardware("h100-sxm")
    est, _, _ = engine_estimator(get_engine("sglang-0.5"), get_model("qwen3-32b"), h100,
                                 get_profile(None, "h100-sxm"), ParallelConfig(tp=1), dtype="bf16")
    mem = est.memory
    kv_bytes = mem.kv_capacity_tokens * mem.kv_bytes_per_token
    assert kv_bytes == pytest.approx(0.835 * 81559 * 2**20 - mem.weights_bytes, rel=2e-3)
    assert kv_bytes > 5.5e9 and mem.kv_capacity_tokens // 1152 >= 16


def test_llama_70b_fp8_trtllm_on_two_h200_holds_the_128_clients_of_the_row() -> None:
    # silicon row llama_3_1_70b h200 trtllm fp8 1024x8192 c128 tp2: GUARANTEED_NO_EVICT reserves
    # 9,216 tokens per request; free_gpu_memory_fraction 0.9 of the 143,771 MiB the driver reports minus
    # the weights (35.3 GB per GPU) holds 137 of them (with 141e9 B: 125, fewer than the 128 clients)
    from serveplan import get_model, get_profile
    from serveplan.sim.serving import engine_estimator
    from serveplan.specs.parallel import ParallelConfig

    est, _, _ = engine_estimator(get_engine("trtllm"), get_model("llama-3.1-70b"), get_hardware("h200"),
                                 get_profile(None, "h200"), ParallelConfig(tp=2), dtype="fp8", kv_dtype="fp8")
    assert est.memory.kv_capacity_tokens // 9216 >= 128


def test_frontend_time_is_read_in_microseconds_and_checked() -> None:
    from serveplan.specs.engine import engine_from_dict

    base = {"mechanism": "chunked-prefill", "tiers": [{"max_num_seqs": 8}]}
    spec = engine_from_dict({**base, "frontend": {"per_request_us": 1500}}, name="x")
    assert spec.frontend_s == pytest.approx(1.5e-3)
    assert engine_from_dict(base, name="x").frontend_s == 0.0
    for bad in (-1, "fast", float("nan"), True):
        with pytest.raises(SpecError, match="per_request_us"):
            engine_from_dict({**base, "frontend": {"per_request_us": bad}}, name="x")


def test_trtllm_fuses_gemm_input_quantization_and_vllm_does_not_say_so():
    from serveplan.specs.catalog import get_engine as _get
    assert _get("trtllm").fused_input_quantization
    assert "fused_input_quantization" in _get("trtllm").cites
    assert not _get("vllm").fused_input_quantization and not _get("sglang").fused_input_quantization


def test_eager_prefill_steps_pay_the_engines_host_work_per_module_and_decode_steps_do_not():
    # TensorRT-LLM and SGLang (0.5.5 line) run prefill steps outside CUDA graphs; their engine files
    # give the host's work per module of such a step (prefill_host_us: attention 478 us and MLP 91 us,
    # eager modules measured on one H100; MoE 750 us), vLLM and SGLang 0.5.23 none (compiled and
    # captured prefill). Hand derivation (BestServe Algorithm 1): Llama-3.1-8B FP8 on one H100, a
    # 64-token prompt, 32 layers whose modules each take less device time than their dispatch, so the
    # step is host-bound at no less than 32 x (478 + 91 + 2 x 5) us = 18.5 ms (norms keep the
    # profile's 5 us), against a few ms without; a decode step is the same with or without
    import dataclasses

    from serveplan import Estimator, ParallelConfig, StepBatch, get_model, get_profile
    from serveplan.specs.engine import engine_from_dict
    from serveplan.specs.profile import Module, Phase

    trt, sgl_old, sgl_new, vllm = (get_engine(n) for n in ("trtllm", "sglang-0.5", "sglang", "vllm"))
    assert trt.prefill_host_s == sgl_old.prefill_host_s == pytest.approx({"attention": 478e-6, "mlp": 91e-6,
                                                                           "moe": 750e-6})
    assert sgl_new.prefill_host_s == {} and vllm.prefill_host_s == pytest.approx({"moe": 500e-6})
    model, hw, prof = get_model("llama-3.1-8b"), get_hardware("h100-sxm"), get_profile("measured-h100-sxm")
    eager = trt.profile_for(prof)
    assert eager.dispatch(Module.ATTENTION, Phase.PREFILL) == pytest.approx(478e-6)
    assert eager.dispatch(Module.ATTENTION, Phase.DECODE) == eager.dispatch(Module.ATTENTION) == 30e-6
    assert eager.dispatch(Module.NORM, Phase.PREFILL) == 5e-6

    def step(spec, batch):
        return Estimator(model, hw, spec.profile_for(prof), ParallelConfig(tp=1), dtype="fp8").estimate(batch).total_s

    captured = dataclasses.replace(trt, prefill_host_s={})
    assert step(trt, StepBatch.prefill(1, 64)) >= 32 * (478 + 91 + 10) * 1e-6
    assert step(captured, StepBatch.prefill(1, 64)) < 0.5 * step(trt, StepBatch.prefill(1, 64))
    assert step(trt, StepBatch.decode(8, 1024)) == step(captured, StepBatch.decode(8, 1024))
    # a long prompt is bound by the device: each layer exposes at most its host work (Algorithm 1 per
    # layer), a small share of the step
    long_eager, long_captured = step(trt, StepBatch.prefill(1, 8192)), step(captured, StepBatch.prefill(1, 8192))
    assert 0 < long_eager - long_captured <= 32 * (478 + 91 + 10) * 1e-6 and long_eager < 1.15 * long_captured
    # the engine file's key is checked
    from importlib import resources

    import yaml

    raw = yaml.safe_load((resources.files("serveplan.specs.data.engines") / "trtllm-1.2.yaml").read_text())
    for bad, needle in (({"attn": 1}, "prefill_host_us key 'attn'; expected one of: norm, attention"),
                        ({"moe": -1}, "prefill_host_us.moe"), ([1], "prefill_host_us must map modules")):
        with pytest.raises(SpecError, match=needle):
            engine_from_dict({**raw, "prefill_host_us": bad}, name="t")


def test_vllm_pays_the_fused_moe_host_work_only_in_steps_larger_than_its_captured_graphs():
    # vLLM replays piecewise CUDA graphs of steps up to max_cudagraph_capture_size tokens, by default
    # min(2 x max_num_seqs x decode query length, 512) and at most the token budget
    # (vllm/config/vllm.py _set_cudagraph_sizes), and runs larger steps without a graph, where its fused
    # MoE (a custom op outside the compiled graph) costs 500 us of host work per layer (engine file).
    # Hand derivation: gpt-oss-120b has 36 MoE layers, so an uncaptured step whose layers each take less
    # device time than that is host-bound at no less than 36 x 500 us = 18 ms more than the device time
    # of its other modules; a step of at most 512 tokens is timed as if the engine had no host work.
    import dataclasses

    import numpy as np

    from serveplan import Estimator, ParallelConfig, StepBatch, get_model, get_profile
    from serveplan.estimator.step import Phase
    from serveplan.specs.engine import engine_from_dict

    vllm, trt = get_engine("vllm"), get_engine("trtllm")
    assert get_engine("vllm-0.11").prefill_graphs == vllm.prefill_graphs == (512, 2)
    assert vllm.graph_tokens() == 512 and vllm.graph_tokens(1024) == 512
    assert vllm.graph_tokens(64) == 128 and vllm.graph_tokens(64, query_len=4) == 512
    assert vllm.graph_tokens(1024, token_budget=256) == 256
    # rounded down to the sizes vLLM captures (1, 2, 4, multiples of 8, from 256 multiples of 16)
    assert [vllm.graph_tokens(n) for n in (1, 2, 3, 5, 130)] == [2, 4, 4, 8, 256]
    assert vllm.graph_tokens(1024, token_budget=300) == 288
    assert vllm.graph_tokens(9, dp=2) == 8 and vllm.graph_tokens(64, dp=2, token_budget=200) == 64   # per rank
    assert trt.prefill_graphs is None and trt.graph_tokens(64) == 0   # generation-only graphs
    model, hw, prof = get_model("gpt-oss-120b"), get_hardware("h100-sxm"), get_profile("measured-h100-sxm")
    assert vllm.profile_for(prof).prefill_graph_tokens == 512

    def est(spec):
        return Estimator(model, hw, spec.profile_for(prof), ParallelConfig(tp=2), dtype="mxfp4")

    eager, captured = est(vllm), est(dataclasses.replace(vllm, prefill_host_s={}))
    for n in (256, 512):
        assert eager.time(StepBatch.prefill(1, n)) == captured.time(StepBatch.prefill(1, n))
    t513, c513 = eager.time(StepBatch.prefill(1, 513)), captured.time(StepBatch.prefill(1, 513))
    assert t513 >= 36 * 500e-6 and t513 - c513 > 0.5 * 36 * 500e-6
    assert eager.time(StepBatch.decode(64, 2048)) == captured.time(StepBatch.decode(64, 2048))
    # a decode step too large for the graphs runs without one: the host dispatches every module (the
    # MoE layers' 500 us, the profile's dispatch for the others), as a profile without graphs would
    flat = vllm.profile_for(prof).with_(prefill_graph_tokens=0)
    no_graph = Estimator(model, hw, flat.with_(
        dispatch_hidden_in_decode=False, dispatch_s={**flat.dispatch_s, **flat.prefill_dispatch_s}),
        ParallelConfig(tp=2), dtype="mxfp4")
    graphed = Estimator(model, hw, flat, ParallelConfig(tp=2), dtype="mxfp4")
    big, small = StepBatch.decode(1024, 2048), StepBatch.decode(512, 2048)
    assert eager.time(big) == pytest.approx(no_graph.time(big), rel=1e-12) and eager.time(big) > graphed.time(big)
    assert eager.time(small) == pytest.approx(graphed.time(small), rel=1e-12)
    D = np.stack([eager.features(b) for b in (small, big)], axis=1)
    assert eager.step_times(D, Phase.DECODE) == pytest.approx([eager.time(small), eager.time(big)], rel=1e-9)
    # a table of prefill steps across the threshold takes each column's own rates
    batches = [StepBatch.prefill(1, n) for n in (256, 512, 513, 2048)]
    X = np.stack([eager.features(b) for b in batches], axis=1)
    assert eager.step_times(X, Phase.PREFILL) == pytest.approx([eager.time(b) for b in batches], rel=1e-9)
    # the engine file's key is checked
    base = {"mechanism": "chunked-prefill", "tiers": [{"max_num_seqs": 8}]}
    for bad, needle in (({"max_tokens": 0}, "prefill_graphs.max_tokens"), ({"max": 5}, "prefill_graphs must be"),
                        ({"max_tokens": 512, "per_sequence": "two"}, "prefill_graphs.per_sequence")):
        with pytest.raises(SpecError, match=needle):
            engine_from_dict({**base, "prefill_graphs": bad}, name="x")


def test_a_vllm_instance_captures_graphs_up_to_twice_its_sequences_per_rank():
    # the simulated instance's largest captured step follows its own limits (per data-parallel rank)
    from serveplan import get_model, get_profile
    from serveplan.sim import SimulationConfig, Workload
    from serveplan.sim.clock import Clocks
    from serveplan.sim.deployment import resolve
    from serveplan.specs.speculative import SpecDecodeConfig

    def cfg(**kw):
        return SimulationConfig(model=get_model("llama-3.1-8b"), hardware=get_hardware("h100-sxm"),
                                profile=get_profile("measured-h100-sxm"), engine="vllm", concurrency=4, rate=None,
                                workload=Workload.fixed(1024, 16, num_requests=8), **kw)

    def graphs(**kw):
        return resolve(cfg(**kw)).first.profile.prefill_graph_tokens

    assert graphs(tp=1, max_batch=8) == 16
    assert graphs(tp=1, max_batch=64, spec=SpecDecodeConfig.of("eagle", 3)) == 512   # 2 x 64 x (1 + 3)
    c, clocks = cfg(tp=1, max_batch=8), Clocks()   # one derived profile per graph bound: the clocks' memo hits
    assert resolve(c, clocks).first.profile is resolve(cfg(tp=1, max_batch=8), clocks).first.profile
    assert resolve(c, clocks).first.clock is resolve(c, clocks).first.clock
    assert graphs(tp=1, dp=2, max_batch=64) == 64
    assert graphs(tp=1) == 512
    assert graphs(tp=1, max_batch=512, token_budget=256) == 256
    # the engine notes say so where the model has the modules that pay it
    assert not any("without CUDA graphs" in n for n in cfg(tp=1).engine_setup.notes)
    moe = SimulationConfig(model=get_model("gpt-oss-120b"), hardware=get_hardware("h100-sxm"),
                           profile=get_profile("measured-h100-sxm"), engine="vllm", concurrency=4, rate=None,
                           workload=Workload.fixed(1024, 16, num_requests=8), tp=2, max_batch=64)
    assert any("steps of more than 128 tokens per rank run without CUDA graphs" in n and "moe 500 us" in n
               for n in moe.engine_setup.notes)
    # the note names each role's own bound, the one its steps are timed with
    pd = SimulationConfig(model=get_model("gpt-oss-120b"), hardware=get_hardware("h100-sxm"),
                          profile=get_profile("measured-h100-sxm"), engine="vllm", rate=1.0, strategy="1p1d",
                          workload=Workload.fixed(1024, 16, num_requests=8), tp=2, max_batch=64, prefill_max_batch=4)
    bounds = {s.role.value: s.profile.prefill_graph_tokens for s in resolve(pd).roles}
    note = next(n for n in pd.engine_setup.notes if "without CUDA graphs" in n)
    assert all(f"{b} tokens per rank ({role} instances)" in note for role, b in bounds.items()), (bounds, note)


def test_the_host_note_names_the_steps_that_pay_and_the_modules_the_model_has():
    vllm, trt = get_engine("vllm"), get_engine("trtllm")
    assert vllm.host_note(moe=True) == ("steps of more than 512 tokens per rank run without CUDA graphs: the host's "
                                        "work per layer (moe 500 us) is paid where it exceeds the device's")
    assert vllm.host_note(moe=True, graphs=16).startswith("steps of more than 16 tokens per rank")
    assert vllm.host_note(moe=False) is None   # a dense model has no module that pays it
    assert trt.host_note(moe=False) == ("steps with prompt tokens run without CUDA graphs: the host's work per "
                                        "layer (attention 478 us, mlp 91 us) is paid where it exceeds the device's")
    assert get_engine("sglang").host_note(moe=True) is None   # 0.5.23 captures prefill steps


def test_estimate_says_which_steps_pay_the_engines_host_work():
    import json

    from typer.testing import CliRunner

    from serveplan.cli import app

    args = ["estimate", "-m", "gpt-oss-120b", "-H", "h100-sxm", "--engine", "vllm", "--tp", "2", "--dtype", "mxfp4"]
    out = CliRunner().invoke(app, [*args, "-s", "1024"])
    assert out.exit_code == 0 and "vllm 0.33.0: steps of more than 512 tokens per rank run without" in out.output
    as_json = CliRunner().invoke(app, [*args, "-s", "1024", "--json"])
    assert as_json.exit_code == 0 and json.loads(as_json.output)["engine_note"].startswith("steps of more than 512")
    dense = CliRunner().invoke(app, ["estimate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--engine", "vllm",
                                     "--tp", "1", "-s", "1024"])
    assert dense.exit_code == 0 and "without CUDA graphs" not in dense.output
