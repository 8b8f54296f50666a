"""Memory figures, hand-checked (derivations in each test)."""

from __future__ import annotations

import pytest

from serveplan import DType, Estimator, InfeasibleError, ParallelConfig, get_hardware, get_model, get_profile


def test_llama2_70b_fp16_weights():
    # h=8192, ff=28672, 80 layers, 64 heads, 8 KV heads of 128, vocab 32000, untied head.
    # attention: 2*8192^2 (q, o) + 2*8192*1024 (k, v) = 150,994,944
    # MLP: 3*8192*28672 = 704,643,072; norms 2*8192 = 16,384 -> 855,654,400 per layer
    # x80 = 68,452,352,000; embeddings + head 2*32000*8192 = 524,288,000; final norm 8,192
    params = 68_452_352_000 + 524_288_000 + 8_192
    m = get_model("llama-2-70b")
    assert m.num_parameters() == params
    assert m.weight_bytes(DType.FP16) == 2 * params  # 137.95 GB


@pytest.mark.parametrize(
    "model, expected",
    [
        ("llama-2-70b", 2 * 8 * 128 * 80 * 2),   # GQA: K and V, 8 KV heads x 128, 80 layers, 2 B = 327,680
        ("llama-2-7b", 2 * 32 * 128 * 32 * 2),   # MHA: 32 heads x 128, 32 layers = 524,288
        ("deepseek-v3", (512 + 64) * 61 * 2),    # MLA: latent 512 + RoPE key 64, 61 layers = 70,272
    ],
)
def test_kv_bytes_per_token(model, expected):
    assert get_model(model).kv_bytes_per_token(DType.BF16) == expected


def test_opt_175b_weights_about_325_gb_as_flexgen_states():
    # FlexGen §1: "325 GB" for OPT-175B in fp16; 174.6e9 params x 2 B = 349.2e9 B = 325.2 GiB
    m = get_model("opt-175b")
    assert m.weight_bytes(DType.FP16) / 2**30 == pytest.approx(325, rel=0.01)


def test_llama2_7b_has_6_74e9_parameters():
    assert get_model("llama-2-7b").num_parameters() == pytest.approx(6.74e9, rel=0.002)


def test_tp_divides_weights_and_kv_per_device():
    m, hw, pr = get_model("llama-2-70b"), get_hardware("h100-sxm"), get_profile("default-gpu")
    e1 = Estimator(m, hw, pr, ParallelConfig(tp=2))
    e4 = Estimator(m, hw, pr, ParallelConfig(tp=4))
    assert e4.memory.weights_bytes == pytest.approx(e1.memory.weights_bytes / 2, rel=0.01)
    assert e4.memory.kv_bytes_per_token == pytest.approx(327_680 / 4)


def test_kv_heads_replicate_when_tp_exceeds_them():
    # Llama-3.1-8B: 32 query heads, 8 KV heads of 128; tp=8 leaves one KV head per device
    m = get_model("llama-3.1-8b")
    e = Estimator(m, get_hardware("h100-sxm"), get_profile("default-gpu"), ParallelConfig(tp=8))
    assert e.memory.kv_bytes_per_token == 2 * 1 * 128 * 32 * 2  # one KV head per device


def test_mla_latent_cache_replicated_on_every_tp_rank():
    m = get_model("deepseek-v3")
    e = Estimator(m, get_hardware("h200"), get_profile("default-gpu"), ParallelConfig(tp=8))
    assert e.memory.kv_bytes_per_token == (512 + 64) * 61 * 2


def test_weights_that_do_not_fit_raise_infeasible():
    e = Estimator(get_model("llama-2-70b"), get_hardware("a100-40g"), get_profile("default-gpu"), ParallelConfig(tp=1))
    with pytest.raises(InfeasibleError, match="weights need"):
        e.check_fits()


def test_kv_capacity_is_free_memory_over_kv_per_token():
    e = Estimator(get_model("llama-2-7b"), get_hardware("a100-80g"), get_profile("default-gpu"), ParallelConfig())
    mem = e.memory
    free = mem.device_memory_bytes * 0.9 - mem.weights_bytes - mem.activation_bytes
    assert mem.kv_capacity_tokens == int(free // mem.kv_bytes_per_token)
    assert 100_000 < mem.kv_capacity_tokens < 200_000  # ~57 GB free / 0.52 MB per token
