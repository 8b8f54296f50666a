"""Step times and memory of speculative decoding (serveplan.estimator.speculative)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serveplan import ParallelConfig, StepBatch, get_hardware, get_model, get_profile
from serveplan.errors import SpecError
from serveplan.estimator import columns
from serveplan.estimator.speculative import SpecEstimator, drafter_model
from serveplan.estimator.step import Estimator
from serveplan.specs.speculative import SpecDecodeConfig

M, HW, PR = get_model("llama-3.1-8b"), get_hardware("h100-sxm"), get_profile()
TP1 = ParallelConfig(tp=1)
BASE = Estimator(M, HW, PR, TP1)


def spec_est(**kw):
    return SpecEstimator(M, HW, PR, TP1, spec=SpecDecodeConfig(**kw))


def test_verify_pass_is_a_step_of_k_plus_1_tokens_per_sequence():
    # n-gram (no drafter), every draft accepted: the decode-only step yields K + 1 tokens, so its
    # time is the verify pass / (K + 1); the verify pass runs (K + 1) * b rows with K more keys
    # per sequence (cache read once)
    k, b, ctx = 3, 32, 1000
    est = spec_est(method="ngram", num_tokens=k, acceptance=1.0)
    verify = BASE.step_time(est._verify(BASE.features(StepBatch.decode(b, ctx))))
    x = BASE.features(StepBatch.decode(b, ctx))
    assert est._verify(x)[1] == (k + 1) * b  # feature n: GEMM rows
    assert math.isclose(est.time(StepBatch.decode(b, ctx)), verify / (k + 1), rel_tol=1e-12)
    assert verify >= BASE.time(StepBatch.decode(b, ctx))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 512), st.integers(1, 8000), st.integers(1, 6))
def test_with_no_acceptance_speculation_only_costs(b, ctx, k):
    est = spec_est(method="eagle", num_tokens=k, acceptance=0.0)
    assert est.time(StepBatch.decode(b, ctx)) > BASE.time(StepBatch.decode(b, ctx))


def test_columnar_decode_times_equal_the_one_by_one_times():
    est = spec_est(method="eagle", num_tokens=3)
    keys = np.arange(1000.0, 1000.0 + 64 * 50, 64)
    cols = columns.step_times(est, StepBatch(decode_tokens=64.0, decode_keys=keys[0]), "decode", decode_keys=keys)
    one = [est.step_time(est.features(StepBatch(decode_tokens=64.0, decode_keys=float(kv)))) for kv in keys]
    assert np.allclose(cols, one, rtol=1e-12)


def test_mixed_steps_keep_their_full_time():
    # a prompt chunk beside decodes: verify + draft, not divided by E (prompt tokens progress at
    # the engine's rate)
    est = spec_est(method="ngram", num_tokens=2, acceptance=1.0)
    batch = StepBatch.of([(256, 0)], [500] * 8)
    x = BASE.features(batch)
    assert math.isclose(est.time(batch), BASE.step_time(est._verify(x)), rel_tol=1e-12)


def test_drafter_weights_and_kv_come_out_of_the_kv_budget():
    # draft model llama-3.2-1b: its weights and its cache per token (16 layers x 8 KV heads x 64
    # x 2 (K, V) x 2 bytes = 32 KiB) beside the target's 128 KiB
    est = spec_est(method="draft", num_tokens=4, draft_model="llama-3.2-1b")
    dm = get_model("llama-3.2-1b")
    assert est.drafter_weights_bytes() == pytest.approx(dm.weight_bytes(), rel=1e-9)
    assert est.drafter_kv_bytes_per_token() == 16 * 8 * 64 * 2 * 2
    mem, base = est.memory, BASE.memory
    assert mem.weights_bytes == pytest.approx(base.weights_bytes + dm.weight_bytes())
    usable = mem.device_memory_bytes * mem.memory_utilization - mem.weights_bytes - mem.activation_bytes
    assert mem.kv_capacity_tokens == int(usable // (base.kv_bytes_per_token + 32768))
    # K lookahead slots per running sequence (vLLM num_lookahead_tokens)
    assert est.kv_capacity_tokens(100) == mem.kv_capacity_tokens - 400


def test_ngram_has_no_drafter_but_lookahead_slots():
    est = spec_est(method="ngram", num_tokens=3)
    assert est.drafter is None and est.memory.kv_capacity_tokens == BASE.memory.kv_capacity_tokens
    assert est.kv_capacity_tokens(10) == BASE.kv_capacity_tokens(10) - 30


def test_mtp_module_of_deepseek_v3_is_one_moe_block():
    # DeepSeek-V3 tech report §2.2 / HF model card: the MTP module holds 14B parameters with the
    # embedding and output head (2 x 129,280 x 7,168 = 1.85B) it shares with the main model; the
    # block alone is one MoE layer (256 x 3 x 7,168 x 2,048 = 11.3B experts + MLA + shared expert)
    assert get_model("deepseek-v3").num_mtp_layers == 1  # config.json num_nextn_predict_layers
    d = drafter_model(SpecDecodeConfig(method="mtp"), get_model("deepseek-v3"))
    assert d is not None and d.num_hidden_layers == 1 and d.moe_layer_set == frozenset({0})
    own = d.total_params - d.embedding_params()
    assert 11.0e9 < own < 12.5e9
    assert 13.0e9 < d.total_params < 14.5e9


def test_eagle_head_is_one_dense_layer_with_a_32k_draft_vocabulary():
    d = drafter_model(SpecDecodeConfig(method="eagle"), M)
    assert d is not None and d.num_hidden_layers == 1 and d.vocab_size == 32000 and not d.is_moe


def test_a_drafter_larger_than_the_target_is_refused():
    with pytest.raises(SpecError, match="not smaller than the target"):
        SpecEstimator(M, HW, PR, TP1, spec=SpecDecodeConfig(method="draft", num_tokens=2,
                                                             draft_model="llama-3.1-70b"))


def test_a_draft_model_with_another_vocabulary_is_refused():
    with pytest.raises(SpecError, match="vocabulary of 151,936 tokens"):
        SpecEstimator(M, HW, PR, TP1, spec=SpecDecodeConfig(method="draft", num_tokens=2, draft_model="qwen3-8b"))


def test_pipeline_parallelism_is_refused():
    with pytest.raises(SpecError, match="pp=2"):
        SpecEstimator(M, HW, PR, ParallelConfig(tp=1, pp=2), spec=SpecDecodeConfig(method="eagle"))


def test_estimate_api_and_its_breakdown_of_the_verify_pass():
    from serveplan import estimate

    spec = SpecDecodeConfig(method="eagle", num_tokens=3)
    res = estimate("llama-3.1-8b", "h100-sxm", parallel=TP1, batch=8, input_len=1000, output_len=50, phase="decode",
                   spec=spec)
    est = SpecEstimator(M, HW, get_profile(None, "h100-sxm"), TP1, spec=spec)
    assert math.isclose(res.total_s, est.time(StepBatch.decode(8, res.context_len)), rel_tol=1e-12)
    assert res.to_dict()["spec_method"] == "eagle"
    plain = estimate("llama-3.1-8b", "h100-sxm", parallel=TP1, batch=8, input_len=1000, output_len=50,
                     phase="decode")
    assert res.static is not None and plain.static is not None and res.static.itl_s < plain.static.itl_s
