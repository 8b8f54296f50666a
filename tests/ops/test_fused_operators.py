"""The engines' fused operator list (``fused_operators``) against BestServe's eager one: the same
GEMM work, less memory traffic, hand-counted per operator; and how an engine file switches it on."""

from __future__ import annotations

import pytest

from serveplan import ParallelConfig, get_model, get_profile
from serveplan.estimator.api import estimate
from serveplan.ops.graph import build_layer_groups
from serveplan.specs.catalog import get_engine
from serveplan.specs.profile import AttentionImpl
from serveplan.units import DType


def _ops(model: str, tp: int, fused: bool, dtype: DType = DType.BF16) -> dict:
    groups = build_layer_groups(get_model(model), ParallelConfig(tp=tp), dtype=dtype, kv_dtype=DType.BF16,
                                attention_impl=AttentionImpl.FUSED, include_lm_head=True, fused_operators=fused)
    dense = next(g for g in groups if g.name == "dense")
    return {op.name: op for blk in dense.blocks for op in blk.ops}


@pytest.mark.parametrize("model, tp", [("llama-3.1-70b", 8), ("llama-3.1-8b", 1), ("qwen3-32b", 2)])
def test_fused_gemms_do_the_same_work_as_the_separate_ones(model, tp):
    eager, fused = _ops(model, tp, False), _ops(model, tp, True)
    ops = {**eager, **{f"f.{k}": v for k, v in fused.items()}}
    per_token = {k: op.flops.evaluate(n=1, ng=1) for k, op in ops.items()}
    assert per_token["f.qkv_proj"] == pytest.approx(per_token["q_proj"] + per_token["k_proj"] + per_token["v_proj"],
                                                    rel=1e-12)
    assert per_token["f.gate_up_proj"] == pytest.approx(per_token["gate_proj"] + per_token["up_proj"], rel=1e-12)
    gemm_eager = sum(op.flops.evaluate(n=1, ng=1) for op in eager.values() if op.rows is not None)
    gemm_fused = sum(op.flops.evaluate(n=1, ng=1) for op in fused.values() if op.rows is not None)
    assert gemm_fused == pytest.approx(gemm_eager, rel=1e-12)
    # the weights are the same bytes, read once per step
    assert sum(op.bytes.get("one", 0.0) for op in fused.values() if op.rows is not None) == pytest.approx(
        sum(op.bytes.get("one", 0.0) for op in eager.values() if op.rows is not None), rel=1e-12)


def test_fused_norm_rope_and_activation_traffic_by_hand():
    # Llama-3.1-70B at TP 8, bf16 activations (2 bytes): h = 8192, 64 query heads and 8 KV heads of
    # 128, ff = 28672. Per token:
    #   fused add + RMSNorm: read input and residual, write residual and output = 4 * 2 * 8192 = 65,536 B
    #     (BestServe's list: pow 4h, mean 2h + 2, add 4, rsqrt 4, mul 4h + 2, mul_weight 4h = 14h + 12 bytes
    #      = 114,700 B, and the MLP's residual add 4h / t = 4,096 B)
    #   RoPE in place on this device's 8 query heads and 1 KV head: read and write (8 + 1) * 128 values
    #     = 2 * 2 * 1152 = 4,608 B (BestServe's row 4, undivided: 2 * (8.5 * 8192 + 8.5 * 1024 + 256)
    #      = 157,184 B)
    #   silu_and_mul: read gate and up (2 * 3584), write 3584 = 3 * 2 * 3584 = 21,504 B
    eager, fused = _ops("llama-3.1-70b", 8, False), _ops("llama-3.1-70b", 8, True)
    assert fused["input_norm.fused_add_norm"].bytes.evaluate(n=1) == 65_536
    assert sum(eager[k].bytes.evaluate(n=1) for k in eager if k.startswith("input_norm.")) == 114_700
    assert fused["rope"].bytes.evaluate(n=1) == 4_608
    assert eager["rope"].bytes.evaluate(n=1) == 157_184
    assert fused["silu_and_mul"].bytes.evaluate(n=1) == 21_504
    assert "add" in eager and "add" not in fused     # the residual add runs inside the next norm
    # the norm weight is read once per step (8192 bf16 values)
    assert fused["input_norm.fused_add_norm"].bytes.get("one", 0.0) == 16_384


def test_serving_engines_run_the_fused_list_and_bestserve_keeps_its_own():
    for name in ("vllm", "vllm-0.11", "sglang", "sglang-0.5", "trtllm"):
        spec = get_engine(name)
        assert spec.fused_operators and "fused_operators" in spec.cites, name
    assert not get_engine("bestserve").fused_operators
    prof = get_profile("default-gpu")
    assert not prof.fused_operators
    assert prof.for_engine("vllm", fused_operators=True).fused_operators   # no engine curves: the flag alone
    assert not prof.for_engine("vllm").fused_operators


def test_estimate_as_an_engine_runs_it_is_faster_for_a_long_prefill():
    # Llama-3.1-70B FP8 at TP 8 on H100, one 8,192-token prompt: the fused list drops about 1.3 ms of
    # norms, RoPE and separate GEMMs per layer (80 layers): 420.6 ms -> 313.7 ms
    kw = dict(profile=None, parallel=ParallelConfig(tp=8), dtype="fp8", kv_dtype="fp8", batch=1, input_len=8192)
    plain = estimate("llama-3.1-70b", "h100-sxm", **kw)
    vllm = estimate("llama-3.1-70b", "h100-sxm", engine="vllm", **kw)
    bestserve = estimate("llama-3.1-70b", "h100-sxm", engine="bestserve", **kw)
    assert bestserve.step.total_s == plain.step.total_s
    assert 0.70 < vllm.step.total_s / plain.step.total_s < 0.80
    names = {op.name for op in vllm.step.ops}
    assert {"qkv_proj", "gate_up_proj", "silu_and_mul", "input_norm.fused_add_norm"} <= names
    assert not names & {"q_proj", "gate_proj", "input_norm.pow"}


def test_mla_down_projections_run_as_one_gemm_of_the_same_work():
    # DeepSeek-V3: h = 7168, q LoRA rank 1536, KV LoRA rank 512, RoPE key 64 per token:
    # one GEMM of 7168 x (1536 + 512 + 64) = 2 * 7168 * 2112 = 30,277,632 FLOP per token
    groups = {fused: build_layer_groups(get_model("deepseek-v3"), ParallelConfig(tp=8), dtype=DType.FP8,
                                        kv_dtype=DType.BF16, attention_impl=AttentionImpl.FUSED,
                                        include_lm_head=False, fused_operators=fused)
              for fused in (False, True)}
    ops = {fused: {op.name: op for g in gs for blk in g.blocks for op in blk.ops} for fused, gs in groups.items()}
    fused = ops[True]["mla.fused_qkv_a"].flops.evaluate(n=1, ng=1)
    assert fused == 2 * 7168 * (1536 + 512 + 64) == 30_277_632
    assert fused == sum(ops[False][k].flops.evaluate(n=1, ng=1) for k in ("mla.q_down", "mla.kv_down", "mla.k_rope"))
    assert not {"mla.q_down", "mla.kv_down", "mla.k_rope"} & set(ops[True])
