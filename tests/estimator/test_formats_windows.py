"""Number formats (block scales, weight-only), local attention windows, NVL72 domains, and one
hand derivation of a decode step's traffic per new model type (derivations next to each case)."""

from __future__ import annotations

import pytest

from serveplan import DType, Estimator, ParallelConfig, SpecError, get_hardware, get_model, get_profile
from serveplan.estimator.batch import StepBatch
from serveplan.ops.window import causal_keys
from serveplan.sim.kv import KVCache
from serveplan.specs.hf_config import model_from_hf_config, quantization_from_config


def _est(model, hw="h100-sxm", **kw):
    par = kw.pop("parallel", ParallelConfig(tp=1))
    m = get_model(model) if isinstance(model, str) else model
    h = get_hardware(hw) if isinstance(hw, str) else hw
    return Estimator(m, h, get_profile("default-gpu"), par, **kw)


# ------------------------------------------------------------------------ formats
def test_block_scaled_bytes_per_weight():
    assert DType.NVFP4.bytes == 0.5 + 1 / 16          # E2M1 + one E4M3 scale per 16 values
    assert DType.MXFP4.bytes == 0.5 + 1 / 32          # E2M1 + one E8M0 scale per 32 values
    assert DType.FP8_BLOCK.bytes == 1 + 4 / (128 * 128)  # one fp32 scale per 128x128 block
    assert DType.W4A16.bytes == 0.5 + (2 + 0.5) / 128    # fp16 scale + 4-bit zero per group of 128
    assert DType.W8A16.bytes == 1 + (2 + 1) / 128


def test_gpt_oss_120b_in_mxfp4_fits_one_80gb_gpu():
    m = get_model("gpt-oss-120b")
    # routed experts: 36 layers x 128 x (3 x 2880 x 2880 + biases 2x2880 + 2880) = 114,701,598,720
    experts = 36 * 128 * (3 * 2880 * 2880 + 3 * 2880)
    rest = m.num_parameters() - experts  # attention, router, norms, embeddings stay bf16
    expected = experts * (0.5 + 1 / 32) + rest * 2  # = 60.94e9 + 4.26e9 = 65.19e9 bytes
    assert m.dtype is DType.MXFP4 and m.quantized_experts_only
    assert m.weight_bytes() == pytest.approx(expected) and expected < 80e9
    est = _est(m)
    est.check_fits()  # 65.2 GB + activations < 0.9 x 80 GB
    assert est.memory.kv_capacity_tokens > 50_000  # (72 - 65.2 - 0.1) GB / 73,728 B per token = 90k


def test_llama_70b_nvfp4_on_b200_is_a_quarter_of_fp16_plus_scales():
    m = get_model("llama-3.1-70b")
    embed = 2 * 128256 * 8192 + 8192           # untied embedding and LM head (+ final norm) stay bf16
    linear = m.num_parameters() - embed        # 68,452,352,000 layer weights
    fp16 = m.weight_bytes(DType.FP16)
    nvfp4 = m.weight_bytes(DType.NVFP4)
    assert nvfp4 == pytest.approx(linear * (0.25 + 1 / 32) * 2 + embed * 2)  # 1/4 of fp16 + 1/32 scales
    assert (nvfp4 - 2 * embed) / (fp16 - 2 * embed) == pytest.approx(0.28125)
    est = _est(m, "b200", dtype="nvfp4")
    est.check_fits()
    assert est.memory.weights_bytes == pytest.approx(nvfp4)
    assert est.peak_flops == 9.0e15  # native FP4 tensor cores


def test_weight_only_formats_compute_at_16_bit_peak():
    est = _est("llama-3.1-8b", dtype="w4a16")
    assert est.peak_flops == get_hardware("h100-sxm").peak_flops[DType.BF16]
    embed = 2 * 128256 * 4096 + 4096  # untied embedding and LM head (+ final norm) stay bf16
    ratio = (est.memory.weights_bytes - 2 * embed) / (_est("llama-3.1-8b").memory.weights_bytes - 2 * embed)
    assert ratio == pytest.approx((0.5 + 2.5 / 128) / 2)


def test_device_without_the_format_uses_the_closest_and_says_so():
    h100, b200 = get_hardware("h100-sxm"), get_hardware("b200")
    assert h100.compute_format(DType.NVFP4) is DType.BF16 and not h100.is_native(DType.NVFP4)
    assert b200.compute_format(DType.NVFP4) is DType.FP4 and b200.is_native(DType.NVFP4)
    assert get_hardware("mi300x").compute_format(DType.MXFP4) is DType.BF16
    assert get_hardware("mi355x").compute_format(DType.MXFP4) is DType.FP4
    assert get_hardware("t4").compute_format(DType.FP8) is DType.FP16


@pytest.mark.parametrize(
    "qc, dtype, experts_only, kv",
    [
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, DType.FP8_BLOCK, False, None),
        ({"quant_method": "fp8"}, DType.FP8, False, None),
        ({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}, DType.MXFP4, True, None),
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, DType.W4A16, False, None),
        ({"quant_method": "gptq", "bits": 8}, DType.W8A16, False, None),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"},
         DType.NVFP4, False, DType.FP8),
        ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"},
          "input_activations": None}}, "ignore": ["re:.*self_attn.*"]}, DType.W4A16, True, None),
        ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"},
          "input_activations": {"num_bits": 8}}}, "kv_cache_scheme": {"num_bits": 8, "type": "float"}},
         DType.FP8, False, DType.FP8),
    ],
)
def test_quantization_config_is_read(qc, dtype, experts_only, kv):
    assert quantization_from_config(qc, "m") == (dtype, experts_only, kv)


def test_unknown_quantization_method_names_the_supported_ones():
    cfg = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
           "num_attention_heads": 4, "vocab_size": 100, "quantization_config": {"quant_method": "hqq"}}
    with pytest.raises(SpecError, match="quant_method='hqq' is not supported; expected one of: fp8"):
        model_from_hf_config(cfg)


def test_bundled_quantized_checkpoints():
    assert get_model("qwen3-235b-a22b-fp8").dtype is DType.FP8_BLOCK
    assert get_model("kimi-k2.5").dtype is DType.W4A16 and get_model("kimi-k2.5").quantized_experts_only
    v31 = get_model("deepseek-v3.1")
    assert v31.dtype is DType.NVFP4 and v31.default_kv_dtype() is DType.FP8


# ------------------------------------------------------------------------ windows
def test_causal_window_sums_by_hand():
    # sliding W=4, 10 queries from position 1: 1+2+3+4 then 4 x 6 = 34
    assert causal_keys(0, 10, 4, False) == 34
    # chunked C=4, positions 4..13: 4, then 1,2,3,4, 1,2,3,4, 1 = 25
    assert causal_keys(3, 10, 4, True) == 25


def test_sliding_window_kv_per_sequence_stops_growing_on_local_layers():
    oss = get_model("gpt-oss-120b")
    per_tok_layer = 2 * 8 * 64 * 2  # K and V, 8 KV heads of 64, bf16 = 2,048 B
    # past the 128-token window only the 18 full-attention layers grow
    assert oss.kv_bytes_per_sequence(10_128, DType.BF16) - oss.kv_bytes_per_sequence(128, DType.BF16) == (
        18 * per_tok_layer * 10_000)
    assert oss.kv_bytes_per_sequence(100, DType.BF16) == 36 * per_tok_layer * 100  # inside the window
    mistral = get_model("mistral-7b-v0.1")  # every layer slides over 4,096 tokens
    assert mistral.kv_bytes_per_sequence(50_000) == mistral.kv_bytes_per_sequence(4096) == 131_072 * 4096
    # per device: TP 2 splits the 8 KV heads
    assert _est(mistral, parallel=ParallelConfig(tp=2)).kv_bytes_per_sequence(50_000) == 131_072 * 4096 / 2


def test_linear_attention_state_is_fixed_per_sequence():
    nxt = get_model("qwen3-next-80b-a3b")
    # 36 Gated DeltaNet layers: recurrent 32 x 128 x 128 + conv (2 x 2048 + 4096) x 3 values, bf16
    state = 36 * (32 * 128 * 128 + (2 * 2048 + 4096) * 3) * 2
    kv_tok = 12 * 2 * 2 * 256 * 2
    assert nxt.kv_bytes_per_sequence(0) == state
    assert nxt.kv_bytes_per_sequence(1000) == state + 1000 * kv_tok


def test_local_attention_work_is_bounded_by_the_window():
    est = _est("mistral-7b-v0.1")
    t = [est.time(StepBatch.decode(8, c)) for c in (4096, 8192, 65536)]
    assert t[0] == pytest.approx(t[1]) == pytest.approx(t[2])  # keys read stop at 4,096
    full = _est(get_model("mistral-7b-v0.1").with_(layer_types=(), sliding_window=0))
    assert full.time(StepBatch.decode(8, 65536)) > 2 * t[2]


def test_simulator_kv_owner_follows_the_window():
    est = _est("mistral-7b-v0.1")
    assert est.kv_is_bounded and est.kv_equivalent_tokens(100_000) == 4096
    assert est.kv_equivalent_tokens_fn()(100_000) == 4096 and est.kv_equivalent_tokens_fn()(100) == 100
    kv = KVCache(est.memory.kv_capacity_tokens, 16, [0, 0], est.kv_equivalent_tokens)
    kv.allocate(0, 100_000)   # a 100k-token prompt holds only its 4,096-token window: 256 blocks
    assert kv.blocks[0] == 256
    kv.append_tokens([0], [100_000])
    assert kv.blocks[0] == 256  # decoding past the window allocates nothing new
    oss = _est("gpt-oss-120b")  # half the layers slide over 128 tokens
    assert oss.kv_equivalent_tokens(10_128) == pytest.approx((18 * 10_128 + 18 * 128) / 36)


def test_simulated_capacity_grows_with_the_window():
    from serveplan.sim import SimulationConfig, Workload, simulate

    m = get_model("mistral-7b-v0.1")
    common = dict(hardware=get_hardware("h100-sxm"), profile=get_profile("default-gpu"), rate=1000.0,
                  workload=Workload.fixed(32_000, 1024, 64), tp=1, max_batch=128, strategy="1m")
    windowed = simulate(SimulationConfig(model=m, **common))
    full = simulate(SimulationConfig(model=m.with_(layer_types=(), sliding_window=0), **common))
    # 33k-token sequences: ~57 GB of cache holds 13 of them in full, 100+ of their 4k windows
    assert windowed.throughput_rps > 1.5 * full.throughput_rps


# ------------------------------------------------------------------------ NVL72
def test_gb200_nvl72_all_reduce_over_72_ranks_stays_on_nvlink():
    gb200 = get_hardware("gb200")
    assert gb200.devices_per_node == 4 and gb200.domain_size == 72
    assert gb200.link_for(72).bandwidth == 900e9 and gb200.link_for(73).bandwidth == 50e9
    # a 72-head model at TP 72: one attention all-reduce of n*h bf16 values per layer. The NVLink
    # Switch reduces in the network (NVLS, in_switch_reduction): each GPU sends its payload once
    # and receives the sum once, bytes / 900 GB/s + 2 * 3 us (estimator/collectives.py). The flat
    # ring of the old model (2 * 71/72 * bytes / 900 GB/s + 2 * 71 * 3 us = 0.45 ms) charged 142
    # serial latencies, more than the network path below.
    m = get_model("llama-3.1-8b").with_(num_attention_heads=72, num_key_value_heads=72, head_dim=64,
                                        intermediate_size=14400)
    est = _est(m, "gb200", parallel=ParallelConfig(tp=72))
    n, h = 1024, 4096
    step = est.estimate(StepBatch.prefill(1, n))
    attn = next(mt for mt in step.modules if mt.name == "attention")
    ring = (n * h * 2) / (900e9 * get_profile("default-gpu").prefill.comm) + 2 * 3e-6
    assert attn.comm_s == pytest.approx(ring, rel=1e-6)
    split = _est(m, get_hardware("gb200").with_(scale_up_domain=4), parallel=ParallelConfig(tp=72))
    # the same group over the 50 GB/s network when the domain ends at the 4-GPU tray (hierarchical:
    # reduce-scatter and all-gather in the tray, all-reduce of a quarter across 18 trays)
    attn_split = next(mt for mt in split.estimate(StepBatch.prefill(1, n)).modules if mt.name == "attention")
    assert attn_split.comm_s > 2 * ring


# ------------------------------------------------------------------------ one decode step per type
_TYPES = ["qwen1.5-moe-a2.7b", "qwen3-30b-a3b", "llama-4-scout", "gpt-oss-20b", "gemma-2-9b", "gemma-3-1b",
          "phi-4", "glm-4.5-air", "deepseek-v2-lite", "gpt-j-6b", "gpt-neox-20b", "falcon-7b",
          "mistral-7b-v0.1", "kimi-k2", "minimax-m2.5", "qwen3-next-80b-a3b", "qwen3.5-35b-a3b"]


@pytest.mark.parametrize("name", _TYPES)
def test_decode_step_reads_active_weights_and_the_attended_cache(name):
    """Batch-1 decode at context C on one device reads every weight a token touches (top-k and
    shared experts only, the embedding table not at all) and the cache it attends to: C keys on
    full layers, min(C, window) on local ones, the state (read and written) on linear layers.
    Activations add a little; the time is at least the traffic over peak bandwidth."""
    m = get_model(name)
    hw = "b200" if m.weight_bytes() > 150e9 else "h200"
    est = _est(m, hw, parallel=ParallelConfig(tp=8 if m.weight_bytes() > 150e9 else 1))
    C = 8192
    step = est.estimate(StepBatch.decode(1, C))
    counts = {}
    for mt in step.modules:
        counts[mt.group] = mt.count
    traffic = sum(o.bytes * counts.get(o.group, 1) for o in step.ops)
    t = est.parallel.tp
    layer_dt, expert_dt, embed_dt = m.weight_formats(est.dtype)
    inactive = m.num_moe_layers * (m.num_experts - m.num_experts_per_tok) * m.expert_params()
    embedding = m.vocab_size * m.hidden_size  # the lookup reads one row
    weights = est.memory.weights_bytes - (inactive / t) * expert_dt.bytes - embedding / t * embed_dt.bytes
    if m.tie_word_embeddings:  # the tied table is read once, as the LM head
        weights += embedding / t * embed_dt.bytes
    kv = est.kv_bytes_per_sequence(C) - est.state_bytes_per_sequence() + 2 * est.state_bytes_per_sequence()
    # MLA: the up-projections W^UQ, W^UK, W^UV are read once, by the absorbed decode path only
    # (ops/graph.py gates the prefill path's weight reads on prefill tokens); they used to be
    # charged to both paths, +1 copy of them in every decode step
    assert traffic == pytest.approx(weights + kv, rel=0.03)
    assert step.total_s >= traffic / get_hardware(hw).memory_bandwidth
