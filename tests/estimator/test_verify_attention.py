"""Attention of a speculative verify pass: every query token scores every key it sees, the cache
is read once per sequence (serveplan.ops.window.decode_features, SpecEstimator._verify)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serveplan import ParallelConfig, StepBatch, get_hardware, get_model, get_profile
from serveplan.estimator.speculative import SpecEstimator
from serveplan.estimator.step import Estimator
from serveplan.ops.base import FEATURE_INDEX
from serveplan.ops.window import decode_features, keys_at
from serveplan.specs.speculative import SpecDecodeConfig

DSV3 = get_model("deepseek-v3")
H200 = get_hardware("h200")
TP1 = ParallelConfig(tp=1)


def _op(est, batch: StepBatch, name: str, group: str | None = None):
    return next(o for o in est.estimate(batch).ops if o.name == name and (group is None or o.group == group))


def test_mla_verify_attention_work_is_per_query_token_and_its_cache_read_once():
    # DeepSeek-V3 config.json: 128 heads, kv_lora_rank 512, qk_rope_head_dim 64; absorbed decode
    # (FlashMLA's MQA mode, d_k = 576, d_v = 512): 2 * 128 * (576 + 512) = 278,528 FLOP per
    # (query token, key) pair on one layer at TP 1.
    # 32 sequences of 4000 keys (new token included), MTP K = 3: each sequence verifies 4 query
    # tokens at positions 4000..4003, causal, which see 4000 + 4001 + 4002 + 4003 = 16,006 keys:
    # 32 * 16,006 = 512,192 pairs -> 512,192 * 278,528 = 142,659,813,376 FLOP.
    # Bytes (bf16 cache and activations): latent cache of 4003 keys per sequence read once,
    # 32 * 4003 * 576 * 2 = 147,566,592; queries in and outputs out of 128 tokens,
    # 128 * 2 * 128 * (2 * 512 + 64) = 35,651,584; total 183,218,176.
    est = SpecEstimator(DSV3, H200, get_profile(None, "h200"), TP1, spec=SpecDecodeConfig(method="mtp", num_tokens=3))
    assert est.kv_dtype.bytes == 2
    batch = StepBatch.decode(32, 4000)
    op = _op(est, batch, "mla.decode.attention", "moe")
    assert op.flops == pytest.approx(142_659_813_376, rel=1e-12)
    assert op.bytes == pytest.approx(183_218_176, rel=1e-12)
    # a plain decode step: 32 * 4000 = 128,000 pairs -> 35,651,584,000 FLOP; the verify's work is
    # 512,192 / 128,000 = 4.0015 times it (q_len = K + 1 = 4, plus the drafts' own keys)
    plain = _op(Estimator(DSV3, H200, get_profile(None, "h200"), TP1), batch, "mla.decode.attention", "moe")
    assert plain.flops == pytest.approx(35_651_584_000, rel=1e-12)
    assert op.flops / plain.flops == pytest.approx(512_192 / 128_000, rel=1e-12)
    # its compute term grows with the work; at TP 1 it is the larger term (FlashMLA's deep dive:
    # compute-bound on H800 from h_q * s_q >= 128), where the plain decode's is the memory term
    assert op.compute_s == pytest.approx(plain.compute_s * 512_192 / 128_000, rel=1e-12)
    assert op.bound == "compute" and plain.bound == "memory"


def test_mla_verify_gemms_and_experts_take_k_plus_1_rows_per_sequence():
    # the verify's K + 1 tokens per sequence are rows of every projection (the absorbed decode
    # path's q_up, W^UK absorption and v_up included) and of the routed experts: their work is
    # exactly (K + 1) times a decode's; the cache append writes K + 1 latents per sequence
    k, b = 2, 16
    est = SpecEstimator(DSV3, H200, get_profile(None, "h200"), TP1, spec=SpecDecodeConfig(method="mtp", num_tokens=k))
    base = Estimator(DSV3, H200, get_profile(None, "h200"), TP1)
    batch = StepBatch.decode(b, 3000)
    for name in ("mla.decode.q_up", "mla.decode.absorb_uk", "mla.decode.v_up", "o_proj", "experts.gate_up",
                 "experts.down", "router"):
        assert _op(est, batch, name, "moe").flops == pytest.approx((k + 1) * _op(base, batch, name, "moe").flops,
                                                                   rel=1e-12), name
    assert _op(est, batch, "lm_head").flops == pytest.approx((k + 1) * _op(base, batch, "lm_head").flops, rel=1e-12)


@pytest.mark.parametrize("k", [1, 2, 5])
def test_verify_attention_work_scales_with_the_query_tokens_per_sequence(k):
    # the work of one sequence of context c verifying K drafts: (K + 1) * c + K (K + 1) / 2 pairs
    # (queries at c+1 .. c+K+1 of which the first sees c + 1 keys); FLOP per pair as a decode's
    est = SpecEstimator(DSV3, H200, get_profile(None, "h200"), TP1, spec=SpecDecodeConfig(method="mtp", num_tokens=k))
    base = Estimator(DSV3, H200, get_profile(None, "h200"), TP1)
    b, ctx = 8, 2000
    per_pair = _op(base, StepBatch.decode(b, ctx), "mla.decode.attention", "moe").flops / (b * ctx)
    pairs = b * ((k + 1) * ctx + k * (k + 1) / 2)
    assert _op(est, StepBatch.decode(b, ctx), "mla.decode.attention", "moe").flops == pytest.approx(
        pairs * per_pair, rel=1e-12)


def test_gqa_fused_verify_attention_charges_every_query_token():
    # Llama-3.1-8B: 32 query heads of 128, 8 KV heads; fused kernel (4 * 4096 + 5 * 32) FLOP per
    # pair (QK^T and PV at 2 * 128 per head, ~5 of online softmax per head). 16 sequences of 1000
    # keys verifying K = 2: 16 * (3 * 1000 + 3) = 48,048 pairs -> 48,048 * 16,544 = 794,906,112.
    # Cache read once: 16 * 1002 keys * 2 (K, V) * 8 * 128 * 2 B = 65,667,072 B; queries and
    # outputs of 48 tokens: 48 * 2 * 2 * 4096 = 786,432 B.
    m = get_model("llama-3.1-8b")
    hw = get_hardware("h100-sxm")
    est = SpecEstimator(m, hw, get_profile(), TP1, spec=SpecDecodeConfig(method="ngram", num_tokens=2))
    op = _op(est, StepBatch.decode(16, 1000), "decode.attention")
    assert op.flops == pytest.approx(794_906_112, rel=1e-12)
    assert op.bytes == pytest.approx(65_667_072 + 786_432, rel=1e-12)


def test_measured_decode_attention_curve_sees_sequences_not_query_tokens():
    # a measured decode curve (aiconfigurator fit) is a function of each sequence's length and of
    # the (sequence, KV head) pairs; a verify of K = 3 has 16 sequences of 1003 keys whose CTAs
    # hold 4 * 4 query rows (4 query tokens x 4 query heads per KV head), not 64 sequences
    m, hw = get_model("llama-3.1-8b"), get_hardware("h100-sxm")
    prof = get_profile(None, "h100-sxm")
    est = SpecEstimator(m, hw, prof, TP1, spec=SpecDecodeConfig(method="ngram", num_tokens=3))
    op = _op(est, StepBatch.decode(16, 1000), "decode.attention")
    cr = est._decode_rates.curves
    assert cr is not None and cr.decode_attention is not None
    fixed, comp, mem = cr.decode_attention.terms("decode", 1003.0, 16 * 8.0, 128.0, 4.0 * 32 / 8, op.flops, op.bytes,
                                                 cr.attention_peak_flops, cr.bandwidth)
    assert op.compute_s == pytest.approx(fixed + comp, rel=1e-12)
    assert op.memory_s == pytest.approx(fixed + mem, rel=1e-12)


def test_sliding_window_verify_reads_one_window_and_scores_every_query():
    # gpt-oss-120b alternates 128-token sliding-window and full layers: on a local layer a
    # sequence of 5000 keys reads the last query's window (128 keys); its 3 verify queries see
    # 128 keys each, 384 pairs per sequence: adxw = 256 per sequence
    adx, adxw = decode_features(3.0 * 10, 2.0 * 10, 5000.0 * 10, 128, False)
    assert float(adxw) == pytest.approx(2560.0)
    # full layers: 3 * 5000 - (0 + 1 + 2) = 14,997 pairs per sequence, 9,997 beyond the 5000 keys
    assert float(adx) == pytest.approx(99_970.0)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 6), st.integers(1, 3000), st.sampled_from([0, 64, 128, 4096]),
       st.booleans())
def test_decode_features_equal_the_sum_over_every_query(seqs, q, ctx, window, chunked):
    # brute force: each sequence's queries at positions ctx+1 .. ctx+q (1-based) see
    # ctx + j + 1 keys, or keys_at(position) on a local layer
    last = ctx + q
    nd, ndx, kvd = float(seqs * q), float(seqs * (q - 1)), float(seqs * last)
    adx, adxw = decode_features(nd, ndx, kvd, window, chunked)
    full = sum(ctx + j + 1 for j in range(q))
    assert float(adx) == pytest.approx(seqs * full - kvd, abs=1e-6)
    if window:
        local = sum(float(keys_at(ctx + j + 1, window, chunked)) for j in range(q))
        read = float(keys_at(last, window, chunked))
        assert float(adxw) == pytest.approx(seqs * (local - read), abs=1e-6)
    else:
        assert float(adxw) == 0.0


def test_plain_decode_has_no_extra_score_elements():
    est = Estimator(DSV3, H200, get_profile(None, "h200"), TP1)
    x = est.features(StepBatch.decode(64, 3000))
    assert x[FEATURE_INDEX["ndx"]] == 0.0 and x[FEATURE_INDEX["adx"]] == 0.0


def test_columnar_verify_times_equal_the_one_by_one_times_for_mla():
    # the simulator's decode tables vary the context sum; the extra score elements follow it
    from serveplan.estimator import columns

    est = SpecEstimator(DSV3, H200, get_profile(None, "h200"), ParallelConfig(tp=8),
                        spec=SpecDecodeConfig(method="mtp", num_tokens=2))
    keys = np.arange(4000.0, 4000.0 + 16 * 40, 16)
    cols = columns.step_times(est, StepBatch(decode_tokens=16.0, decode_keys=keys[0]), "decode", decode_keys=keys)
    one = [est.step_time(est.features(StepBatch(decode_tokens=16.0, decode_keys=float(kv)))) for kv in keys]
    assert np.allclose(cols, one, rtol=1e-12)
    assert all(math.isfinite(t) for t in cols)
