"""Invariants of the step estimate (Hypothesis property tests)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serveplan import Estimator, ParallelConfig, StepBatch, get_hardware, get_model, get_profile

MODELS = ["llama-2-7b", "codellama-34b", "opt-6.7b", "qwen3-32b", "mixtral-8x7b", "deepseek-v3"]
PROFILES = ["default-gpu", "bestserve-910b3"]
_cache: dict = {}


def est(model: str, profile: str, tp: int = 1) -> Estimator:
    key = (model, profile, tp)
    if key not in _cache:
        _cache[key] = Estimator(get_model(model), get_hardware("h100-sxm"), get_profile(profile), ParallelConfig(tp=tp))
    return _cache[key]


settings.register_profile("ci", max_examples=40, deadline=None)
settings.load_profile("ci")

model_st = st.sampled_from(MODELS)
profile_st = st.sampled_from(PROFILES)


@given(model_st, profile_st, st.integers(1, 64), st.integers(1, 4096))
def test_prefill_time_never_decreases_with_batch_or_length(model, profile, b, s):
    e = est(model, profile)
    t = e.time(StepBatch.prefill(b, s))
    assert e.time(StepBatch.prefill(b + 1, s)) >= t
    assert e.time(StepBatch.prefill(b, s + 1)) >= t


@given(model_st, profile_st, st.integers(1, 256), st.integers(1, 32768))
def test_decode_time_never_decreases_with_batch_or_context(model, profile, b, c):
    e = est(model, profile)
    t = e.time(StepBatch.decode(b, c))
    assert e.time(StepBatch.decode(b + 1, c)) >= t
    assert e.time(StepBatch.decode(b, c + 1)) >= t


@given(st.sampled_from(["llama-2-7b", "codellama-34b", "qwen3-32b", "opt-6.7b"]), profile_st,
       st.integers(1, 16), st.integers(1, 4096), st.booleans())
def test_tp_never_increases_per_device_compute(model, profile, b, s, decode):
    batch = StepBatch.decode(b, s) if decode else StepBatch.prefill(b, s)
    prev = None
    for tp in (1, 2, 4, 8):
        res = est(model, profile, tp).estimate(batch)
        compute = sum(m.compute_s * m.count for m in res.modules)
        if prev is not None:
            assert compute <= prev * (1 + 1e-12)
        prev = compute


@given(model_st, profile_st, st.integers(1, 32), st.integers(1, 4096), st.booleans())
def test_every_op_takes_the_longer_of_its_work_and_traffic_at_the_profile_rates(model, profile, b, s, decode):
    # BestServe eq. (3)/(5) by hand: W / (e_c S_c) and Q / (e_m S_m), attention kernels at their own
    # factors, the decode copies of eq. (12) at their kappa rates (no compute term)
    batch = StepBatch.decode(b, s) if decode else StepBatch.prefill(b, s)
    e = est(model, profile)
    prof, hw = get_profile(profile), get_hardware("h100-sxm")
    assert not prof.matmul_size_curve  # GEMMs at constant factors in these profiles
    eff = prof.decode if decode else prof.prefill
    kappa = {"kappa_update": prof.kappa_update, "kappa_repeat_kv": prof.kappa_repeat_kv,
             "kappa_upcast": prof.kappa_upcast}
    spec = {(g.name, op.name): op for g in e.groups for blk in g.blocks for op in blk.ops}
    peak, bw = hw.flops(e.dtype), hw.memory_bandwidth
    res = e.estimate(batch)
    for op in res.ops:
        o = spec[(op.group, op.name)]
        e_c, e_m = (eff.attn_compute, eff.attn_memory) if o.attention else (eff.compute, eff.memory)
        if op.bound in kappa:
            compute, memory = 0.0, op.bytes / (kappa[op.bound] or e_m * bw)
        else:
            compute, memory = op.flops / (e_c * peak), op.bytes / (e_m * bw)
        assert op.compute_s == pytest.approx(compute, rel=1e-12, abs=1e-18)
        assert op.memory_s == pytest.approx(memory, rel=1e-12, abs=1e-18)
        assert op.time_s == pytest.approx(max(compute, memory), rel=1e-12, abs=1e-18)
    # dispatch and communication only add to the layers' compute
    layer_compute = sum(m.compute_s * m.count for m in res.modules)
    assert res.total_s >= layer_compute * (1 - 1e-12)


ATTENTION_CORE = ("prefill.", "decode.", "mla.prefill.attention", "mla.decode.attention")


@given(st.sampled_from(["llama-2-7b", "codellama-34b", "qwen3-32b", "llama-3.1-8b"]), st.integers(1, 8),
       st.integers(16, 4096))
def test_prefill_flops_are_two_x_params_x_tokens_plus_attention(model, b, s):
    """Dense prefill: every weight is used once per token in a multiply-add (2 FLOP), so the GEMM
    FLOPs equal 2 x (layer weights + LM head weights for the last tokens); the rest is the
    attention term (QK^T, softmax, AV) plus elementwise work of a few FLOP per activation."""
    e = est(model, "default-gpu")
    m = e.model
    res = e.estimate(StepBatch.prefill(b, s))
    count = {"dense": m.num_hidden_layers, "lm_head": 1}
    total = sum(o.flops * count[o.group] for o in res.ops)
    attn = sum(o.flops * count[o.group] for o in res.ops if o.name.startswith(ATTENTION_CORE))
    layer_params = m.num_hidden_layers * (m.attention_params() + m.dense_mlp_params())
    two_pt = 2 * layer_params * b * s + 2 * m.hidden_size * m.vocab_size * b
    elementwise = total - attn - two_pt
    assert elementwise >= 0
    # elementwise work (norms, SiLU, RoPE, residual) is a few FLOP per activation value
    acts = m.num_hidden_layers * b * s * (20 * m.hidden_size + 10 * m.intermediate_size) + 10 * b * m.hidden_size
    assert elementwise <= acts
    assert abs(total - two_pt) <= attn + acts


def test_prefill_flops_of_llama2_7b_match_two_p_t_closely():
    """6.74e9 params: a 1x2048 prefill is ~2*6.48e9*2048 = 26.5 TFLOP of weights plus attention."""
    e = est("llama-2-7b", "default-gpu")
    res = e.estimate(StepBatch.prefill(1, 2048))
    total = sum(o.flops * (32 if o.group == "dense" else 1) for o in res.ops)
    assert total == pytest.approx(2 * 6.74e9 * 2048, rel=0.12)
