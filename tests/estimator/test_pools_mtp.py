"""DeepSeek's decode pool with multi-token prediction and DeepEP: the MTP module runs with the
deployment's communication, its weights (projection included) and cache are reserved, and the
pool's figures are per emitted token.

Golden: the DeepSeek-V3 checkpoint is "671B of the Main Model weights and 14B of the
Multi-Token Prediction (MTP) Module weights" (deepseek-ai/DeepSeek-V3 README); the module is one
MoE block, the projection ``M`` (``d x 2d``, tech report eq. 21) and, in the checkpoint, its own
copies of the embedding and output head.
"""

from __future__ import annotations

import pytest

from serveplan import Estimator, ParallelConfig, StepBatch, get_hardware, get_model, get_profile
from serveplan.estimator.pools import decode_pool
from serveplan.estimator.speculative import SpecEstimator, drafter_model
from serveplan.specs.comm import A2ABuffer, CommOptions, Overlap
from serveplan.specs.speculative import SpecDecodeConfig

EP144 = ParallelConfig(tp=1, dp=144, ep=144, redundant_experts=32)
LL = CommOptions.deepep(A2ABuffer.LOW_LATENCY)
MTP = SpecDecodeConfig(method="mtp", num_tokens=1, acceptance=0.85)


def _spec(comm: CommOptions | None = LL, spec: SpecDecodeConfig = MTP) -> SpecEstimator:
    return SpecEstimator(get_model("deepseek-v3"), get_hardware("h800"), get_profile(), EP144, spec=spec,
                         dtype="fp8", comm=comm)


def test_mtp_module_with_its_projection_is_the_published_14b() -> None:
    m = get_model("deepseek-v3")
    module = drafter_model(MTP, m)
    assert module is not None
    with_projection = module.total_params + 2 * m.hidden_size ** 2
    assert with_projection == pytest.approx(14e9, rel=0.05)


def test_mtp_drafter_runs_at_ep144_with_the_deployments_comm_and_no_second_buffer() -> None:
    est = _spec()
    dr = est.drafter
    assert dr is not None and dr.parallel.redundant_experts == 32 and dr.parallel.ep == 144
    assert dr.comm.overlap is Overlap.TWO_BATCH and dr.comm.buffer is A2ABuffer.NONE
    assert dr.memory.comm_buffer_bytes == 0 and est.memory.comm_buffer_bytes == pytest.approx(2.147e9, rel=1e-3)
    # projection 2 d^2 FP8 bytes on top of the block, the shared embedding and head left out
    dense_dt, _, embed_dt = dr.model.weight_formats(dr.dtype)
    assert est.drafter_weights_bytes() == pytest.approx(
        dr.weights_per_device() - dr.model.embedding_params() * embed_dt.bytes + 2 * 7168 ** 2 * dense_dt.bytes,
        rel=1e-9)


def test_mtp_reserves_its_weights_cache_and_lookahead() -> None:
    m, h, p = get_model("deepseek-v3"), get_hardware("h800"), get_profile()
    plain = Estimator(m, h, p, EP144, dtype="fp8", comm=LL)
    est = _spec()
    assert est.memory.weights_bytes == pytest.approx(plain.memory.weights_bytes + est.drafter_weights_bytes())
    assert est.memory.kv_bytes_per_token == pytest.approx(plain.memory.kv_bytes_per_token * 62 / 61)
    # with a buffer large enough not to bind, the KV cache (less one lookahead slot each) bounds the batch
    roomy = _spec(CommOptions.deepep(A2ABuffer.LOW_LATENCY, buffer_tokens_per_rank=512))
    d = decode_pool(roomy, context_len=4989, tokens_per_s_per_user=1.0)
    assert d.bound == "kv-memory"
    assert d.batch_per_rank == roomy.memory.kv_capacity_tokens // 144 // (4989 + 1)


def test_mtp_decode_pool_counts_emitted_tokens() -> None:
    est = _spec()
    d = decode_pool(est, context_len=4989, tokens_per_s_per_user=20, max_batch_per_rank=64)
    raw = est.time(StepBatch.decode(64 * 144, 4989)) * est.expected_tokens   # verify + draft
    assert d.step_s == pytest.approx(raw / 1.85, rel=1e-9)
    assert d.output_tokens_per_s_per_node == pytest.approx(64 * 144 / d.step_s / 18, rel=1e-9)
    # a verify of two tokens costs more than one plain step but less than two
    plain = Estimator(get_model("deepseek-v3"), get_hardware("h800"), get_profile(), EP144, dtype="fp8", comm=LL)
    t1 = plain.time(StepBatch.decode(64 * 144, 4989))
    assert t1 < raw < 2 * t1


def test_low_latency_buffer_caps_the_decode_batch() -> None:
    from serveplan.estimator.pools import a2a_buffer_batch_limit

    # 128 tokens per dispatch, two micro-batches: 256 sequences, 128 with one draft token each
    assert a2a_buffer_batch_limit(LL) == 256 and a2a_buffer_batch_limit(LL, 1) == 128
    assert a2a_buffer_batch_limit(CommOptions(buffer=A2ABuffer.LOW_LATENCY)) == 128   # no overlap: one dispatch
    assert a2a_buffer_batch_limit(CommOptions.deepep(A2ABuffer.NORMAL)) is None
    assert a2a_buffer_batch_limit(CommOptions()) is None
    d = decode_pool(_spec(), context_len=4989, tokens_per_s_per_user=1.0)
    assert d.batch_per_rank == 128 and d.bound == "a2a-buffer"
    # a larger buffer lifts the cap to the KV cache's bound
    big = _spec(CommOptions.deepep(A2ABuffer.LOW_LATENCY, buffer_tokens_per_rank=256))
    assert decode_pool(big, context_len=4989, tokens_per_s_per_user=1.0).bound == "kv-memory"
